"""preflight.probe: the generated probe script, really run with ``bash -c`` on this machine,
and the reader of its output (framing, caps, timeouts, the hang breaker, forged records).

Every test runs twice: with the python runner (preflight/noderunner.py, what a node with a
python3 uses) and with the bash runner (a node without one); both must print the same records."""

from __future__ import annotations

import base64
import os
import secrets
import shutil
import subprocess
import time
import zlib
from pathlib import Path

import pytest

from preflight.facts import FACTS
from preflight.probe import (
    DEFAULT_CAP,
    CommandOutput,
    ProbeCommand,
    new_nonce,
    parse_probe_output,
)
from preflight.probe import build_script as _build_script

RUNNER = "auto"


@pytest.fixture(autouse=True, params=["auto", "bash"], ids=["python-runner", "bash-runner"])
def runner(request, monkeypatch):
    monkeypatch.setattr(f"{__name__}.RUNNER", request.param)
    return request.param


def build_script(*args, **kwargs):
    return _build_script(*args, runner=RUNNER, **kwargs)


def run_script(commands, *, timeout=2, cap=DEFAULT_CAP, prefix="", env=None, cwd=None, nonce=None):
    """Build the script, run it locally with bash -c, return (nonce, raw stdout, parsed, seconds)."""
    nonce = nonce or new_nonce()
    script = build_script(commands, nonce, timeout, cap)
    t0 = time.monotonic()
    # A session of its own, as sshd gives the probe's shell.
    proc = subprocess.run(["bash", "-c", prefix + script], stdin=subprocess.DEVNULL, capture_output=True,
                          env=env, cwd=cwd, timeout=60, start_new_session=True)
    took = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr
    return nonce, proc.stdout, parse_probe_output(proc.stdout, nonce, cap), took


# ------------------------------------------------------------------------------ basics


def test_nonce_is_random_and_shell_safe():
    nonces = {new_nonce() for _ in range(50)}
    assert len(nonces) == 50
    for n in nonces:
        assert n.startswith("PF") and n[2:].isalnum() and len(n) >= 18


def test_stdout_stderr_rc_and_elapsed_per_command():
    _, raw, probe, _ = run_script([
        ProbeCommand("a", "echo hello; echo oops >&2; exit 3"),
        ProbeCommand("b", "sleep 0.3; printf 'no newline'"),
        ProbeCommand("c", "true"),
    ])
    assert probe.complete
    a, b, c = probe.outputs["a"], probe.outputs["b"], probe.outputs["c"]
    assert (a.stdout, a.stderr, a.rc, a.truncated, a.skipped) == ("hello\n", "oops\n", 3, False, None)
    assert (b.stdout, b.stderr, b.rc) == ("no newline", "", 0)
    assert 0.25 <= b.elapsed_s < 30, b.elapsed_s
    assert 0 <= a.elapsed_s < 30
    assert (c.stdout, c.stderr, c.rc) == ("", "", 0)
    # The command bodies never appear in clear in the stream: only base64 between framing lines.
    assert b"hello" not in raw and b"oops" not in raw


def test_every_record_line_starts_with_the_nonce():
    nonce, raw, probe, _ = run_script([ProbeCommand("a", "echo x; echo y >&2")])
    lines = [line for line in raw.decode().splitlines() if line]  # blank lines end banners
    assert lines, raw
    assert all(line.startswith(nonce + " ") for line in lines), lines
    assert lines[-1] == f"{nonce} END"
    assert list(probe.outputs) == ["probe.devices", "a"]  # the device list comes first


def test_quoting_of_commands_with_quotes_and_dollars():
    cmd = """printf '%s|' "a b" 'c'"d" "$((1+2))" '$HOME' `echo bq`; echo "it's" """
    _, _, probe, _ = run_script([ProbeCommand("q", cmd)])
    assert probe.outputs["q"].stdout == "a b|cd|3|$HOME|bq|it's\n"
    assert probe.outputs["q"].rc == 0


def test_commands_get_no_stdin():
    _, _, probe, _ = run_script([ProbeCommand("stdin", "cat; echo rc=$?")], timeout=2)
    assert probe.outputs["stdin"].stdout == "rc=0\n"  # /dev/null: EOF at once, no hang


