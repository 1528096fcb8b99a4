"""Node facts for the node catalog (issue 3): version files, the Python stack, the
interactive-login environment, npu-smi board info, hccn_tool health facts, firewall state,
the checkpoint directory.  Registered into :data:`preflight.facts.FACTS` at import.

Every command is read-only.  The slow ones (``bash -lic``, the Python interpreter) run once
per host, never per NPU, each under its own inner ``timeout``.
"""

from __future__ import annotations

import shlex

from .facts import FactSpec, register
from .probe import INSTALL_PATHS, expand_home
from .parsers import hccn_tool as hccn
from .parsers import versions as v

# Version files. Search order for the toolkit (ascend-formats.md 3.3): $ASCEND_HOME_PATH,
# $ASCEND_TOOLKIT_HOME, ascend-toolkit/latest, cann, cann-* (8.5 layout), then the other
# ascend-toolkit/<version> folders and nnae, then the same in ~/Ascend (a non-root install).
# Duplicates (a symlink and its target) are dropped by the parser via readlink -f.
ASCEND_FILES = r"""
f() { [ -f "$2" ] && [ -r "$2" ] || return 0; printf '@@F\t%s\t%s\n' "$1" "$2"; head -c 65536 -- "$2"; printf '\n@@E\n'; }
# Links are resolved together at the end: one readlink for all, not one process each.
lk=(); lp=()
l() { [ -e "$2" ] || return 0; lk+=("$1"); lp+=("$2"); }
A=/usr/local/Ascend
pf_info=/etc/ascend_install.info
# The driver and firmware where their installers put them (--install-path): the paths
# /etc/ascend_install.info names; /usr/local/Ascend otherwise.  Each version file is read from
# there first, then from /usr/local/Ascend (the first found counts).
@INSTALL_PATHS@
D=${pf_drv:-$A} W=${pf_fw:-$A}
f driver "$D/driver/version.info"
[ "$D" = "$A" ] || f driver "$A/driver/version.info"
f firmware "$W/firmware/version.info"
[ "$W" = "$A" ] || f firmware "$A/firmware/version.info"
f install "$pf_info"
[ -d "$D/driver" ] || D=$A
l driver_dir "$D/driver"
for p in "$D/driver/lib64" "$D/driver/version.info" "$D/driver/tools" "$A/add-ons" /usr/local/dcmi; do l path "$p"; done
# Docker, podman, and a Kubernetes pod (containerd writes neither marker file; the service
# account mount or PID 1's cgroup give it away).
{ [ -f /.dockerenv ] || [ -f /run/.containerenv ] || [ -d /var/run/secrets/kubernetes.io ] \
  || grep -qsE '/(kubepods|docker|containerd|lxc)' /proc/1/cgroup; } && printf '@@C\n'
seen='|'
# A CANN installed by a non-root user lives in ~/Ascend (the driver always in /usr/local/Ascend).
H=${HOME:+${HOME%/}/Ascend}
[ -n "$H" ] && [ "$H" != "$A" ] && [ -d "$H" ] || H=
# PF_JOB_CANN_HOME: the ASCEND_HOME_PATH the inventory's env: gives the job (first: the job's CANN).
J=$PF_JOB_CANN_HOME; @HOME_J@
for r in "$J" "$ASCEND_HOME_PATH" "$ASCEND_TOOLKIT_HOME" "$A/ascend-toolkit/latest" "$A/cann" "$A"/cann-* "$A"/ascend-toolkit/* "$A/nnae/latest" \
         ${H:+"$H/ascend-toolkit/latest" "$H/cann" "$H"/cann-* "$H"/ascend-toolkit/* "$H/nnae/latest"}; do
  [ -n "$r" ] && [ -d "$r" ] || continue
  r=${r%/}
  case "$seen" in *"|$r|"*) continue;; esac
  seen="$seen$r|"
  l root "$r"
  for i in "$r"/*-linux/ascend_toolkit_install.info "$r"/*-linux/ascend_nnae_install.info "$r"/ascend_nnae_install.info; do f "install_info:$r" "$i"; done
  f "toolkit_version:$r" "$r/toolkit/version.info"
  f "kernels:$r" "$r/opp_kernel/version.info"
  for k in "$r"/opp/built-in/op_impl/ai_core/tbe/kernel/*/; do [ -d "$k" ] && { k=${k%/}; printf '@@K\t%s\t%s\n' "$r" "${k##*/}"; }; done
done
for r in "${ATB_HOME_PATH:+$ATB_HOME_PATH/../..}" "$A/nnal/atb/latest" ${H:+"$H/nnal/atb/latest"}; do [ -n "$r" ] && f atb "$r/version.info"; done
for s in "$A"/nnal/atb/latest/atb/cxx_abi_*/lib/libatb.so ${H:+"$H"/nnal/atb/latest/atb/cxx_abi_*/lib/libatb.so} "${ATB_HOME_PATH:+$ATB_HOME_PATH/lib/libatb.so}"; do [ -n "$s" ] && l libatb "$s"; done
real=()
# NUL-separated, so any path survives; a path readlink could not resolve would shift the rest,
# so then each is resolved alone.
[ ${#lp[@]} -gt 0 ] && mapfile -d '' -t real < <(readlink -f -z -- "${lp[@]}" 2>/dev/null)
for i in "${!lp[@]}"; do
  [ ${#real[@]} = ${#lp[@]} ] && t=${real[$i]} || t=$(readlink -f -- "${lp[$i]}")
  printf '@@L\t%s\t%s\t%s\n' "${lk[$i]}" "${lp[$i]}" "$t"
done
printf '@@DONE\n'
""".replace("@HOME_J@", expand_home("J")).replace("@INSTALL_PATHS@", INSTALL_PATHS)

