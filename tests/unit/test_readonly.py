"""Every command the probe can send, checked for anything that changes a node.

The probe logs into nodes as a privileged user, so what it may run is pinned here: a fact
whose command writes a file, calls a set form of hccn_tool or npu-smi, or starts a program
that changes the system fails this test.  (The e2e security test checks the same thing
dynamically: every vendor-tool call the simulated nodes logged is a read-only form.)
"""

import re

import pytest

from preflight import activeprobe
from preflight.facts import FACTS
from preflight.probe import _PRELUDE

# A command position: start of line, or after ; & | ( $( ` or a shell keyword.
_CMD = r"(?:^|[;&|(`]|\$\(|\b(?:then|do|else|exec|timeout\s+(?:-\S+\s+)*\S+))\s*"
FORBIDDEN_PATTERNS = [
    (re.compile(r"hccn_tool\"?[^\n;|]*\s-s(\s|$)"), "a set form of hccn_tool"),
    (re.compile(r"\$PF_HCCN\"?[^\n;|]*\s-s(\s|$)"), "a set form of hccn_tool"),
    (re.compile(r"npu-smi\"?\s+set\b|\$PF_NPUSMI\"?\s+set\b"), "npu-smi set"),
    (re.compile(_CMD + r"(mkfs\S*|mount|umount|reboot|shutdown|halt|modprobe|rmmod|insmod|chmod|chown|useradd|"
                r"usermod|passwd|mkdir|touch|mv|cp|ln|truncate|shred|apt|apt-get|yum|dnf|pip3?|npm|kill|pkill|"
                r"killall|tee|sed\s+-i|dd\s+[^\n]*of=)\b", re.M), "a command that changes the node"),
    (re.compile(r"sysctl\s+-w"), "sysctl -w"),
    (re.compile(r"systemctl\s+(start|stop|restart|enable|disable|mask|kill)"), "systemctl changing a service"),
    (re.compile(r"iptables\s+-[ADIFRPXNZ]\b"), "iptables changing rules"),
    (re.compile(r"nft\s+(-\S+\s+)*(add|create|insert|replace|delete|destroy|flush|reset|rename|-f)\b"),
     "nft changing rules"),
    (re.compile(r"firewall-cmd\s+[^\n]*--(add|remove|reload|set|permanent)"), "firewall-cmd changing rules"),
    (re.compile(_CMD + r"rm\b", re.M), "rm"),
    # bash before 5.1 (CentOS 7, RHEL 8, Ubuntu 20.04) writes each one to a temporary file in /tmp.
    (re.compile(r"<<<|<<-?\s*['\"]?[A-Za-z_]\w*['\"]?[ \t]*$", re.M), "a here-document or here-string"),
]
# Where a command is allowed (script, what, the command), and why.
EXCEPTIONS = {
    ("activeprobe._MARKER_WRITER", "rm", "rm"): "removes the marker files this probe itself wrote",
    ("prelude", "a command that changes the node", "kill"):
        "kills only what a probe command left running in its own process group (PF_REAP)",
}


def probe_scripts():
    scripts = {f"fact {name}": spec.command for name, spec in FACTS.items() if spec.command}
    scripts["prelude"] = _PRELUDE
    for name in ("_CONNECT", "_LAUNCHER_SSH", "_MARKER_WRITER", "_MARKER_READER", "_PING"):
        scripts[f"activeprobe.{name}"] = getattr(activeprobe, name)
    return scripts


def _redirections_to_files(script):
    # > or >> to anything but /dev/null or a file descriptor (comment lines are not code).
    script = "\n".join(line for line in script.splitlines() if not line.lstrip().startswith("#"))
    return [m.group(0) for m in re.finditer(r"(?<![<>&0-9])(\d?>>?)\s*([^&\s][^\s;|)]*)", script)
            if m.group(2) not in ("/dev/null",) and not m.group(2).startswith("&")]


@pytest.mark.parametrize("name, script", sorted(probe_scripts().items()))
def test_every_probe_command_is_read_only(name, script):
    for pattern, what in FORBIDDEN_PATTERNS:
        for found in pattern.finditer(script):  # every match: an allowed one must not hide the next
            command = found.group(0).split()[-1].lstrip(";&|(`$")
            if (name, what, command) not in EXCEPTIONS:
                raise AssertionError(f"{name} contains {what}: {found.group(0)!r}")
    writes = _redirections_to_files(script)
    if name == "activeprobe._MARKER_WRITER":
        assert writes == ['> "$p/$m"'], writes  # its own marker file, removed on exit
    else:
        assert writes == [], f"{name} writes to a file: {writes}"