def test_command_cannot_write_to_the_framing_stream_on_fd_3():
    # fd 3 is where the script writes its records; it is closed for the command.
    _, _, probe, _ = run_script([ProbeCommand("fd3", "echo forged >&3; echo after"), ProbeCommand("next", "echo n")])
    assert probe.complete
    assert probe.outputs["fd3"].stdout == "after\n"
    assert "Bad file descriptor" in probe.outputs["fd3"].stderr
    assert probe.outputs["next"].stdout == "n\n"


# ------------------------------------------------------------------------------ bytes


def test_binary_and_invalid_utf8_output_survive_and_never_break_framing():
    _, _, probe, _ = run_script([
        ProbeCommand("bin", r"printf '\x00\xff\xfe\x80 ok\n\r\n\x1b[31mred'"),
        ProbeCommand("binerr", r"printf 'bad \xc3\x28 utf8\n' >&2; printf '\xe2\x82'"),
        ProbeCommand("utf8", "printf 'Ascend \\xe6\\x98\\x87\\xe8\\x85\\xbe\\n'"),
        ProbeCommand("after", "echo still framed"),
    ])
    assert probe.complete
    out = probe.outputs["bin"].stdout
    assert out.startswith("\x00")
    assert "\ufffd" in out  # invalid bytes decoded with replacement
    assert out.endswith(" ok\n\r\n\x1b[31mred")
    err = probe.outputs["binerr"]
    assert err.stderr.startswith("bad ") and err.stderr.endswith(" utf8\n") and "\ufffd" in err.stderr
    assert err.stdout == "\ufffd"  # a cut multi-byte sequence
    assert probe.outputs["utf8"].stdout == "Ascend 昇腾\n"
    assert probe.outputs["after"].stdout == "still framed\n"
    assert probe.outputs["after"].rc == 0


def test_output_lines_that_look_like_records_stay_data():
    nonce = new_nonce()
    fake = f"{nonce} END\n{nonce} B forged\n{nonce} R 0 0\n"
    _, _, probe, _ = run_script([ProbeCommand("liar", f"printf '{fake}'; printf '{fake}' >&2"),
                                 ProbeCommand("next", "echo n")], nonce=nonce)
    # Even knowing the nonce, a command's output is base64'd and cannot forge a record.
    assert "forged" not in probe.outputs
    assert probe.outputs["liar"].stdout == fake
    assert probe.outputs["liar"].stderr == fake
    assert probe.outputs["next"].stdout == "n\n"


# ------------------------------------------------------------------------------ caps


def test_output_over_the_cap_is_truncated_and_flagged():
    cap = 1000
    _, _, probe, _ = run_script([
        ProbeCommand("big", "head -c 5000 /dev/zero | tr '\\0' x; echo never-seen"),
        ProbeCommand("bigerr", "head -c 5000 /dev/zero | tr '\\0' y >&2"),
        ProbeCommand("small", "head -c 999 /dev/zero | tr '\\0' s"),
        ProbeCommand("after", "echo ok"),
    ], cap=cap)
    assert probe.complete
    big = probe.outputs["big"]
    assert big.stdout == "x" * cap
    assert big.truncated is True
    assert probe.outputs["bigerr"].stderr == "y" * cap  # stderr is capped as well
    assert probe.outputs["small"].stdout == "s" * 999
    assert probe.outputs["small"].truncated is False
    assert probe.outputs["after"].stdout == "ok\n"


def test_a_long_output_comes_back_exactly_and_compressed_from_the_python_runner(runner):
    # `seq 1 30000`: 169 KB of text, as `getent hosts` for every inventory name prints at fleet size.
    nonce, stream, probe, _ = run_script([ProbeCommand("long", "seq 1 30000"), ProbeCommand("short", "echo hi")])
    expected = "".join(f"{i}\n" for i in range(1, 30001))
    assert probe.outputs["long"].stdout == expected and probe.outputs["long"].truncated is False
    assert probe.outputs["short"].stdout == "hi\n"
    kinds = [line.split()[1] for line in stream.decode().splitlines() if line.startswith(nonce + " ")]
    if runner == "auto":
        assert kinds.count("Z") == 1  # only the long one is deflated (the short one and the device list: O)
        assert len(stream) < len(expected) / 2  # base64 alone would be 4/3 of it
    else:
        assert "Z" not in kinds