# The interpreter a job would use ("$PF_PYTHON": python3 on the session PATH, or the inventory's
# `python`).  Installed distributions are read off their metadata folders on sys.path, as
# importlib.metadata finds them, by folder name: the packaging spec names them
# ``<name>-<version>.dist-info`` (``.egg-info`` for setuptools, ``-pyX.Y`` after), with '-' escaped
# in both parts, so the name splits at the first '-'.  Only a folder not named so has its
# METADATA/PKG-INFO header read.  importlib.metadata itself costs ~40 ms of imports plus an email
# parse of every METADATA (measured here, 115 packages: 114 ms of CPU for the probe through
# importlib.metadata, 43 ms this way).  Modules are located with find_spec for the top-level name
# and the packages' folders below it (find_spec("a.b") would import a, running its __init__):
# nothing is imported but importlib itself, so no NPU is touched.
PYTHON_TIMEOUT = 8  # seconds the job's interpreter has to list its packages (its own `timeout`)
# On the command line, not a here-document: bash before 5.1 (CentOS 7, RHEL 8, Ubuntu 20.04) writes
# every here-document to a temporary file in /tmp, which the probe must not, and cannot where /tmp is
# full or read-only.
PYTHON_STACK_SOURCE = r"""
import json, os, re, sys
# With -c the working directory (the login's home) heads sys.path: a torch/ or
# megatron/ folder, or a *.dist-info, sitting in ~ was read as installed; the job starts elsewhere.
sys.path[:] = [p for p in sys.path if p not in ("", ".")]
out = {"executable": sys.executable, "version": "%d.%d.%d" % sys.version_info[:3], "packages": {},
       "modules": {}, "path": [p for p in sys.path if p], "build_info": {}}
def header(folder):
    for leaf in ("METADATA", "PKG-INFO"):
        try:
            with open(os.path.join(folder, leaf), encoding="utf-8", errors="replace") as fh:
                got = {}
                for line in fh:
                    if not line.strip():
                        break
                    key, sep, val = line.partition(":")
                    if sep and key in ("Name", "Version") and key not in got:
                        got[key] = val.strip()
                return got.get("Name"), got.get("Version")
        except OSError:
            pass
    return None, None
try:
    seen = set()
    for base in sys.path:
        try:
            entries = sorted(os.listdir(base))
        except OSError:
            continue
        for entry in entries:
            stem, dot, kind = entry.rpartition(".")
            if kind not in ("dist-info", "egg-info"):
                continue
            parts = stem.split("-")
            if parts[1:] and parts[0] and parts[1]:
                name, version = parts[0], parts[1]
            else:
                name, version = header(os.path.join(base or ".", entry))
            key = "-".join(filter(None, name.replace("_", "-").replace(".", "-").lower().split("-"))) if name else ""
            if key and version and key not in seen:
                seen.add(key)
                out["packages"][name] = version
except Exception as exc:
    out["error"] = "package scan: %s" % exc
import importlib.util
from importlib.machinery import PathFinder


def locate(mod):
    # find_spec("a.b") imports package a (its __init__ runs): walk the packages' folders instead,
    # so that nothing on the node is imported.
    parts = mod.split(".")
    spec = importlib.util.find_spec(parts[0])
    for i in range(1, len(parts)):
        if spec is None or not spec.submodule_search_locations:
            return None
        spec = PathFinder.find_spec(".".join(parts[:i + 1]), list(spec.submodule_search_locations))
    return spec


def megatron_core(folder):
    # megatron/core/package_info.py: MAJOR = 0 / MINOR = 12 / PATCH = 1, read, not imported.
    try:
        with open(os.path.join(folder, "core", "package_info.py"), encoding="utf-8", errors="replace") as fh:
            text = fh.read(65536)
    except OSError:
        return None
    got = dict(re.findall(r"^(MAJOR|MINOR|PATCH)\s*=\s*(\d+)", text, re.M))
    return "%s.%s.%s" % (got["MAJOR"], got["MINOR"], got["PATCH"]) if len(got) == 3 else None


def git_head(root):
    try:
        with open(os.path.join(root, ".git", "HEAD"), encoding="utf-8", errors="replace") as fh:
            return fh.readline(200).strip()
    except OSError:
        return None


wanted = ["acl", "torch", "torch_npu", "vllm_ascend", "megatron", "mindspeed", "mindspeed_mm", "triton", "ray"]
wanted += [m for m in os.environ.get("PF_MODULES", "").split(",") if m]
folders = {}
for mod in wanted:
    try:
        spec = locate(mod)
        out["modules"][mod] = (spec.origin or "namespace") if spec else None
        folders[mod] = list(spec.submodule_search_locations or ()) if spec else []
    except Exception as exc:
        out["modules"][mod] = None
# MindSpeed and MindSpeed-MM are installed editable from git checkouts: the branch names
# the release (2.3.0_core_r0.12.1) where the package version does not.  MindSpeed-MM's guide
# copies Megatron-LM's megatron/ into its checkout, where only a job started there imports it.
out["checkouts"] = {}
for mod in ("mindspeed", "mindspeed_mm"):
    for folder in folders.get(mod, [])[:1]:
        root = os.path.dirname(os.path.realpath(folder))
        out["checkouts"][mod] = {"root": root, "head": git_head(root)}
for folder in folders.get("megatron", []) + [os.path.join(c["root"], "megatron") for c in out["checkouts"].values()]:
    version = megatron_core(folder)
    if version:
        out["megatron_core"] = {"path": folder, "version": version}
        break
try:
    spec = importlib.util.find_spec("vllm_ascend")
    if spec and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            p = os.path.join(loc, "_build_info.py")
            if os.path.isfile(p):
                for line in open(p, encoding="utf-8", errors="replace"):
                    k, sep, val = line.partition("=")
                    if sep and k.strip().startswith("__"):
                        out["build_info"][k.strip()] = val.strip().strip("'\"")
                break
except Exception:
    pass
print("@@PY " + json.dumps(out))
"""
PYTHON_STACK = (f"timeout -k 1 {PYTHON_TIMEOUT} \"$PF_PYTHON\" -B -c "
                + shlex.quote(PYTHON_STACK_SOURCE))