def test_the_allow_list_sees_what_it_should():
    """The checker itself: forbidden forms are caught."""
    assert any(p.search('"$PF_HCCN" -i 0 -tls -s enable 0') for p, _ in FORBIDDEN_PATTERNS)
    assert any(p.search("npu-smi set -t reset -i 0 -c 0") for p, _ in FORBIDDEN_PATTERNS)
    assert _redirections_to_files("echo x > /etc/motd") == ["> /etc/motd"]
    assert _redirections_to_files("echo x 2>/dev/null >&2") == []
    assert any(p.search("cat /x; reboot") for p, _ in FORBIDDEN_PATTERNS)
    assert any(p.search('x=$(touch /tmp/a)') for p, _ in FORBIDDEN_PATTERNS)
    assert not any(p.search('echo "mount=$6"; printf "%s" "$d"') for p, _ in FORBIDDEN_PATTERNS)


def test_an_allowed_command_does_not_hide_another():
    with pytest.raises(AssertionError, match="mkdir"):
        test_every_probe_command_is_read_only("prelude", 'kill -KILL "$p"; mkdir /x')


def test_locating_a_dotted_module_imports_nothing(tmp_path):
    """python_modules may name a submodule (decord.bridge): finding it must not run its package's
    __init__ on the node (find_spec("a.b") would), which could load torch_npu or write files."""
    import json
    import subprocess
    import sys

    from preflight.nodefacts import PYTHON_STACK

    pkg = tmp_path / "heavy"
    pkg.mkdir()
    marker = tmp_path / "imported"
    (pkg / "__init__.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    (pkg / "sub.py").write_text("")
    env = {"PATH": "/usr/bin:/bin", "PF_PYTHON": sys.executable, "PYTHONPATH": str(tmp_path),
           "PF_MODULES": "heavy.sub,heavy.absent,heavy"}
    done = subprocess.run(["bash", "-c", PYTHON_STACK], env=env, capture_output=True, text=True, timeout=60)
    line = next(x for x in done.stdout.splitlines() if x.startswith("@@PY "))
    modules = json.loads(line[5:])["modules"]
    assert modules["heavy.sub"] == str(pkg / "sub.py")
    assert modules["heavy"] == str(pkg / "__init__.py") and modules["heavy.absent"] is None
    assert not marker.exists()


def test_the_python_stack_probe_writes_no_bytecode(tmp_path):
    """A site directory whose .pth imports a module (an editable install's hook): starting the
    job's interpreter runs it, and without -B Python would write its __pycache__ on the node."""
    import subprocess
    import sys

    from preflight.nodefacts import PYTHON_STACK

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    [site] = list(venv.glob("lib/python*/site-packages"))
    (site / "pf_hook.py").write_text("X = 1\n")
    (site / "pf_hook.pth").write_text("import pf_hook\n")
    env = {"PATH": "/usr/bin:/bin", "PF_PYTHON": str(venv / "bin" / "python")}
    done = subprocess.run(["bash", "-c", PYTHON_STACK], env=env, capture_output=True, text=True, timeout=60)
    assert "@@PY " in done.stdout, done.stderr
    assert not list(site.rglob("__pycache__")) and not list(site.rglob("*.pyc"))


def test_the_login_shell_leaves_the_history_file_alone(tmp_path):
    """session.env_login runs an interactive login bash: with Ubuntu's HISTFILESIZE=2000 in .bashrc
    it cut the user's ~/.bash_history to 2000 lines (here 3 of 10)."""
    import subprocess

    from preflight.nodefacts import LOGIN_ENV

    (tmp_path / ".bash_profile").write_text("[ -f ~/.bashrc ] && . ~/.bashrc\n")
    (tmp_path / ".bashrc").write_text("HISTFILESIZE=3\nHISTSIZE=3\n")
    history = tmp_path / ".bash_history"
    history.write_text("".join(f"command {i}\n" for i in range(10)))
    done = subprocess.run(["bash", "-c", LOGIN_ENV], env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
                          capture_output=True, timeout=30)
    assert b"HOME=" in done.stdout  # the login shell ran and printed its environment
    assert history.read_text() == "".join(f"command {i}\n" for i in range(10))
    assert sorted(p.name for p in tmp_path.iterdir()) == [".bash_history", ".bash_profile", ".bashrc"]
    # A .bashrc that names the history file itself: nothing is saved to it on the way out.
    (tmp_path / ".bashrc").write_text("HISTFILE=~/.bash_history\nhistory -s 'from the probe'\n")
    subprocess.run(["bash", "-c", LOGIN_ENV], env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
                   capture_output=True, timeout=30)
    assert "from the probe" not in history.read_text()