def _records(nonce: str, stdout_record: str) -> str:
    return f"{nonce} B x\n{stdout_record}\n{nonce} R 0 5\n{nonce} E \n{nonce} B y\n{nonce} O {_b64(b'ok')}\n" \
           f"{nonce} R 0 1\n{nonce} E \n{nonce} END\n"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_a_compressed_output_is_inflated_no_further_than_the_cap():
    nonce = new_nonce()
    bomb = zlib.compress(b"a" * (10 << 20), 9)  # 10 MiB of "a" in ~10 KB
    probe = parse_probe_output(_records(nonce, f"{nonce} Z {_b64(bomb)}"), nonce, cap=1000)
    assert probe.outputs["x"].stdout == "a" * 1000 and probe.outputs["x"].truncated is True
    assert probe.outputs["y"].stdout == "ok" and probe.complete


def test_a_compressed_record_that_does_not_inflate_is_unreadable_output_not_a_crash():
    nonce = new_nonce()
    probe = parse_probe_output(_records(nonce, f"{nonce} Z {_b64(b'not zlib at all')}"), nonce)
    assert probe.outputs["x"].stdout == "<a compressed output that does not inflate>"
    assert probe.outputs["x"].rc == 0 and probe.outputs["y"].stdout == "ok" and probe.complete


def test_output_of_exactly_cap_bytes_is_not_flagged_truncated():
    _, _, probe, _ = run_script([ProbeCommand("exact", "head -c 1000 /dev/zero | tr '\\0' e")], cap=1000)
    assert probe.outputs["exact"].stdout == "e" * 1000
    assert probe.outputs["exact"].truncated is False


def test_default_cap_is_one_mebibyte():
    assert DEFAULT_CAP == 1 << 20


# ------------------------------------------------------------------------------ timeouts


def test_timeout_gives_124_and_skips_later_commands_of_the_same_tool_only():
    t0 = time.monotonic()
    _, _, probe, _ = run_script([
        ProbeCommand("npu.first", "sleep 30", tool="npu-smi"),
        ProbeCommand("npu.second", "echo never", tool="npu-smi"),
        ProbeCommand("other", "echo other", tool="ip"),
        ProbeCommand("untagged", "echo untagged"),  # no tool: its own breaker (its name)
        ProbeCommand("npu.third", "echo never either", tool="npu-smi"),
    ], timeout=1)
    assert probe.complete
    first = probe.outputs["npu.first"]
    assert first.rc == 124
    assert 0.9 <= first.elapsed_s < 30
    for name in ("npu.second", "npu.third"):
        skipped = probe.outputs[name]
        assert skipped.rc is None and skipped.stdout == "" and skipped.skipped
        assert "npu-smi timed out earlier" in skipped.skipped and "npu.first" in skipped.skipped
    assert probe.outputs["other"].stdout == "other\n" and probe.outputs["other"].rc == 0
    assert probe.outputs["untagged"].stdout == "untagged\n"
    assert time.monotonic() - t0 < 30


def test_a_quick_exit_124_is_not_a_hang():
    _, _, probe, _ = run_script([ProbeCommand("x1", "exit 124", tool="t"), ProbeCommand("x2", "echo ran", tool="t")])
    assert probe.outputs["x1"].rc == 124
    assert probe.outputs["x2"].skipped is None and probe.outputs["x2"].stdout == "ran\n"


def test_the_hang_breaker_works_without_epochrealtime():
    """bash before 5.0 (Ubuntu 18.04, CentOS 7) has no EPOCHREALTIME: the bash runner then times
    commands in whole seconds, and a hung tool still costs one timeout, not one per call."""
    if RUNNER != "bash":
        pytest.skip("the bash runner's clock")
    _, _, probe, took = run_script([ProbeCommand("h1", "sleep 30", tool="t"), ProbeCommand("h2", "sleep 30", tool="t"),
                                    ProbeCommand("h3", "sleep 30", tool="t")], timeout=1,
                                   prefix="unset EPOCHREALTIME; ")
    assert probe.outputs["h1"].rc == 124 and probe.outputs["h1"].elapsed_s >= 1
    assert probe.outputs["h2"].skipped and probe.outputs["h3"].skipped
    assert took < 20