LOGIN_TIMEOUT = 8
# HISTFILE empty: an interactive bash whose .bashrc sets HISTFILESIZE (Ubuntu's sets 2000) cuts
# ~/.bash_history to that many lines as it reads the assignment; it saves its history on exit (and
# before an exec) to the HISTFILE a .bashrc may set again: unset before the end.  What the startup
# files themselves do (HISTFILESIZE with their own HISTFILE, `pyenv init`'s rehash) is what every
# login of the user does: it is how the environment a job starts in is made, and the reason this
# fact exists (README: read-only).  HISTFILE is the one variable not reported.
LOGIN_ENV = (f"HISTFILE= timeout -k 2 {LOGIN_TIMEOUT} bash -lic 'printf \"\\n%s\\n\" \"" + v.LOGIN_MARKER
             + "\"; unset HISTFILE; exec env -0' 2>/dev/null")

# The SoC name needs the board info of one chip: the first NPU id npu-smi lists (ids are labels,
# not 0..n-1), chip 0.  The card level of the same NPU adds the driver and firmware versions and
# npu-smi's own verdict on their pairing, which a container without the version files can read.
# The two board reads run side by side (the card level's few lines wait in a pipe), so the fact
# takes no longer than it did with the chip level alone.
BOARD = (r"""id=$("$PF_NPUSMI" info -m 2>/dev/null | awk '$1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ {print $1; exit}'); """
         r"""[ -n "$id" ] || id=0; """
         r"""exec 3< <("$PF_NPUSMI" info -t board -i "$id" 2>&1; echo "@@CARD_RC=$?"); """
         r""""$PF_NPUSMI" info -t board -i "$id" -c 0; chip=$?; """
         r"""echo; echo """ + v.BOARD_CARD_MARK + r"""; card=$(cat <&3); exec 3<&-; printf '%s\n' "$card"; """
         r"""[ "$chip" -eq 0 ] || case $card in *"@@CARD_RC=0"*) true ;; *) false ;; esac""")

