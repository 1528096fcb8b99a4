"""A simulated Ascend cluster for end-to-end tests: real sshd per node, no containers.

Each node is a network namespace (a veth named ``eth0`` into one bridge that lives in the
host namespace) plus a private mount and UTS namespace in which per-node folders are
bind-mounted over ``/usr/local/Ascend``, ``/usr/local/sbin``, ``/root`` and ``/dev``, and an
OpenSSH ``sshd`` listens on the node's address (198.18.K.(10+i), K picked per cluster).
The fake ``npu-smi`` / ``hccn_tool`` print the documented formats from a per-node state file
that tests rewrite from the host side (see ``fakes/``).

Needs root on Linux, ``/usr/sbin/sshd``, ``ip``, ``unshare``, ``nsenter``, ``ssh``,
``ssh-keygen`` (and ``iptables`` for :meth:`SimNode.firewall`).

Usage::

    with SimCluster() as c:
        n3 = c.node("node-03")
        with n3.set_npu(3, link="DOWN"):      # every fault is undoable, also as a context
            ...                               # run the product against c.inventory_path

Process model (one deviation from the plain ``ip netns exec ... sh -c 'setup; exec sshd'``):
the namespaces of a node are held by an *anchor* process (``sleep infinity``, started by
``ip netns exec NS unshare -m -u --propagation private sh -c '<setup>; exec sleep infinity'``),
and sshd is started into the anchor's namespaces with ``nsenter``. So the node keeps its
mounts, hostname and address while its sshd is stopped or restarted, and :meth:`SimNode.run`
works on a node whose sshd is down. Everything is started and stopped by pid.

Cleanup: :meth:`SimCluster.close` (also called from ``atexit`` and on a failed start) kills
every process in the cluster's network namespaces, deletes the veths, namespaces and bridge
and unmounts the tmpfs work directory. A cluster left behind by a killed test run is reaped by
the next :class:`SimCluster` (its owner pid is recorded under ``/run/simcluster``).
"""
from __future__ import annotations

import atexit
import copy
import fcntl
import json
import os
import random
import resource
import secrets
import select
import shlex
import sys
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Iterable, Sequence

__all__ = ["SimCluster", "SimNode", "Undo", "Listener", "SimClusterError", "missing_prerequisites",
           "nofile_ceiling", "make_state", "FAKES_DIR", "HEALTHY_ENV", "DEFAULT_NOFILE"]

FAKES_DIR = Path(__file__).resolve().with_name("fakes")
RUN_DIR = Path("/run/simcluster")          # lock file + one record per live cluster
SSHD = "/usr/sbin/sshd"
LOGIN_WAITS = 8  # nodes whose first login is being tried at once while a cluster starts
RESERVED_PORTS = "60000-60031,60400-60431"  # out of each node's ephemeral range (see _anchor_script)
NODE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
HEALTHY_ENV = {"HCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "eth0", "TP_SOCKET_IFNAME": "eth0"}
# What set_env.sh (CANN 8.2.RC1, nnal) and the FAQs' recommended exports give a healthy node; the fake
# Python stack (torch 2.6.0 / torch_npu 2.6.0 / MindSpeed 2.1.0 / megatron-core 0.12.1) is on PYTHONPATH.
_TK = "/usr/local/Ascend/ascend-toolkit/latest"
_ATB = "/usr/local/Ascend/nnal/atb/latest/atb/cxx_abi_1"
HEALTHY_ENV.update({
    "ASCEND_HOME_PATH": _TK, "ASCEND_TOOLKIT_HOME": _TK, "ASCEND_OPP_PATH": _TK + "/opp", "ASCEND_AICPU_PATH": _TK,
    "LD_LIBRARY_PATH": "/usr/local/Ascend/driver/lib64:%s/lib64:%s/lib" % (_TK, _ATB),
    "PYTHONPATH": "%s/python/site-packages:/usr/local/Ascend/.sim/site-packages" % _TK, "ATB_HOME_PATH": _ATB,
    "HCCL_CONNECT_TIMEOUT": "1200", "TASK_QUEUE_ENABLE": "2", "CPU_AFFINITY_CONF": "2",
    "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"})
HEALTHY_PACKAGES = {"torch": "2.6.0", "torch_npu": "2.6.0", "mindspeed": "2.1.0", "megatron_core": "0.12.1"}
CANN_VERSION = "8.2.RC1"
DEFAULT_NOFILE = 65536
TOOLS = {"npu-smi": "sbin/npu-smi", "pdsh": "sbin/pdsh", "hccn_tool": "ascend/driver/tools/hccn_tool"}
REQUIRED_TOOLS = ("ip", "unshare", "nsenter", "ssh", "ssh-keygen", "mount", "umount")

# Verbatim copy of shared/fixtures/ascend/files/driver-version-info/25.0.rc1.1.txt
DRIVER_VERSION_INFO = """\
Version=25.0.rc1.1
ascendhal_version=7.35.23
aicpu_version=1.0
tdt_version=1.0
log_version=1.0
prof_version=2.0
dvppkernels_version=1.1
tsfw_version=1.0
Innerversion=V100R001C21SPC002B220
compatible_version=[V100R001C17],[V100R001C18],[V100R001C19],[V100R001C20],[V100R001C21]
compatible_version_fw=[7.0.0,7.7.99]
package_version=25.0.rc1.1
"""
# Verbatim copy of shared/fixtures/ascend/files/firmware-version-info/7.7.0.1.231.txt
FIRMWARE_VERSION_INFO = """\
Version=7.7.0.1.231
firmware_version=1.0
package_version=25.0.rc1.1
compatible_version_drv=[23.0.0,23.0.0.],[24.0,24.0.],[24.1,24.1.],[25.0,25.0.]
"""

# Per-NPU values of the 8x910B4 capture (fixtures/ascend/npu-smi/info/a2-910b4-25.0.rc1.1-idle.txt).
_B4_POWER = [87.2, 82.7, 82.7, 89.1, 84.5, 84.8, 87.1, 81.6]
_B4_TEMP = [33, 33, 33, 34, 39, 37, 38, 37]
_B4_HBM_USED = [2654, 2654, 2654, 2654, 2654, 2654, 2654, 2653]
_B4_BUS = ["0000:C1:00.0", "0000:C2:00.0", "0000:81:00.0", "0000:82:00.0",
           "0000:01:00.0", "0000:02:00.0", "0000:41:00.0", "0000:42:00.0"]

# (name, major, minor, mode); davinciN are added per NPU (236, N).
_BASE_DEVICES = [("null", 1, 3, 0o666), ("zero", 1, 5, 0o666), ("full", 1, 7, 0o666),
                 ("random", 1, 8, 0o666), ("urandom", 1, 9, 0o666), ("tty", 5, 0, 0o666),
                 ("davinci_manager", 235, 0, 0o660), ("hisi_hdc", 237, 0, 0o660),
                 ("devmm_svm", 238, 0, 0o660)]


FAST_TOOLS = ("npu-smi", "hccn_tool")
_FAST_FRONT = r"""#!/bin/bash
# Simulated @PROG@ (simcluster): answers rendered from state.json, else the Python fake.
sim=/usr/local/Ascend/.sim
key="$*"; key=${key// /_}
r="$sim/rendered/@PROG@/$key"
if [ -z "$SIMCLUSTER_STATE" ] && [ -f "$r.rc" ]; then
  args=$(printf '"%s", ' "$@"); printf '{"prog": "@PROG@", "args": [%s], "t": %s, "pid": %s, "rendered": true}\n' \
    "${args%, }" "${EPOCHREALTIME:-0}" "$$" >> "$sim/calls.log"
  cat "$r.out"; cat "$r.err" >&2
  exit "$(cat "$r.rc")"
fi
exec /usr/bin/python3 -IS "$sim/fakes/@PROG@" "$@"
"""
_FAKE_MODULES: dict = {}


def _rendered_calls(prog: str, state: dict) -> list[list[str]]:
    ids = [str(n["id"]) for n in state.get("npus") or []]
    if prog == "hccn_tool":
        return [["-i", i, cmd, "-g"] for i in ids
                for cmd in ("-link", "-ip", "-tls", "-net_health", "-netdetect", "-link_stat", "-gateway")]
    calls = [["info"], ["info", "-m"], ["info", "-l"]]
    for i in sorted(set(ids), key=int):
        calls += [["info", "-t", "board", "-i", i], ["info", "-t", "board", "-i", i, "-c", "0"]]
    return calls


def _run_fake(prog: str, args: list[str], state_path: Path) -> tuple[str, str, int]:
    """Run a fake's main() in this process, as the node would run it."""
    import contextlib
    import importlib.machinery
    import importlib.util
    import io

    mod = _FAKE_MODULES.get(prog)
    if mod is None:
        loader = importlib.machinery.SourceFileLoader(f"simfake_{prog.replace('-', '_')}", str(FAKES_DIR / prog))
        mod = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
        loader.exec_module(mod)
        mod.log_call = lambda *a, **k: None  # rendering is not a call
        _FAKE_MODULES[prog] = mod
    mod.STATE = str(state_path)
    out, err = io.StringIO(), io.StringIO()
    saved = sys.argv
    sys.argv = [prog, *args]
    rc = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            mod.main()
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv = saved
    return out.getvalue(), err.getvalue(), rc


class SimClusterError(RuntimeError):
    pass


def make_state(npus: int = 8, chip: str = "910B4", node_index: int = 1, k: int = 0,
               nofile: int = DEFAULT_NOFILE) -> dict:
    """The state.json of a healthy node (the fakes' input). NPU values repeat the 8x910B4
    capture; NPU i of node n gets the device IP 29.1.K.(10n+i)."""
    entries = []
    for i in range(npus):
        j = i % 8
        q, r = divmod(node_index * 10 + i, 250)
        entries.append({
            "id": i, "health": "OK", "power": _B4_POWER[j], "temp": _B4_TEMP[j],
            "hbm_used": _B4_HBM_USED[j], "hbm_total": 32768,
            "bus_id": _B4_BUS[j] if i < 8 else "0000:%02X:00.0" % (0x10 + i),
            "link": "UP", "ip": "29.%d.%d.%d" % (1 + q, k, r), "netmask": "255.255.0.0",
            "gateway": "29.1.0.1", "tls": 0, "net_health": "Success", "netdetect": "29.1.0.1",
            "link_up_count": 1, "link_down_count": 0})
    return {"chip": chip, "driver_version": "25.0.rc1.1", "npu_smi_version": "25.0.rc1.1",
            "firmware_version": "7.7.0.1.231", "boot_time": int(time.time()) - 86400,
            "nofile": nofile, "npus": entries, "processes": [], "ping_fail": [], "overrides": {}}


def _ensure_sbin_on_path() -> None:
    """ip, iptables and mount live in /usr/sbin or /sbin; a root shell has them on PATH, but
    a CI job's environment may not."""
    parts = os.environ.get("PATH", "").split(os.pathsep)
    missing = [d for d in ("/usr/local/sbin", "/usr/sbin", "/sbin", "/usr/bin", "/bin") if d not in parts]
    if missing:
        os.environ["PATH"] = os.pathsep.join([p for p in parts if p] + missing)


def missing_prerequisites() -> list[str]:
    """What this machine lacks to run a SimCluster (empty list = fine)."""
    _ensure_sbin_on_path()
    missing = []
    if os.geteuid() != 0:
        missing.append("root (euid 0)")
    if not os.access(SSHD, os.X_OK):
        missing.append(SSHD + " (apt-get install openssh-server)")
    for tool in REQUIRED_TOOLS:
        if shutil.which(tool) is None:
            missing.append(tool)
    if not os.access("/usr/bin/python3", os.X_OK):
        missing.append("/usr/bin/python3 (used by the fake tools inside nodes)")
    return missing


def _run(args: Sequence[str], check: bool = True, timeout: float = 30, **kw) -> subprocess.CompletedProcess:
    kw.setdefault("stdin", subprocess.DEVNULL)
    p = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, **kw)
    if check and p.returncode != 0:
        raise SimClusterError("%s failed (rc %d): %s" % (shlex.join(args), p.returncode,
                                                          (p.stderr or p.stdout).strip()))
    return p