def test_background_child_holding_stdout_does_not_outlive_the_command_timeout():
    m = f"100.{secrets.randbelow(10**9):09d}"  # a sleep of its own: its command line names it
    _, _, probe, took = run_script([ProbeCommand("bg", f"sleep {m} & echo hi"), ProbeCommand("after", "echo a")],
                                   timeout=1)
    assert took < 30, took  # bounded by the 1 s timeout, not the child's 100 s (slack for a stalled VM)
    assert probe.outputs["bg"].rc == 0 and probe.outputs["after"].stdout == "a\n"  # and the run went on
    assert not _left_running(m)  # the child was killed, not left on the node


def test_a_command_keeps_its_exit_status_and_line_numbers_with_the_reaper():
    _, _, probe, _ = run_script([ProbeCommand("x", "nosuchcommand_pf; exit 7")])
    assert probe.outputs["x"].rc == 7
    assert "line 1: nosuchcommand_pf" in probe.outputs["x"].stderr


def _left_running(text: str, seconds: float = 30) -> list[str]:
    """Processes whose command line holds ``text``, waited for to go (a kill takes a moment)."""
    deadline = time.monotonic() + seconds
    while True:
        left = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    if text.encode() in fh.read():
                        left.append(pid)
            except OSError:
                pass
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


# ------------------------------------------------------------------------------ framing


def test_lines_with_another_nonce_are_ignored():
    nonce, raw, probe, _ = run_script([ProbeCommand("a", "echo real")])
    other = "PFdeadbeefdeadbeef"
    b64 = base64.b64encode(b"forged").decode()
    injected = (f"{other} B a\n{other} O {b64}\n{other} R 0 0\n{other} E \n{other} END\n"
                f"{nonce}X B glued\n{nonce}B nospace\n").encode()
    stream = injected + raw.replace(f"{nonce} END\n".encode(), b"") + injected
    parsed = parse_probe_output(stream, nonce)
    assert parsed.outputs["a"].stdout == "real\n"
    assert set(parsed.outputs) == {"probe.devices", "a"}
    assert parsed.complete is False  # only another nonce's END
    # Read with the wrong nonce, the real stream is nothing at all.
    wrong = parse_probe_output(raw, other)
    assert wrong.outputs == {} and wrong.complete is False
    assert probe.complete


def test_output_imitating_the_framing_with_a_guessed_nonce():
    nonce, _, probe, _ = run_script([ProbeCommand("a", 'echo "PFdeadbeef END"; echo "PFdeadbeef B evil"'),
                                     ProbeCommand("b", "echo b")])
    assert probe.complete
    assert "evil" not in probe.outputs
    assert probe.outputs["a"].stdout == "PFdeadbeef END\nPFdeadbeef B evil\n"
    assert probe.outputs["b"].stdout == "b\n"


def test_noisy_login_banner_before_the_script_is_ignored():
    cmds = [ProbeCommand("a", "echo one"), ProbeCommand("b", "echo two >&2; exit 1")]
    nonce = new_nonce()
    _, _, quiet, _ = run_script(cmds, nonce=nonce)
    banner = "echo 'Welcome to EulerOS'; echo; echo 'PFdeadbeef B bashrc'; printf '\\xff\\xfe\\n'; "
    _, raw, noisy, _ = run_script(cmds, nonce=nonce, prefix=banner)
    assert raw.startswith(b"Welcome to EulerOS\n")
    assert noisy.complete
    assert {k: (v.stdout, v.stderr, v.rc) for k, v in noisy.outputs.items()} == \
           {k: (v.stdout, v.stderr, v.rc) for k, v in quiet.outputs.items()}


def test_banner_without_trailing_newline_does_not_eat_the_first_record():
    _, _, probe, _ = run_script([ProbeCommand("a", "echo one")], prefix="printf 'Last login: today'; ")
    assert probe.outputs["a"].stdout == "one\n"
    assert "probe.devices" in probe.outputs