FIREWALL = r"""
# iptables, nft and ufw live in /usr/sbin, off a non-root session's PATH on Debian: not found
# there is not "no firewall".
PATH=$PATH:/usr/sbin:/sbin
any=
if command -v firewall-cmd >/dev/null 2>&1; then any=1; printf 'firewalld=%s\n' "$(timeout 5 firewall-cmd --state 2>&1 | head -n1)";
elif command -v systemctl >/dev/null 2>&1; then s=$(timeout 5 systemctl is-active firewalld 2>/dev/null | head -n1); [ -n "$s" ] && { any=1; printf 'firewalld=%s\n' "$s"; }; fi
command -v ufw >/dev/null 2>&1 && { any=1; printf 'ufw=%s\n' "$(timeout 5 ufw status 2>&1 | head -n1)"; }
# Legacy iptables takes the xtables lock even to list, and without -w fails at once while another
# program holds it (kube-proxy, docker, firewalld often do): then it waits for the lock, within 5 s.
# -w is not given first: iptables before 1.4.20 does not know it.
ipt() { local t=$1; shift; r=$(timeout 5 "$t" "$@" 2>&1) && return 0
  case $r in *"xtables lock"*) r=$(timeout 5 "$t" -w "$@" 2>&1) && return 0
    [ -n "$r" ] || r="the xtables lock stayed held by another program for 5 s";;
  # iptables 1.8 legacy waits for the lock by itself: killed by timeout, it said nothing.
  "") r="no answer within 5 s (the xtables lock held by another program, or a hung iptables)";; esac; return 1; }
# INPUT's rules and those of the chains it jumps to whatever the packet (-A INPUT -j HARDEN: a drop
# there is INPUT's), as <key>=<rule> lines.  ufw's and firewalld's own chains are judged by their
# status lines above; Kubernetes' and the CNIs' (KUBE-FIREWALL drops marked packets only) are not a
# host firewall.
read_ipt() { local t=$1 k=$2 c
  if ipt "$t" -S INPUT; then rules=$r; [ -n "$rules" ] && { any=1; printf '%s\n' "$rules" | sed "s/^/$k=/"; }
    for c in $(printf '%s\n' "$rules" | awk '$1 == "-A" && $2 == "INPUT" && NF == 4 && $3 == "-j" &&
        $4 !~ /^(ACCEPT|DROP|REJECT|RETURN|LOG|ufw-.*|INPUT_.*|IN_.*|KUBE-.*|cali-.*|CILIUM_.*|FLANNEL.*)$/ {
        print $4 }' | head -n 20); do
      ipt "$t" -S "$c" && printf '%s\n' "$r" | sed "s/^/${k}_chain=/"
    done
  else any=1; rules=; printf '%s_unreadable=%s\n' "$k" "$(printf '%s\n' "$r" | head -n1)"; fi; }
if command -v iptables >/dev/null 2>&1; then
  # Legacy iptables (CentOS 7, EulerOS, alternatives set to legacy) run as root makes the kernel
  # load ip_tables and create an empty filter table just to list INPUT: where none is loaded there
  # is nothing to list, and nothing is made.  (Without root the listing is refused, and said so.)
  case $(iptables -V 2>/dev/null) in
    *nf_tables*) read_ipt iptables iptables ;;
    *) if [ "$(id -u)" != 0 ] || grep -qx filter /proc/net/ip_tables_names 2>/dev/null; then read_ipt iptables iptables
       else any=1; rules=; echo "iptables=-P INPUT ACCEPT"; fi ;;
  esac
  # iptables-nft lists its own tables only, and warns when legacy ones are loaded too (kube-proxy
  # or docker in legacy mode): a drop there drops as well.
  # Only its filter table holds INPUT: listing INPUT where only a legacy nat table exists (a CNI's
  # masquerade) would make the kernel create an empty legacy filter table, a change to the node.
  case $rules in *"iptables-legacy tables present"*)
    grep -qx filter /proc/net/ip_tables_names 2>/dev/null && command -v iptables-legacy >/dev/null 2>&1 &&
      read_ipt iptables-legacy iptables_legacy ;; esac
fi
# nftables-native rules (nftables.service, the nftables backend of firewalld) are not in iptables -S:
# the input-hook chains' policies, and their rules that drop or reject.
if command -v nft >/dev/null 2>&1; then
  if r=$(timeout 5 nft list ruleset 2>&1); then any=1; echo 'nft_read='; printf '%s\n' "$r" | awk '
    $1 == "table" { fam = $2; tbl = $3; next }
    $1 == "chain" { ch = $2; inp = 0; next }
    $1 == "}" { inp = 0; next }
    $1 == "type" && / hook input / { inp = 1; p = "accept"
      if (match($0, /policy [a-z]+/)) p = substr($0, RSTART + 7, RLENGTH - 7)
      print "nft=" fam " " tbl " " ch " policy " p; next }
    inp && /(^|[ \t])(drop|reject)([ \t;]|$)/ { sub(/^[ \t]+/, ""); print "nft=" fam " " tbl " " ch " rule " $0 }
  ' | head -n 200
  else any=1; printf 'nft_unreadable=%s\n' "$(printf '%s\n' "$r" | head -n1)"; fi
fi
[ -n "$any" ] || echo 'none='
true
"""