def _ip_batch(lines: Iterable[str], check: bool = True) -> None:
    text = "".join(line + "\n" for line in lines)
    if not text:
        return
    p = subprocess.run(["ip", "-batch", "-"], input=text, capture_output=True, text=True, timeout=30)
    if check and p.returncode != 0:
        raise SimClusterError("ip -batch failed: %s\n%s" % (p.stderr.strip(), text))


def _netns_pids(netns: str) -> list[int]:
    p = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True, timeout=10)
    return [int(x) for x in p.stdout.split()] if p.returncode == 0 else []


def _proc_starttime(pid: int) -> str | None:
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _kill(pid: int, sig: int = signal.SIGKILL) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _stop_popen(proc: subprocess.Popen | None, grace: float = 3.0) -> None:
    if proc is None:
        return
    if proc.poll() is None:
        _kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            _kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


def nofile_ceiling() -> int | None:
    """The highest ``ulimit -n`` a node can get here: None when unlimited (the harness can raise
    the hard limit), else this process's hard limit. Raising a hard limit needs
    CAP_SYS_RESOURCE, which some sandboxes drop even for root."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard == resource.RLIM_INFINITY:
        return None
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    if int(line.split()[1], 16) >> 24 & 1:      # CAP_SYS_RESOURCE
                        return None
    except (OSError, ValueError):
        pass
    return hard


def _sshd_version() -> tuple[int, int]:
    p = subprocess.run([SSHD, "-V"], capture_output=True, text=True)
    text = p.stderr + p.stdout
    try:
        ver = text.split("OpenSSH_", 1)[1].split(",", 1)[0].split()[0]
        major, minor = ver.split("p", 1)[0].split(".")[:2]
        return int(major), int(minor)
    except (IndexError, ValueError):
        return (0, 0)


def _atomic_write(path: Path, data: str, mode: int = 0o644) -> None:
    tmp = path.with_name(".%s.%d.tmp" % (path.name, os.getpid()))
    tmp.write_text(data)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def _tail(path: Path, n: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


class Undo:
    """The way back from one change. Call ``undo()`` (or the object), or use it as a context
    manager: ``with node.set_npu(3, link="DOWN"): ...`` reverts on exit. Undoing twice is a no-op."""

    def __init__(self, fn, value=None):
        self._fn = fn
        self.value = value
        self.done = False

    def undo(self) -> None:
        if not self.done:
            self.done = True
            self._fn()

    __call__ = undo

    def __enter__(self):
        return self if self.value is None else self.value

    def __exit__(self, *exc):
        self.undo()
        return False


class Listener:
    """A TCP listener inside a node (accepts and closes connections). Context manager."""

    def __init__(self, node: "SimNode", port: int, address: str):
        self.node, self.port, self.address = node, port, address
        code = ("import socket,sys\n"
                "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
                "s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(128)\n"
                "print('listening', flush=True)\n"
                "while True:\n"
                "    c, _ = s.accept(); c.close()\n")
        self.proc = subprocess.Popen(
            node._nsenter() + ["/usr/bin/python3", "-IS", "-c", code, address, str(port)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True, text=True)
        ready, _, _ = select.select([self.proc.stdout], [], [], 10)
        line = self.proc.stdout.readline() if ready else ""
        if line.strip() != "listening":
            err = self.proc.stderr.read() if self.proc.poll() is not None else "(timeout)"
            _stop_popen(self.proc)
            raise SimClusterError("listener on %s:%d in %s did not start: %s" % (address, port, node.name, err))
        self.pid = self.proc.pid
        node._listeners.append(self)

    def stop(self) -> None:
        _stop_popen(self.proc, grace=1)
        if self in self.node._listeners:
            self.node._listeners.remove(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False


class SimNode:
    """One simulated node. Attributes: ``name``, ``address``, ``netns``, ``index`` (1-based),
    ``state`` (the dict behind state.json), ``env`` (exports of /root/.bashrc), ``nofile``,
    and host-side folders ``dir``, ``ascend_dir`` (/usr/local/Ascend), ``sbin_dir``
    (/usr/local/sbin), ``root_dir`` (/root), ``dev_dir`` (/dev)."""

    def __init__(self, cluster: "SimCluster", name: str, index: int, npus: int, chip: str):
        self.cluster = cluster
        self.name = name
        self.index = index
        self.address = "198.18.%d.%d" % (cluster.k, 10 + index)
        self.netns = "sim%s-%s" % (cluster.id, name)
        self.host_if = "sim%sh%d" % (cluster.id, index)     # host end of the veth (in the bridge)
        self.peer_if = "sim%sp%d" % (cluster.id, index)     # node end before it is renamed eth0
        self.dir = cluster.workdir / name
        self.ascend_dir = self.dir / "ascend"
        self.sbin_dir = self.dir / "sbin"
        self.root_dir = self.dir / "root"
        self.dev_dir = self.dir / "dev"
        self.state_path = self.ascend_dir / ".sim" / "state.json"
        self.calls_path = self.ascend_dir / ".sim" / "calls.log"
        self.host_key = self.dir / "ssh_host_ed25519_key"
        self.sshd_config = self.dir / "sshd_config"
        self.sshd_log = self.dir / "sshd.log"
        self.anchor_log = self.dir / "anchor.log"
        self.env = dict(HEALTHY_ENV)
        self.nofile = cluster.default_nofile
        self.sshd_options: dict[str, str] = dict(cluster.sshd_options)
        self.anchor: subprocess.Popen | None = None
        self.sshd: subprocess.Popen | None = None
        self._listeners: list[Listener] = []
        self._netns_added = False
        self._veth_added = False
        self._npus, self._chip = npus, chip
        self._host_key_bytes: dict[Path, bytes] = {}
        self.state = self._initial_state(npus, chip)

    def __repr__(self):
        return "<SimNode %s %s>" % (self.name, self.address)

    # ------------------------------------------------------------------ setup
    def _initial_state(self, npus: int, chip: str) -> dict:
        return make_state(npus, chip, node_index=self.index, k=self.cluster.k,
                          nofile=self.cluster.default_nofile)

    def _prepare_files(self, npus: int) -> None:
        for d in (self.ascend_dir / "driver" / "tools", self.ascend_dir / "firmware",
                  self.ascend_dir / ".sim", self.sbin_dir, self.root_dir / ".ssh", self.dev_dir / "pts",
                  self.dev_dir / "shm", self.dir / "ovl" / "upper" / "Ascend", self.dir / "ovl" / "work",
                  self.dir / "etc"):
            d.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root_dir, 0o700)
        os.chmod(self.dev_dir / "shm", 0o1777)
        (self.ascend_dir / "driver" / "version.info").write_text(DRIVER_VERSION_INFO)
        (self.ascend_dir / "firmware" / "version.info").write_text(FIRMWARE_VERSION_INFO)
        self._write_cann()
        for tool in TOOLS:
            self.restore_tool(tool)
        self.save_state()
        self.calls_path.touch()
        for name, major, minor, mode in _BASE_DEVICES:
            self.add_device(name, major, minor, mode)
        for i in range(npus):
            self.add_device("davinci%d" % i, 236, i, 0o660)
        for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                             ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2"),
                             ("ptmx", "pts/ptmx")):
            os.symlink(target, self.dev_dir / name)
        c = self.cluster
        ssh = self.root_dir / ".ssh"
        shutil.copyfile(c.authorized_keys_path, ssh / "authorized_keys")
        shutil.copyfile(c.identity_file, ssh / "id_ed25519")
        shutil.copyfile(c.identity_file.with_suffix(".pub"), ssh / "id_ed25519.pub")
        for f in ("authorized_keys", "id_ed25519"):
            os.chmod(ssh / f, 0o600)
        self._write_bashrc()
        # Debian's default /root/.profile: login shells read .bashrc too.
        (self.root_dir / ".profile").write_text(
            '# ~/.profile (simcluster; as Debian ships it)\n'
            'if [ "$BASH" ]; then\n  if [ -f ~/.bashrc ]; then\n    . ~/.bashrc\n  fi\nfi\n')

    def _write_node_known_hosts_and_hosts(self) -> None:
        c = self.cluster
        lines = ["%s,%s %s" % (n.name, n.address, n.host_pub) for n in c.nodes]
        (self.root_dir / ".ssh" / "known_hosts").write_text("\n".join(lines) + "\n")
        hosts = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback",
                 "%s\t%s" % (c.gateway, "simcluster-controller")]
        hosts += ["%s\t%s" % (n.address, n.name) for n in c.nodes]
        (self.dir / "etc" / "hosts").write_text("\n".join(hosts) + "\n")

    @property
    def host_pub(self) -> str:
        """``ssh-ed25519 AAAA...`` of this node's host key (no comment)."""
        return " ".join(self.host_key.with_suffix(".pub").read_text().split()[:2])

    def _write_sshd_config(self) -> None:
        c = self.cluster
        opts = {
            "Port": "22", "ListenAddress": self.address, "AddressFamily": "inet",
            "HostKey": str(self.host_key), "PidFile": str(self.dir / "sshd.pid"),
            "AuthorizedKeysFile": str(c.authorized_keys_path),
            "PasswordAuthentication": "no", "KbdInteractiveAuthentication": "no",
            "PermitRootLogin": "prohibit-password", "UsePAM": "no", "StrictModes": "no",
            "MaxStartups": "100:30:200", "LogLevel": "VERBOSE", "PrintMotd": "no",
            "Subsystem": "sftp internal-sftp",
        }
        if c.sshd_version >= (9, 8):
            opts["PerSourcePenalties"] = "no"
        opts.update({k: str(v) for k, v in self.sshd_options.items() if v is not None})
        for k in [k for k, v in self.sshd_options.items() if v is None]:
            opts.pop(k, None)
        text = "# simcluster node %s\n" % self.name + "".join("%s %s\n" % kv for kv in opts.items())
        self.sshd_config.write_text(text)

    def _anchor_script(self) -> str:
        q = shlex.quote
        d = self.dir
        return "\n".join([
            "set -e",
            "hostname %s" % q(self.name),
            "ip link set lo up",
            # HCCL's port blocks (60000-60031, and the held-port test's) lie in the ephemeral range
            # (32768-60999): an outgoing connection's local port, or its TIME_WAIT, now and then took
            # one, and the run rightly reported the port held. Reserved, as our remedy tells a cluster.
            "{ echo %s > /proc/sys/net/ipv4/ip_local_reserved_ports; } 2>/dev/null || true" % RESERVED_PORTS,
            "ip link set %s name eth0" % q(self.peer_if),
            "ip addr add %s/24 dev eth0" % self.address,
            "ip link set eth0 up",
            # an overlay only to get a mount point for /usr/local/Ascend without touching the host
            "mount -t overlay simcluster -o lowerdir=/usr/local,upperdir=%s,workdir=%s /usr/local"
            % (q(str(d / "ovl" / "upper")), q(str(d / "ovl" / "work"))),
            "mount --bind %s /usr/local/Ascend" % q(str(self.ascend_dir)),
            "mount --bind %s /usr/local/sbin" % q(str(self.sbin_dir)),
            "mount --bind %s /root" % q(str(self.root_dir)),
            "mount --bind %s /dev" % q(str(self.dev_dir)),
            "mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts /dev/pts",
            "mount --bind %s /etc/hosts" % q(str(d / "etc" / "hosts")),
            "echo ready",
            "exec sleep infinity",
        ])

    def _start_anchor(self) -> subprocess.Popen:
        with open(self.anchor_log, "ab") as log:
            self.anchor = subprocess.Popen(
                ["ip", "netns", "exec", self.netns, "unshare", "-m", "-u", "--propagation", "private",
                 "sh", "-c", self._anchor_script()],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log, start_new_session=True,
                env={"PATH": NODE_PATH, "LANG": "C.UTF-8"})
        return self.anchor

    def _wait_anchor(self, deadline: float) -> None:
        out = self.anchor.stdout
        ready, _, _ = select.select([out], [], [], max(0.0, deadline - time.monotonic()))
        line = out.readline().decode(errors="replace").strip() if ready else ""
        out.close()
        self.anchor.stdout = None
        if line != "ready":
            raise SimClusterError("node %s: namespace setup failed:\n%s" % (self.name, _tail(self.anchor_log)))

    def _nsenter(self) -> list[str]:
        if self.anchor is None or self.anchor.poll() is not None:
            raise SimClusterError("node %s has no running namespace anchor" % self.name)
        return ["nsenter", "-t", str(self.anchor.pid), "-n", "-m", "-u", "--"]

    def _spawn_sshd(self) -> None:
        self._write_sshd_config()
        n = int(self.nofile)
        with open(self.sshd_log, "ab") as log:
            log.write(("--- simcluster: starting sshd (nofile %d) at %s\n" % (n, time.ctime())).encode())
            log.flush()
            self.sshd = subprocess.Popen(
                self._nsenter() + ["sh", "-c", "ulimit -n %d && exec %s -D -e -f %s"
                                   % (n, SSHD, shlex.quote(str(self.sshd_config)))],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                env={"PATH": NODE_PATH, "LANG": "C.UTF-8"})

    def _wait_sshd(self, timeout: float, options: Sequence[str] = ()) -> None:
        deadline = time.monotonic() + timeout
        last = None
        while True:
            if self.sshd.poll() is not None:
                raise SimClusterError("node %s: sshd exited with %s:\n%s"
                                      % (self.name, self.sshd.returncode, _tail(self.sshd_log)))
            try:
                last = self.ssh("true", timeout=5, connect_timeout=2, options=options)
                if last.returncode == 0:
                    return
            except subprocess.TimeoutExpired:
                pass
            if time.monotonic() > deadline:
                raise SimClusterError("node %s: sshd on %s does not accept a login after %.0f s: %s\n%s"
                                      % (self.name, self.address, timeout,
                                         last.stderr.strip() if last else "timeout", _tail(self.sshd_log)))
            time.sleep(0.05)

    # ------------------------------------------------------------------ state and fakes
    def save_state(self) -> None:
        """Rewrite state.json from ``self.state`` (atomically: the fakes may be reading it), and
        the fakes' rendered answers with it."""
        _atomic_write(self.state_path, json.dumps(self.state, indent=1) + "\n")
        self._render()

    def _render(self) -> None:
        """Pre-compute what the fakes answer to the read-only calls a probe makes, so each call
        costs a `cat` instead of a Python start-up (the suite makes thousands). Programs with
        overrides, and any call not rendered (pings, set forms), still run the Python fake."""
        base = self.state_path.parent / "rendered"
        for prog in FAST_TOOLS:
            target = base / prog
            fresh = base / f".{prog}.new"
            old = base / f".{prog}.old"
            for d in (fresh, old):
                shutil.rmtree(d, ignore_errors=True)
            if (self.state.get("overrides") or {}).get(prog):
                shutil.rmtree(target, ignore_errors=True)
                continue
            fresh.mkdir(parents=True)
            for args in _rendered_calls(prog, self.state):
                out, err, rc = _run_fake(prog, args, self.state_path)
                stem = fresh / "_".join(args)
                stem.with_name(stem.name + ".out").write_text(out)
                stem.with_name(stem.name + ".err").write_text(err)
                stem.with_name(stem.name + ".rc").write_text(str(rc))
            if target.exists():
                os.replace(target, old)
            os.replace(fresh, target)
            shutil.rmtree(old, ignore_errors=True)

    def npu(self, npu_id: int) -> dict:
        for n in self.state["npus"]:
            if n["id"] == npu_id:
                return n
        raise KeyError("node %s has no NPU %r" % (self.name, npu_id))

    def set_npu(self, npu_id: int, **fields) -> Undo:
        """Change fields of one NPU entry (``link="DOWN"``, ``tls=1``, ``health="Alarm"``,
        ``ip=None`` ...) and save. The returned Undo restores the previous values."""
        entry = self.npu(npu_id)
        missing = object()
        before = {k: entry.get(k, missing) for k in fields}
        entry.update(fields)
        self.save_state()

        def back():
            e = self.npu(npu_id)
            for k, v in before.items():
                if v is missing:
                    e.pop(k, None)
                else:
                    e[k] = v
            self.save_state()
        return Undo(back)

    def set_state(self, **fields) -> Undo:
        """Change top-level state fields (``npus=[]``, ``ping_fail=[...]``, ``driver_version=...``)."""
        missing = object()
        # (deepcopy of the sentinel would make a new object, and undo would then save it as a value)
        before = {k: copy.deepcopy(self.state[k]) if k in self.state else missing for k in fields}
        self.state.update(fields)
        self.save_state()

        def back():
            for k, v in before.items():
                if v is missing:
                    self.state.pop(k, None)
                else:
                    self.state[k] = v
            self.save_state()
        return Undo(back)

    def override(self, program: str, args: str | Sequence[str], stdout: str = "", stderr: str = "",
                 rc: int = 0, sleep: float = 0) -> Undo:
        """Make ``program args`` (exact argv, or ``"*"`` for any call) sleep, print and exit
        with rc. A huge ``sleep`` hangs the tool. Undo removes the override."""
        if program not in ("npu-smi", "hccn_tool"):
            raise ValueError("override: program must be 'npu-smi' or 'hccn_tool', not %r" % program)
        key = args if isinstance(args, str) else " ".join(args)
        ovs = self.state.setdefault("overrides", {}).setdefault(program, {})
        previous = ovs.get(key)
        ovs[key] = {"stdout": stdout, "stderr": stderr, "rc": rc, "sleep": sleep}
        self.save_state()

        def back():
            o = self.state.setdefault("overrides", {}).setdefault(program, {})
            if previous is None:
                o.pop(key, None)
            else:
                o[key] = previous
            self.save_state()
        return Undo(back)

    def clear_overrides(self) -> None:
        self.state["overrides"] = {}
        self.save_state()

    def calls(self, program: str | None = None) -> list[dict]:
        """Every call of the fake tools so far: ``{"prog", "args", "t", "pid"}`` in call order."""
        out = []
        try:
            text = self.calls_path.read_text()
        except FileNotFoundError:
            return out
        for line in text.splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if program is None or rec.get("prog") == program:
                out.append(rec)
        return out

    def clear_calls(self) -> None:
        self.calls_path.write_text("")

    # ------------------------------------------------------------------ devices and tools
    def add_device(self, name: str, major: int, minor: int, mode: int = 0o660) -> Undo:
        """mknod a character device in the node's /dev (visible at once inside the node)."""
        path = self.dev_dir / name
        if path.exists() or path.is_symlink():
            path.unlink()
        os.mknod(path, stat.S_IFCHR | mode, os.makedev(major, minor))
        os.chmod(path, mode)
        return Undo(lambda: self.remove_device(name))

    def remove_device(self, name: str) -> Undo:
        """Remove /dev/<name> from the node (no-op when absent). Undo puts it back as it was."""
        path = self.dev_dir / name
        try:
            st = path.lstat()
        except FileNotFoundError:
            return Undo(lambda: None)
        path.unlink()
        if stat.S_ISCHR(st.st_mode):
            major, minor, mode = os.major(st.st_rdev), os.minor(st.st_rdev), stat.S_IMODE(st.st_mode)
            return Undo(lambda: self.add_device(name, major, minor, mode))
        return Undo(lambda: None)

    def tool_path(self, name: str) -> Path:
        if name not in TOOLS:
            raise ValueError("unknown tool %r (one of %s)" % (name, ", ".join(TOOLS)))
        return self.dir / TOOLS[name]

    def remove_tool(self, name: str) -> Undo:
        """Delete ``npu-smi``, ``hccn_tool`` or ``pdsh`` from the node. Undo restores it."""
        self.tool_path(name).unlink(missing_ok=True)
        return Undo(lambda: self.restore_tool(name))

    def restore_tool(self, name: str) -> None:
        dst = self.tool_path(name)
        tmp = dst.with_name("." + dst.name + ".tmp")
        if name in FAST_TOOLS:
            # The Python fake lives beside the state file; the tool itself is a bash front that
            # answers from the outputs rendered at save_state() and falls back to the fake.
            fakes = self.state_path.parent / "fakes"
            fakes.mkdir(exist_ok=True)
            shutil.copyfile(FAKES_DIR / name, fakes / name)
            os.chmod(fakes / name, 0o755)
            tmp.write_text(_FAST_FRONT.replace("@PROG@", name))
        else:
            shutil.copyfile(FAKES_DIR / name, tmp)
        os.chmod(tmp, 0o755)
        os.replace(tmp, dst)

    # ------------------------------------------------------------------ CANN and the Python stack
    def _write_cann(self) -> None:
        """CANN 8.2.RC1 (classic layout, latest -> 8.2.RC1), kernels, nnal/atb, and a Python stack
        of *.dist-info folders, as the version files of shared/fixtures/ascend/files show them."""
        a = self.ascend_dir
        tk = a / "ascend-toolkit" / CANN_VERSION
        for d in (tk / "aarch64-linux", tk / "toolkit", tk / "opp_kernel", tk / "python" / "site-packages",
                  tk / "opp" / "built-in" / "op_impl" / "ai_core" / "tbe" / "kernel" / "ascend910b",
                  a / "nnal" / "atb" / "latest" / "atb" / "cxx_abi_1" / "lib", a / "driver" / "lib64"):
            d.mkdir(parents=True, exist_ok=True)
        (tk / "aarch64-linux" / "ascend_toolkit_install.info").write_text(
            "package_name=Ascend-cann-toolkit\nversion=%s\ninnerversion=V100R001C22SPC001B231\n"
            "arch=aarch64\nos=linux\npath=/usr/local/Ascend/ascend-toolkit/%s/aarch64-linux\n" % (CANN_VERSION, CANN_VERSION))
        (tk / "toolkit" / "version.info").write_text("Version=8.2.0.0.201\nversion_dir=%s\n" % CANN_VERSION)
        (tk / "opp_kernel" / "version.info").write_text("Version=8.2.0.0.201\nversion_dir=%s\n" % CANN_VERSION)
        (tk / "python" / "site-packages" / "acl.py").write_text("# simcluster stand-in for CANN's acl module\n")
        latest = a / "ascend-toolkit" / "latest"
        if not latest.is_symlink():
            latest.symlink_to(CANN_VERSION)
        (a / "nnal" / "atb" / "latest" / "version.info").write_text(
            "    Ascend-cann-atb : %s\n    Platform : aarch64\n" % CANN_VERSION)
        (a / "nnal" / "atb" / "latest" / "atb" / "cxx_abi_1" / "lib" / "libatb.so").write_text("")
        self.set_packages(**HEALTHY_PACKAGES)

    def set_packages(self, **versions) -> None:
        """Install (version) or remove (None) fake distributions in the node's site-packages
        (/usr/local/Ascend/.sim/site-packages, on PYTHONPATH): ``set_packages(triton="3.1.0")``."""
        site = self.ascend_dir / ".sim" / "site-packages"
        site.mkdir(parents=True, exist_ok=True)
        for name, version in versions.items():
            for old in site.glob("%s-*.dist-info" % name):
                shutil.rmtree(old)
            if version is not None:
                d = site / ("%s-%s.dist-info" % (name, version))
                d.mkdir()
                (d / "METADATA").write_text("Metadata-Version: 2.1\nName: %s\nVersion: %s\n" % (name, version))

    # ------------------------------------------------------------------ session environment
    def _write_bashrc(self) -> None:
        lines = ["# ~/.bashrc of simulated node %s (written by simcluster)" % self.name]
        for k, v in self.env.items():
            lines.append("export %s=%s" % (k, shlex.quote(str(v))))
        # Exports that only an interactive shell gets: written after the guard Debian's ~/.bashrc opens with.
        if getattr(self, "interactive_env", None):
            lines.append("case $- in *i*) ;; *) return;; esac")
            for k, v in self.interactive_env.items():
                lines.append("export %s=%s" % (k, shlex.quote(str(v))))
        _atomic_write(self.root_dir / ".bashrc", "\n".join(lines) + "\n")

    def set_env(self, **variables) -> Undo:
        """Set (or, with None, remove) exports in the node's /root/.bashrc, which bash reads in
        non-interactive SSH sessions. Undo restores the previous exports."""
        before = dict(self.env)
        for k, v in variables.items():
            if v is None:
                self.env.pop(k, None)
            else:
                self.env[k] = str(v)
        self._write_bashrc()

        def back():
            self.env = before
            self._write_bashrc()
        return Undo(back)

    # ------------------------------------------------------------------ sshd lifecycle
    @property
    def running(self) -> bool:
        return self.sshd is not None and self.sshd.poll() is None

    def start(self, timeout: float = 60) -> None:
        """Start sshd (no-op when running) and wait until it accepts a login."""
        if self.running:
            return
        self._spawn_sshd()
        self._wait_sshd(timeout)

    def stop(self, sessions: bool = True) -> Undo:
        """Stop sshd (connections are then refused). With ``sessions`` (default) also kill every
        process the SSH sessions left in the node; listeners from :meth:`listen` survive.
        Undo starts sshd again."""
        was_running = self.running
        _stop_popen(self.sshd)
        self.sshd = None
        if sessions:
            self.kill_strays()
        return Undo(self.start if was_running else (lambda: None))

    def restart(self, nofile: int | None = None, sshd_options: dict | None = None,
                timeout: float = 60) -> Undo:
        """Restart sshd, optionally with another ``ulimit -n`` (soft and hard; sessions inherit
        it) and extra sshd_config options (value None drops an option). Running sessions are
        left alone, as a real ``systemctl restart ssh`` does. Undo restarts with the old values."""
        old_nofile, old_opts = self.nofile, dict(self.sshd_options)
        ceiling = nofile_ceiling()
        if nofile is not None and ceiling is not None and int(nofile) > ceiling:
            raise SimClusterError("ulimit -n %d is above what this machine allows (%d: no CAP_SYS_RESOURCE)"
                                  % (nofile, ceiling))
        if nofile is not None:
            self.nofile = int(nofile)
            self.state["nofile"] = self.nofile
            self.save_state()
        if sshd_options:
            self.sshd_options.update(sshd_options)
        _stop_popen(self.sshd)
        self.sshd = None
        self.start(timeout)

        def back():
            self.nofile, self.sshd_options = old_nofile, old_opts
            self.state["nofile"] = old_nofile
            self.save_state()
            _stop_popen(self.sshd)
            self.sshd = None
            self.start(timeout)
        return Undo(back)

    def regenerate_host_key(self) -> Undo:
        """Give the node a new host key (known_hosts files then hold a *changed* key) and
        restart sshd. Undo puts the original key back."""
        saved = {p: p.read_bytes() for p in (self.host_key, self.host_key.with_suffix(".pub"))}
        for p in saved:
            p.unlink()
        _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", self.name, "-f", str(self.host_key)])
        _stop_popen(self.sshd)
        self.sshd = None
        self._spawn_sshd()
        # wait for a login that ignores host keys: the pinned known_hosts now rejects the node
        self._wait_sshd(60, options=["-o", "UserKnownHostsFile=/dev/null", "-o", "StrictHostKeyChecking=no"])

        def back():
            for p, data in saved.items():
                p.write_bytes(data)
                os.chmod(p, 0o600 if p.suffix != ".pub" else 0o644)
            _stop_popen(self.sshd)
            self.sshd = None
            self.start()
        return Undo(back)

    # ------------------------------------------------------------------ network faults
    def firewall(self, port: int | None, action: str = "DROP", proto: str = "tcp",
                 source: str | None = None) -> Undo:
        """Add an iptables INPUT rule in the node's netns: ``proto`` packets to ``port``
        (None = any port) from ``source`` (None = anyone) get ``action`` (DROP: the client
        times out; REJECT: refused at once). Undo deletes exactly that rule."""
        if action not in ("DROP", "REJECT"):
            raise ValueError("action must be DROP or REJECT")
        if shutil.which("iptables") is None:
            raise SimClusterError("iptables is not installed (apt-get install iptables)")
        spec = ["INPUT", "-p", proto]
        if source:
            spec += ["-s", source]
        if port is not None:
            spec += ["--dport", str(port)]
        spec += ["-j", action]
        if action == "REJECT" and proto == "tcp":
            spec += ["--reject-with", "tcp-reset"]
        _run(["ip", "netns", "exec", self.netns, "iptables", "-w", "-A"] + spec)
        return Undo(lambda: _run(["ip", "netns", "exec", self.netns, "iptables", "-w", "-D"] + spec,
                                 check=False))

    def firewall_clear(self) -> None:
        if shutil.which("iptables") is None:
            return
        _run(["ip", "netns", "exec", self.netns, "iptables", "-w", "-F", "INPUT"], check=False)

    def disconnect(self) -> Undo:
        """Take the node's link down on the bridge side: the node is silent (connects time out
        or fail with 'No route to host'), its processes keep running. Undo reconnects."""
        _run(["ip", "link", "set", self.host_if, "down"])
        return Undo(lambda: _run(["ip", "link", "set", self.host_if, "up"]))

    def listen(self, port: int, address: str = "0.0.0.0") -> Listener:
        """Start a TCP listener in the node (for reachability probes). Stop it, or use ``with``."""
        return Listener(self, port, address)

    # ------------------------------------------------------------------ commands
    def run(self, cmd: str, timeout: float = 60, check: bool = False,
            input: str | None = None) -> subprocess.CompletedProcess:
        """Run a shell command inside the node's namespaces (as root, clean environment, not
        through SSH and without .bashrc); for assertions. Works while sshd is stopped."""
        p = subprocess.run(self._nsenter() + ["sh", "-c", cmd], capture_output=True, text=True,
                           timeout=timeout, input=input, stdin=None if input is not None else subprocess.DEVNULL,
                           env={"PATH": NODE_PATH, "HOME": "/root", "LANG": "C.UTF-8"})
        if check and p.returncode != 0:
            raise SimClusterError("node %s: %r failed (rc %d): %s" % (self.name, cmd, p.returncode, p.stderr))
        return p

    def ssh_args(self, cmd: str | None = None, connect_timeout: float = 5, options: Sequence[str] = ()) -> list[str]:
        """The real OpenSSH client command line that logs into this node as root."""
        c = self.cluster
        # ``options`` come first: for ssh the first value given for an option wins
        args = ["ssh", *options, "-F", str(c.ssh_config_path), "-i", str(c.identity_file),
                "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
                "-o", "UserKnownHostsFile=%s" % c.known_hosts_path, "-o", "GlobalKnownHostsFile=/dev/null",
                "-o", "StrictHostKeyChecking=yes", "-o", "ConnectTimeout=%d" % max(1, round(connect_timeout)),
                "-o", "LogLevel=ERROR", "root@%s" % self.address]
        if cmd is not None:
            args += ["--", cmd]
        return args

    def ssh(self, cmd: str, timeout: float = 60, connect_timeout: float = 5,
            options: Sequence[str] = ()) -> subprocess.CompletedProcess:
        """Run ``cmd`` through the real ``ssh`` client (non-interactive session, bash reads
        ~/.bashrc). Returns the CompletedProcess (text); rc 255 = ssh itself failed."""
        return subprocess.run(self.ssh_args(cmd, connect_timeout, options), capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)

    def processes(self) -> list[int]:
        """Pids of every process in this node's network namespace (the anchor, sshd, sessions,
        listeners and whatever sessions left behind)."""
        return _netns_pids(self.netns) if self._netns_added else []

    def harness_pids(self) -> set[int]:
        pids = {p.pid for p in (self.anchor, self.sshd) if p is not None and p.poll() is None}
        return pids | {lst.pid for lst in self._listeners}

    def extra_processes(self) -> list[int]:
        """:meth:`processes` minus the harness's own (anchor, sshd listener, listeners): what
        SSH sessions started and left running. Empty on a node that nothing touched."""
        own = self.harness_pids()
        return [p for p in self.processes() if p not in own]

    def kill_strays(self, timeout: float = 10) -> None:
        """Kill what sessions left behind and wait (up to ``timeout``) until it is gone: a
        SIGKILL is delivered asynchronously, and a caller asserting a clean node next must
        not see a process that is still dying."""
        strays = self.extra_processes()
        for pid in strays:
            _kill(pid)
        deadline = time.monotonic() + timeout
        while set(strays) & set(self.processes()) and time.monotonic() < deadline:
            time.sleep(0.02)

    # ------------------------------------------------------------------ back to healthy
    def reset(self) -> None:
        """Put the node back as the cluster started it: state, .bashrc, ~/.ssh, tools, /dev,
        host key, no firewall rules, link up, no listeners or stray processes, sshd running
        with the default ulimit and options, empty call log."""
        boot = self.state.get("boot_time")
        self.state = self._initial_state(self._npus, self._chip)
        if boot is not None:
            self.state["boot_time"] = boot
        self.save_state()
        self.clear_calls()
        self.env = dict(HEALTHY_ENV)
        self.interactive_env = {}
        self._write_bashrc()
        shutil.rmtree(self.ascend_dir / ".sim" / "site-packages", ignore_errors=True)
        self._write_cann()
        c = self.cluster
        ssh = self.root_dir / ".ssh"
        ssh.mkdir(exist_ok=True)
        shutil.copyfile(c.authorized_keys_path, ssh / "authorized_keys")
        shutil.copyfile(c.identity_file, ssh / "id_ed25519")
        shutil.copyfile(c.identity_file.with_suffix(".pub"), ssh / "id_ed25519.pub")
        for f in ("authorized_keys", "id_ed25519"):
            os.chmod(ssh / f, 0o600)
        self._write_node_known_hosts_and_hosts()
        for tool in TOOLS:
            self.restore_tool(tool)
        wanted = {name: (ma, mi, mode) for name, ma, mi, mode in _BASE_DEVICES}
        wanted.update({"davinci%d" % i: (236, i, 0o660) for i in range(self._npus)})
        for entry in self.dev_dir.iterdir():
            if stat.S_ISCHR(entry.lstat().st_mode) and entry.name not in wanted:
                entry.unlink()
        for name, (ma, mi, mode) in wanted.items():
            p = self.dev_dir / name
            try:
                st = p.lstat()
                ok = (stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(ma, mi)
                      and stat.S_IMODE(st.st_mode) == mode)
            except FileNotFoundError:
                ok = False
            if not ok:
                self.add_device(name, ma, mi, mode)
        for lst in list(self._listeners):
            lst.stop()
        self.firewall_clear()
        _run(["ip", "link", "set", self.host_if, "up"], check=False)
        key_changed = any(p.read_bytes() != data for p, data in self._host_key_bytes.items())
        if key_changed:
            for p, data in self._host_key_bytes.items():
                p.write_bytes(data)
        if (key_changed or not self.running or self.nofile != c.default_nofile
                or self.sshd_options != c.sshd_options):
            self.nofile = c.default_nofile
            self.sshd_options = dict(c.sshd_options)
            _stop_popen(self.sshd)
            self.sshd = None
        self.kill_strays()
        self.start()

    # ------------------------------------------------------------------ teardown
    def _teardown(self, errors: list[str]) -> None:
        for lst in list(self._listeners):
            lst.stop()
        _stop_popen(self.sshd)
        self.sshd = None
        if self._netns_added:
            for _ in range(3):                     # kill everything in the netns, incl. the anchor
                pids = _netns_pids(self.netns)
                if not pids:
                    break
                for pid in pids:
                    _kill(pid)
                time.sleep(0.02)
        _stop_popen(self.anchor, grace=0.5)
        self.anchor = None
        if self._veth_added:
            p = _run(["ip", "link", "del", self.host_if], check=False)
            if p.returncode != 0 and "Cannot find device" not in p.stderr:
                errors.append(p.stderr.strip())
            self._veth_added = False
        if self._netns_added:
            p = _run(["ip", "netns", "del", self.netns], check=False)
            if p.returncode != 0 and "No such file" not in p.stderr:
                errors.append(p.stderr.strip())
            self._netns_added = False