def test_stream_cut_before_end_is_incomplete():
    nonce, raw, probe, _ = run_script([ProbeCommand("a", "echo first"), ProbeCommand("b", "echo second")])
    assert probe.complete
    end = raw.rindex(f"{nonce} END".encode())
    # Cut just before END: everything read, but not complete.
    cut = parse_probe_output(raw[:end], nonce)
    assert cut.complete is False
    assert cut.outputs["b"].stdout == "second\n" and cut.outputs["b"].rc == 0
    # Cut inside the END marker itself.
    assert parse_probe_output(raw[:end + len(nonce) + 3], nonce).complete is False
    # END without its trailing newline still counts: every byte arrived.
    assert parse_probe_output(raw.rstrip(b"\n"), nonce).complete is True
    # Cut in the middle of b's records: b has no exit status.
    b_at = raw.index(f"{nonce} B b\n".encode())
    mid = parse_probe_output(raw[:b_at + len(nonce) + 6], nonce)
    assert mid.complete is False
    assert mid.outputs["a"].rc == 0
    assert mid.outputs["b"].rc is None
    # Every cut point parses without an exception, and none is complete.
    for i in range(0, end, 7):
        assert parse_probe_output(raw[:i], nonce).complete is False


def test_parse_handles_skip_records_and_malformed_fields():
    n = "PFabc"
    data = (f"{n} O {base64.b64encode(b'orphan').decode()}\n"   # O before any B: ignored
            f"{n} B x\n{n} O !!!notbase64\n{n} R notanumber 5\n{n} E \n"
            f"{n} B y\n{n} O eQ==\n{n} R 7\n{n} E \n"
            f"{n} S z tool timed out earlier on this host (x)\n"
            f"{n} S w\n"
            f"{n} END\n")
    out = parse_probe_output(data, n)
    assert out.complete
    assert out.outputs["x"].rc is None
    assert out.outputs["y"].stdout == "y" and out.outputs["y"].rc == 7 and out.outputs["y"].elapsed_s == 0.0
    assert out.outputs["z"].skipped == "tool timed out earlier on this host (x)"
    assert out.outputs["w"].skipped == "not run"
    assert "orphan" not in {v.stdout for v in out.outputs.values()}


def test_parse_accepts_str_and_bytes_alike():
    nonce, raw, _, _ = run_script([ProbeCommand("a", "echo x")])
    assert parse_probe_output(raw, nonce) == parse_probe_output(raw.decode(), nonce)


def test_command_output_json_round_trip():
    co = CommandOutput(stdout="a\x00\ufffd", stderr="e", rc=None, elapsed_s=1.5, truncated=True, skipped="why")
    assert CommandOutput.from_json(co.to_json()) == co
    assert CommandOutput.from_json({}) == CommandOutput(stdout="", stderr="", rc=None)


# ------------------------------------------------------------------------------ read-only


def test_the_script_writes_no_files(tmp_path):
    home, tmp, cwd = tmp_path / "home", tmp_path / "tmp", tmp_path / "cwd"
    for d in (home, tmp, cwd):
        d.mkdir()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "TMPDIR": str(tmp),
           "LANG": "C.UTF-8"}
    # The real catalog of phase-one facts, plus a few odd ones.
    cmds = [s.probe_command() for s in FACTS.values() if s.phase == 1]
    cmds += [ProbeCommand("cd", "cd / && pwd"), ProbeCommand("slow", "sleep 3", tool="slowtool"),
             ProbeCommand("slow2", "echo x", tool="slowtool")]
    _, _, probe, _ = run_script(cmds, timeout=1, cap=4096, env=env, cwd=str(cwd))
    assert probe.complete
    assert probe.outputs["session.env"].rc == 0
    assert f"HOME={home}" in probe.outputs["session.env"].stdout
    assert probe.outputs["slow2"].skipped
    for d in (home, tmp, cwd):
        assert list(d.iterdir()) == [], d


# ------------------------------------------------------------------------------ per-device


def test_no_davinci_devices_here_means_no_per_device_records():
    if any(n.startswith("davinci") and n[7:].isdigit() for n in os.listdir("/dev")):
        pytest.skip("this machine has /dev/davinciN nodes")
    _, _, probe, _ = run_script([ProbeCommand("hccn.link", 'echo "$PF_DEV"', tool="hccn_tool", per_device=True),
                                 ProbeCommand("host", "echo host")])
    assert probe.complete
    assert probe.outputs["probe.devices"].stdout.split() == []
    assert probe.outputs["probe.devices"].rc == 0
    assert not [k for k in probe.outputs if "/" in k]
    assert probe.outputs["host"].stdout == "host\n"


def _can_unshare_mount() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    r = subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True)
    return r.returncode == 0