CHECKPOINT = r"""
d=$PF_CHECKPOINT_DIR
if [ -z "$d" ]; then echo unset; exit 0; fi
printf 'path=%s\n' "$d"
@HOME_D@
[ -e "$d" ] && echo exists=1 || echo exists=0
[ -d "$d" ] && echo dir=1 || echo dir=0
[ -w "$d" ] && echo writable=1 || echo writable=0
# Fields counted from the capacity column (NN%): a source or mount point with a space in it
# (//nas/ckpt share) shifted them, and "Used" was read as the space left.
[ -e "$d" ] && timeout 5 df -Pk -- "$d" 2>/dev/null | awk 'NR == 2 {
  for (c = 5; c <= NF && $c !~ /^([0-9]+%|-)$/; c++) ;
  if (NF < c) exit
  fs = $1; for (i = 2; i <= c - 4; i++) fs = fs " " $i
  m = $(c + 1); for (i = c + 2; i <= NF; i++) m = m " " $i
  print "avail_kb=" $(c - 1); print "fs=" fs; print "mount=" m }'
true
""".replace("@HOME_D@", expand_home("d"))

register(
    FactSpec("ascend.files", ASCEND_FILES, v.parse_ascend_files,
             display="cat /usr/local/Ascend/driver/version.info, firmware/version.info, the CANN install and "
                     "version files, nnal/atb/latest/version.info"),
    FactSpec("python.stack", PYTHON_STACK, v.parse_python_stack, tool="python", own_timeout=PYTHON_TIMEOUT,
             display="$PF_PYTHON -c 'importlib.metadata.distributions()' (the job's interpreter)"),
    FactSpec("session.env_login", LOGIN_ENV, v.parse_login_env, tool="bash-login", keep_locale=True,
             own_timeout=LOGIN_TIMEOUT,
             display="bash -lic env (an interactive login shell)"),
    FactSpec("npu_smi.board", BOARD, v.parse_board, tool="npu-smi",
             display="npu-smi info -t board -i <first NPU> -c 0"),
    FactSpec("hccn.net_health", '"$PF_HCCN" -i "$PF_DEV" -net_health -g', hccn.parse_net_health, tool="hccn_tool",
             per_device=True, display="hccn_tool -i {dev} -net_health -g"),
    FactSpec("hccn.netdetect", '"$PF_HCCN" -i "$PF_DEV" -netdetect -g', hccn.parse_netdetect, tool="hccn_tool",
             per_device=True, ok_rc=(0, 1, 13), ok_stderr=r"no .*(preset|set)|not (preset|set)",
             display="hccn_tool -i {dev} -netdetect -g"),
    FactSpec("hccn.link_stat", '"$PF_HCCN" -i "$PF_DEV" -link_stat -g', hccn.parse_link_stat, tool="hccn_tool",
             per_device=True, display="hccn_tool -i {dev} -link_stat -g"),
    FactSpec("net.firewall", FIREWALL, v.parse_firewall,
             display="firewall-cmd --state / systemctl is-active firewalld; ufw status; iptables -S INPUT; "
                     "nft list ruleset (its input-hook chains)"),
    FactSpec("storage.checkpoint", CHECKPOINT, v.parse_checkpoint,
             display="test -d/-w $checkpoint_dir; df -Pk $checkpoint_dir"),
)