class SimCluster:
    """A cluster of simulated nodes (context manager). See the module docstring.

    ``names``: node names; ``head``: the node in group ``head`` (the others are ``worker``;
    default ``node-01``, or the first name when there is no node-01);
    ``npus``: NPUs per node; ``sshd_options``: extra sshd_config lines for every node
    (e.g. ``{"MaxStartups": "3"}``).
    """

    def __init__(self, names: Sequence[str] = ("node-01", "node-02", "node-03"), head: str | None = None,
                 npus: int = 8, chip: str = "910B4", sshd_options: dict | None = None,
                 start_timeout: float = 60):
        if not names or len(set(names)) != len(names) or len(names) > 200:
            raise ValueError("names must be 1..200 distinct node names")
        if head is None:                 # node-01 when there is one, else the first node
            head = "node-01" if "node-01" in names else names[0]
        if head not in names:
            raise ValueError("head %r is not one of %r" % (head, list(names)))
        self.names = list(names)
        self.head = head
        self.npus = npus
        self.chip = chip
        self.sshd_options = dict(sshd_options or {})
        self.id = secrets.token_hex(3)
        self.bridge = "sim%sbr" % self.id
        self.nodes: list[SimNode] = []
        self.k: int | None = None
        self.workdir: Path | None = None
        self._mounted = False
        self._bridge_added = False
        self._record: Path | None = None
        self._closed = False
        self.start_seconds = None
        self.close_seconds = None
        missing = missing_prerequisites()
        if missing:
            raise SimClusterError("SimCluster needs: " + ", ".join(missing))
        self.sshd_version = _sshd_version()
        ceiling = nofile_ceiling()
        # 65536 unless this machine cannot raise the hard limit that far (then its hard limit)
        self.default_nofile = DEFAULT_NOFILE if ceiling is None else min(DEFAULT_NOFILE, ceiling)
        atexit.register(self.close)
        t0 = time.monotonic()
        try:
            self._start(start_timeout)
        except BaseException:
            self.close()
            raise
        self.start_seconds = time.monotonic() - t0

    def __repr__(self):
        return "<SimCluster %s 198.18.%s.0/24 %s>" % (self.id, self.k, [n.name for n in self.nodes])

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __iter__(self):
        return iter(self.nodes)

    # ------------------------------------------------------------------ public API
    @property
    def gateway(self) -> str:
        """The bridge's address in the host namespace (the controller side)."""
        return "198.18.%d.1" % self.k

    @property
    def subnet(self) -> str:
        return "198.18.%d.0/24" % self.k

    def node(self, name: str) -> SimNode:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError("no node %r in %s" % (name, self))

    def write_known_hosts(self, path, exclude: Iterable[str] = ()) -> Path:
        """Write an OpenSSH known_hosts file (``ADDRESS ssh-ed25519 AAAA...``) with every node
        except those named in ``exclude``."""
        path = Path(path)
        ex = set(exclude)
        self._check_names(ex)
        path.write_text("".join("%s %s\n" % (n.address, n.host_pub) for n in self.nodes if n.name not in ex))
        return path

    def write_inventory(self, path=None, exclude_known_hosts: Iterable[str] = (), extra_hosts=(),
                        defaults: dict | None = None, hosts: Iterable[str] | None = None,
                        **group_overrides) -> Path:
        """Write a native inventory YAML for this cluster (default: ``self.inventory_path``).

        ``exclude_known_hosts``: node names left out of a known_hosts file written beside the
        inventory (``<path>.known_hosts``), which the inventory then uses;
        ``extra_hosts``: more host entries, each a name (address = name) or a dict;
        ``defaults``: keys merged into ``defaults`` (value None drops the key);
        ``hosts``: only these nodes (default all);
        ``group_overrides``: ``worker={"npus_per_node": 16}`` merges into (or adds) a group.
        """
        path = Path(path) if path is not None else self.inventory_path
        known_hosts = self.known_hosts_path
        ex = list(exclude_known_hosts)
        if ex:
            known_hosts = self.write_known_hosts(path.with_name(path.name + ".known_hosts"), exclude=ex)
        d = {"user": "root", "port": 22, "identity_file": str(self.identity_file),
             "known_hosts": str(known_hosts), "ssh_config": str(self.ssh_config_path)}
        for k, v in (defaults or {}).items():
            if v is None:
                d.pop(k, None)
            else:
                d[k] = v
        wanted = list(hosts) if hosts is not None else [n.name for n in self.nodes]
        self._check_names(wanted)
        entries = []
        for n in self.nodes:
            if n.name in wanted:
                entries.append({"name": n.name, "address": n.address,
                                "groups": ["head" if n.name == self.head else "worker"]})
        for h in extra_hosts:
            entries.append({"name": h} if isinstance(h, str) else dict(h))
        groups = {"head": {"npus_per_node": self.npus, "chip": self.chip},
                  "worker": {"npus_per_node": self.npus, "chip": self.chip}}
        for g, over in group_overrides.items():
            merged = dict(groups.get(g, {}))
            for k, v in (over or {}).items():
                if v is None:
                    merged.pop(k, None)
                else:
                    merged[k] = v
            groups[g] = merged

        def flow(m: dict) -> str:     # YAML flow mapping; JSON scalars are valid YAML scalars
            return "{" + ", ".join("%s: %s" % (k, json.dumps(v)) for k, v in m.items()) + "}"
        text = ["# simcluster %s inventory (generated)" % self.id, "defaults: " + flow(d), "hosts:"]
        text += ["  - " + flow(e) for e in entries]
        text.append("groups:" if groups else "groups: {}")
        text += ["  %s: %s" % (g, flow(v)) for g, v in groups.items()]
        path.write_text("\n".join(text) + "\n")
        return path

    def reset(self) -> None:
        """Undo every fault on every node (see :meth:`SimNode.reset`); rewrite the inventory.
        Every node is reset even when one fails (then the first failure is raised)."""
        failed = []
        for n in self.nodes:
            try:
                n.reset()
            except Exception as exc:  # noqa: BLE001 - the other nodes still need their reset
                failed.append(exc)
        if failed:
            raise failed[0]
        self.write_known_hosts(self.known_hosts_path)
        self.write_inventory()

    def close(self) -> None:
        """Stop every process this cluster started, delete its veths, namespaces and bridge,
        unmount and remove its work directory. Idempotent; safe after a partial start."""
        if self._closed:
            return
        self._closed = True
        t0 = time.monotonic()
        errors: list[str] = []
        for n in self.nodes:
            try:
                n._teardown(errors)
            except Exception as e:          # keep going: leave nothing behind
                errors.append("%s: %r" % (n.name, e))
        if self._bridge_added:
            p = _run(["ip", "link", "del", self.bridge], check=False)
            if p.returncode != 0 and "Cannot find device" not in p.stderr:
                errors.append(p.stderr.strip())
            self._bridge_added = False
        if self.workdir is not None:
            if self._mounted:
                p = _run(["umount", str(self.workdir)], check=False)
                if p.returncode != 0:
                    p = _run(["umount", "-l", str(self.workdir)], check=False)
                    if p.returncode != 0:
                        errors.append(p.stderr.strip())
                self._mounted = False
            try:
                self.workdir.rmdir()
            except OSError as e:
                errors.append("rmdir %s: %s" % (self.workdir, e))
        if self._record is not None:
            self._record.unlink(missing_ok=True)
        try:
            atexit.unregister(self.close)
        except Exception:
            pass
        self.close_seconds = time.monotonic() - t0
        if errors:
            raise SimClusterError("SimCluster %s close: %s" % (self.id, "; ".join(errors)))

    # ------------------------------------------------------------------ internals
    def _check_names(self, names: Iterable[str]) -> None:
        known = {n.name for n in self.nodes}
        bad = [x for x in names if x not in known]
        if bad:
            raise KeyError("no such node(s): %s" % ", ".join(bad))

    def _save_record(self) -> None:
        rec = {"id": self.id, "owner_pid": os.getpid(), "owner_start": _proc_starttime(os.getpid()),
               "k": self.k, "workdir": str(self.workdir) if self.workdir else None,
               "bridge": self.bridge, "netns": [n.netns for n in self.nodes],
               "veths": [n.host_if for n in self.nodes]}
        _atomic_write(self._record, json.dumps(rec) + "\n")

    def _start(self, timeout: float) -> None:
        RUN_DIR.mkdir(parents=True, exist_ok=True)
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        self._record = RUN_DIR / ("%s.json" % self.id)
        with open(RUN_DIR / "lock", "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                _reap_stale()
                self.k = _pick_k()
                self.workdir = Path(tempfile.mkdtemp(prefix="simcluster-%s-" % self.id))
                self._save_record()
                _run(["mount", "-t", "tmpfs", "-o", "mode=0700,size=256m",
                      "simcluster-%s" % self.id, str(self.workdir)])
                self._mounted = True
                self._bridge_added = True          # record before creating: close() tolerates absence
                _ip_batch(["link add %s type bridge" % self.bridge,
                           "addr add %s/24 dev %s" % (self.gateway, self.bridge),
                           "link set %s up" % self.bridge])
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

        w = self.workdir
        self.identity_file = w / "client_key"
        self.known_hosts_path = w / "known_hosts"
        self.ssh_config_path = w / "ssh_config"
        self.authorized_keys_path = w / "authorized_keys"
        self.inventory_path = w / "inventory.yaml"
        self.ssh_config_path.write_text("")
        self.nodes = [SimNode(self, name, i + 1, self.npus, self.chip) for i, name in enumerate(self.names)]
        self._save_record()
        for n in self.nodes:
            n.dir.mkdir()

        # keys: one client key for the cluster, one host key per node (in parallel)
        jobs = [subprocess.Popen(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(f)],
                                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                for f, comment in [(self.identity_file, "simcluster-%s" % self.id)]
                + [(n.host_key, n.name) for n in self.nodes]]
        for j in jobs:
            _, err = j.communicate(timeout=30)
            if j.returncode != 0:
                raise SimClusterError("ssh-keygen failed: %s" % err.decode(errors="replace"))
        shutil.copyfile(self.identity_file.with_suffix(".pub"), self.authorized_keys_path)
        os.chmod(self.authorized_keys_path, 0o600)
        self.write_known_hosts(self.known_hosts_path)
        for n in self.nodes:
            n._host_key_bytes = {p: p.read_bytes() for p in (n.host_key, n.host_key.with_suffix(".pub"))}
            n._prepare_files(self.npus)
            n._write_node_known_hosts_and_hosts()
        self.write_inventory()

        # network: one veth per node, its host end in the bridge, its peer into the netns
        batch = []
        for n in self.nodes:
            n._netns_added = n._veth_added = True
            batch += ["netns add %s" % n.netns,
                      "link add %s type veth peer name %s" % (n.host_if, n.peer_if),
                      "link set %s master %s" % (n.host_if, self.bridge),
                      "link set %s up" % n.host_if,
                      "link set %s netns %s" % (n.peer_if, n.netns)]
        _ip_batch(batch)

        deadline = time.monotonic() + timeout
        for n in self.nodes:
            n._start_anchor()
        for n in self.nodes:
            n._wait_anchor(deadline)
        for n in self.nodes:
            n._spawn_sshd()
        errors: list[BaseException] = []
        # A few first logins at a time: a hundred at once on a small box each take longer than
        # the 5 s a try is given, and all retry forever (seen at N = 100 on 2 busy cores).
        room = threading.BoundedSemaphore(LOGIN_WAITS)

        def wait(node):
            try:
                with room:
                    node._wait_sshd(max(1.0, deadline - time.monotonic()))
            except BaseException as e:      # noqa: BLE001 - re-raised below
                errors.append(e)
        threads = [threading.Thread(target=wait, args=(n,)) for n in self.nodes]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]