@pytest.mark.skipif(not _can_unshare_mount(), reason="needs root and unshare -m for a private /dev")
def test_per_device_loop_over_a_private_dev():
    """A private mount namespace with a tmpfs /dev holding fake davinci entries."""
    nonce = new_nonce()
    script = build_script([
        ProbeCommand("dev.echo", 'echo "dev=$PF_DEV"', tool="t1", per_device=True),
        ProbeCommand("dev.hang", '[ "$PF_DEV" = 1 ] && sleep 30; echo "dev=$PF_DEV"', tool="t2", per_device=True),
        ProbeCommand("host", "echo host", tool="t2x"),
    ], nonce, timeout=1)
    setup = ("mount -t tmpfs none /dev && cd /dev && "
             "touch davinci0 davinci1 davinci2 davinci10 davinci_manager davinciX davinci1a vdavinci5 && "
             'cd / && exec bash -c "$0"')
    proc = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", setup, script],
                          capture_output=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    probe = parse_probe_output(proc.stdout, nonce)
    assert probe.complete
    assert probe.outputs["probe.devices"].stdout.split() == ["0", "1", "2", "10"]  # numeric order
    for d in (0, 1, 2, 10):
        assert probe.outputs[f"dev.echo/{d}"].stdout == f"dev={d}\n"
    assert probe.outputs["dev.hang/0"].stdout == "dev=0\n"
    assert probe.outputs["dev.hang/1"].rc == 124
    if RUNNER == "bash":
        # Device 1 hung: the bash runner, one call at a time, does not ask the tool about 2 and 10.
        for d in (2, 10):
            assert "timed out earlier" in probe.outputs[f"dev.hang/{d}"].skipped
    else:
        # The python runner asks about the NPUs side by side once the first call answered: the
        # hang on device 1 costs device 1 only (test_noderunner.py covers the lanes).
        for d in (2, 10):
            assert probe.outputs[f"dev.hang/{d}"].stdout == f"dev={d}\n"
    assert probe.outputs["host"].stdout == "host\n"
    assert not [k for k in probe.outputs if k.endswith(("/X", "/1a", "/5", "/_manager"))]


def test_params_are_exported_quoted_and_never_executed(tmp_path):
    marker = tmp_path / "pwned"
    payload = f"x'; touch {marker}; echo '$(touch {marker})`touch {marker}`"
    nonce = new_nonce()
    script = build_script([ProbeCommand("p", 'printf "%s" "$PF_CHECKPOINT_DIR"')], nonce, 5,
                          params={"PF_CHECKPOINT_DIR": payload})
    proc = subprocess.run(["bash", "-c", script], capture_output=True, timeout=30)
    probe = parse_probe_output(proc.stdout, nonce)
    assert probe.outputs["p"].stdout == payload
    assert not marker.exists()


@pytest.mark.parametrize("name", ["HOME", "PF_lower", "PF_A B", "PF_A;x"])
def test_param_names_are_restricted(name):
    with pytest.raises(ValueError):
        build_script([], new_nonce(), 5, params={name: "v"})


def _fake_sudo(tmp_path, body):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "sudo").write_text("#!/bin/sh\n" + body)
    (bindir / "sudo").chmod(0o755)
    (bindir / "npu-smi").write_text("#!/bin/sh\necho \"npu-smi as $(id -un) $*\"\n")
    (bindir / "npu-smi").chmod(0o755)
    return {"PATH": f"{bindir}:/usr/bin:/bin", "HOME": str(tmp_path)}


def test_sudo_wraps_only_the_vendor_tools(tmp_path):
    env = _fake_sudo(tmp_path, 'echo "sudo $*" >&2; shift; shift; exec "$@"\n')
    nonce = new_nonce()
    script = build_script([ProbeCommand("smi", '"$PF_NPUSMI" info', tool="npu-smi"),
                           ProbeCommand("plain", "echo plain")], nonce, 5, params={"PF_SUDO": "1"})
    proc = subprocess.run(["bash", "-c", script], capture_output=True, env=env, timeout=30)
    probe = parse_probe_output(proc.stdout, nonce)
    assert probe.outputs["smi"].stdout.startswith("npu-smi as ")
    assert "sudo -n -- " in probe.outputs["smi"].stderr
    assert probe.outputs["plain"].stderr == ""


def test_sudo_wanting_a_password_is_a_clear_error(tmp_path):
    from preflight.facts import FACTS, FactUnavailable, HostFacts

    env = _fake_sudo(tmp_path, 'echo "sudo: a password is required" >&2; exit 1\n')
    nonce = new_nonce()
    script = build_script([FACTS["npu_smi.info"].probe_command()], nonce, 5, params={"PF_SUDO": "1"})
    proc = subprocess.run(["bash", "-c", script], capture_output=True, env=env, timeout=30)
    facts = HostFacts(host="n1", raw=parse_probe_output(proc.stdout, nonce).outputs)
    with pytest.raises(FactUnavailable, match="sudo -n needs a password"):
        facts.get("npu_smi.info")


def test_one_sudo_refusal_stops_the_tools_later_calls(tmp_path):
    """Each refused call is an auth-log entry (and a mail to root): one per tool is enough."""
    env = _fake_sudo(tmp_path, 'echo "$*" >> "$HOME/sudo.log"; echo "sudo: a password is required" >&2; exit 1\n')
    nonce = new_nonce()
    script = build_script([ProbeCommand("one", '"$PF_NPUSMI" info', tool="npu-smi"),
                           ProbeCommand("two", '"$PF_NPUSMI" info -t board', tool="npu-smi")], nonce, 5,
                          params={"PF_SUDO": "1"})
    proc = subprocess.run(["bash", "-c", script], capture_output=True, env=env, timeout=30)
    out = parse_probe_output(proc.stdout, nonce).outputs
    assert out["one"].rc == 1 and "sudo -n refused npu-smi earlier on this host (one)" in out["two"].skipped
    assert len((tmp_path / "sudo.log").read_text().splitlines()) == 1


@pytest.mark.parametrize("refusal", [
    "sorry, you must have a tty to run sudo",
    "sudo: /usr/local/Ascend/driver/tools/hccn_tool: command not found",
    "Sorry, user preflight is not allowed to execute '/usr/local/bin/hccn_tool -i 0 -ip -g' as root on node-01.",
], ids=["requiretty", "off-secure-path", "no-sudoers-rule"])
def test_any_sudo_refusal_is_not_read_as_the_tools_answer(tmp_path, refusal):
    """sudo exits 1 for its own failures, and hccn_tool -ip -g's exit 1 is accepted (an NPU without
    an address): a refusal must be an error naming sudo, not "no device IP" on every NPU."""
    from preflight.facts import FACTS, FactUnavailable, HostFacts, remedy_for_unevaluated

    env = _fake_sudo(tmp_path, f'echo "{refusal}" >&2; exit 1\n')
    (tmp_path / "dev").mkdir()
    nonce = new_nonce()
    script = build_script([FACTS["hccn.ip"].probe_command()], nonce, 5, params={"PF_SUDO": "1"})
    proc = subprocess.run(["bash", "-c", "PF_DEVS=0; " + script.replace("PF_DEVS=$(", "PF_DEVS=0 #$(")],
                          capture_output=True, env=env, timeout=30)
    facts = HostFacts(host="n1", raw=parse_probe_output(proc.stdout, nonce).outputs)
    [value] = facts.per_device("hccn.ip").values()
    assert isinstance(value, FactUnavailable) and "sudo -n refused to run it" in str(value), value
    assert refusal[:30] in str(value)
    assert "sudoers" in remedy_for_unevaluated(str(value))


def test_a_sudo_warning_before_the_tools_answer_is_not_a_refusal(tmp_path):
    """sudo warns and runs ("unable to resolve host", "setrlimit" in containers): hccn_tool's own
    exit 1 (an NPU without an address) stays its answer."""
    from preflight.facts import FACTS, HostFacts

    env = _fake_sudo(tmp_path, 'echo "sudo: unable to resolve host node-07: Name or service not known" >&2; '
                               'echo "sudo: setrlimit(RLIMIT_CORE): Operation not permitted" >&2; exit 1\n')
    nonce = new_nonce()
    script = build_script([FACTS["hccn.ip"].probe_command()], nonce, 5, params={"PF_SUDO": "1"})
    proc = subprocess.run(["bash", "-c", script.replace("PF_DEVS=$(", "PF_DEVS=0 #$(")], capture_output=True,
                          env=env, timeout=30)
    facts = HostFacts(host="n1", raw=parse_probe_output(proc.stdout, nonce).outputs)
    assert list(facts.per_device("hccn.ip").values()) == [None]  # no device IP: hccn.device_ip's finding