def _pick_k() -> int:
    """A free 198.18.K.0/24 (call with the lock held): no interface has an address in it."""
    used = set()
    p = _run(["ip", "-j", "addr"])
    for link in json.loads(p.stdout or "[]"):
        for a in link.get("addr_info", []):
            local = a.get("local", "")
            if local.startswith("198.18."):
                used.add(int(local.split(".")[2]))
    for rec in RUN_DIR.glob("*.json"):
        try:
            k = json.loads(rec.read_text()).get("k")
        except (OSError, ValueError):
            continue
        if isinstance(k, int):
            used.add(k)
    free = [k for k in range(256) if k not in used]
    if not free:
        raise SimClusterError("no free 198.18.K.0/24 subnet (all 256 in use)")
    return random.choice(free)


def _reap_stale() -> None:
    """Remove clusters whose owning process is gone (a test run that was killed). Lock held."""
    for rec_path in RUN_DIR.glob("*.json"):
        try:
            rec = json.loads(rec_path.read_text())
        except (OSError, ValueError):
            continue
        pid = rec.get("owner_pid")
        if isinstance(pid, int) and _proc_starttime(pid) is not None and _proc_starttime(pid) == rec.get("owner_start"):
            continue          # owner alive
        for ns in rec.get("netns", []):
            for pid in _netns_pids(ns):
                _kill(pid)
        for v in rec.get("veths", []):
            _run(["ip", "link", "del", v], check=False)
        for ns in rec.get("netns", []):
            _run(["ip", "netns", "del", ns], check=False)
        if rec.get("bridge"):
            _run(["ip", "link", "del", rec["bridge"]], check=False)
        wd = rec.get("workdir")
        if wd and os.path.isdir(wd):
            _run(["umount", "-l", wd], check=False)
            try:
                os.rmdir(wd)
            except OSError:
                pass
        rec_path.unlink(missing_ok=True)