@pytest.mark.parametrize("sudo_body, want", [
    ('echo "sudo $*" >> "$HOME/sudo.log"; shift; shift; exec "$@"\n', "rc=0 3 packets transmitted, 3 received"),
    ('echo "sudo: a password is required" >&2; exit 1\n', "skipped sudo -n needs a password for hccn_tool"),
    ('echo "sorry, you must have a tty to run sudo" >&2; exit 1\n',
     "skipped sudo -n refused hccn_tool: sorry, you must have a tty to run sudo"),
], ids=["nopasswd", "password-wanted", "requiretty"])
def test_the_npu_ping_runs_hccn_tool_through_sudo_when_the_inventory_says_so(tmp_path, sudo_body, want):
    # Phase one's hccn_tool calls go through `sudo -n` with sudo: true; the ping must too, or a
    # non-root user's every ping reads as a network fault.
    from preflight.activeprobe import _PING
    from preflight.facts import remedy_for_unevaluated

    env = _fake_sudo(tmp_path, sudo_body)
    hccn = tmp_path / "bin" / "hccn_tool"
    hccn.write_text('#!/bin/sh\necho "3 packets transmitted, 3 received, 0.00% packet loss"\n')
    hccn.chmod(0o755)
    env["PF_SUDO"] = "1"
    proc = subprocess.run(["bash", "-c", _PING, "preflight", "0=29.0.0.2"], capture_output=True, env=env,
                          text=True, timeout=30)
    assert proc.stdout.startswith("0 29.0.0.2 ") and want in proc.stdout, proc.stdout
    if "skipped" in want:  # cluster.device_ping reports it as not evaluated, with this remedy
        assert "NOPASSWD" in remedy_for_unevaluated(proc.stdout)
    else:
        assert f"sudo -n -- {hccn} -i 0 -ping -g address 29.0.0.2" in (tmp_path / "sudo.log").read_text()


# ------------------------------------------------------------------------------ locale


@pytest.fixture(scope="module")
def german_locale(tmp_path_factory):
    """A compiled de_DE.UTF-8 (LOCPATH) on a machine with coreutils' German messages."""
    if not (shutil.which("localedef") and Path("/usr/share/i18n/locales/de_DE").exists()
            and Path("/usr/share/locale/de/LC_MESSAGES/coreutils.mo").exists()):
        pytest.skip("needs localedef, the de_DE locale source and coreutils' German messages")
    where = tmp_path_factory.mktemp("locale")
    made = subprocess.run(["localedef", "-i", "de_DE", "-f", "UTF-8", str(where / "de_DE.UTF-8")],
                          capture_output=True, text=True, timeout=120)
    if not (where / "de_DE.UTF-8").exists():
        pytest.skip(f"localedef failed: {made.stderr[-200:]}")
    return str(where)


def test_commands_answer_in_english_on_a_node_set_up_in_another_language(german_locale):
    """A node whose session speaks German: stat says "zeichenorientierte Spezialdatei" there, which
    the device parser would not know. Every command runs in the C locale; the commands reporting
    the session's environment keep it as it is."""
    env = {"PATH": os.environ["PATH"], "LOCPATH": german_locale, "LANG": "de_DE.UTF-8", "LC_ALL": "de_DE.UTF-8",
           "LANGUAGE": "de"}
    german = subprocess.run(["stat", "-c", "%F", "/dev/null"], env=env, capture_output=True, text=True).stdout
    assert german.strip() == "zeichenorientierte Spezialdatei"  # the trap is real here
    _, _, probe, _ = run_script([ProbeCommand("kind", "stat -c %F /dev/null; echo \"${LANGUAGE-unset}\""),
                                 ProbeCommand("session.env", "env -0", keep_locale=True)], timeout=10, env=env)
    assert probe.outputs["kind"].stdout == "character special file\nunset\n"
    session = dict(kv.split("=", 1) for kv in probe.outputs["session.env"].stdout.split("\0") if "=" in kv)
    assert (session["LC_ALL"], session["LANGUAGE"]) == ("de_DE.UTF-8", "de")
    # The catalog's own facts: only the two environment reports keep the session's locale.
    assert {name for name, spec in FACTS.items() if spec.keep_locale} == {"session.env", "session.env_login"}
