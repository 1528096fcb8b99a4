"""Security end to end: crafted inventories never run their payloads on a node, secrets never
reach a report or a facts file, and the probe only ever calls read-only tool forms."""

from __future__ import annotations

import json
import time

from tests.e2e.test_preflight_e2e import run_preflight

PAYLOADS = [
    "eth0; touch /tmp/pwned-semicolon",
    "$(touch /tmp/pwned-dollar)",
    "`touch /tmp/pwned-backtick`",
    "x' ; touch /tmp/pwned-quote ; '",
    "a\" && touch /tmp/pwned-dquote && \"",
    "| touch /tmp/pwned-pipe",
]


def pwned(sim):
    found = []
    for node in sim.nodes:
        out = node.run("ls /tmp /root 2>/dev/null | grep pwned || true").stdout.split()
        found += [f"{node.name}:{name}" for name in out]
    return found


def test_crafted_inventory_values_never_run(sim, tmp_path):
    groups = {
        "min_nofile": sim.default_nofile,
        "env": {"HCCL_SOCKET_IFNAME": PAYLOADS[0], "GLOO_SOCKET_IFNAME": PAYLOADS[1], "TP_SOCKET_IFNAME": PAYLOADS[2],
                "HCCL_IF_BASE_PORT": PAYLOADS[3], "MASTER_ADDR": PAYLOADS[4]},
        "checkpoint_dir": "/tmp/" + PAYLOADS[3],
        "shared_paths": ["/tmp/" + p for p in PAYLOADS],
    }
    inv = sim.write_inventory(tmp_path / "hosts.yaml", head=groups, worker=groups)
    proc, doc = run_preflight(inv, tmp_path)
    assert "Traceback" not in proc.stdout
    assert pwned(sim) == []
    # The payloads were judged as the data they are: an interface that does not exist.
    bad = [r for r in doc["results"] if r["check"] == "env.socket_ifname" and r["outcome"] == "failed"]
    assert {r["subject"] for r in bad} >= {"HCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME"}
    # An interpreter that cannot be a program is refused before any connection (it would be quoted).
    import subprocess
    import sys

    inv = sim.write_inventory(tmp_path / "py.yaml", head={**groups, "python": "/usr/bin/python3; touch /tmp/pwned-py"})
    proc = subprocess.run([sys.executable, "-m", "pytest", "--inventory", str(inv), "-p", "no:cacheprovider"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 4 and "not a program name or path" in proc.stdout + proc.stderr, proc.stdout
    assert pwned(sim) == []


def test_crafted_host_names_are_rejected_before_any_connection(sim, tmp_path):
    for name in ("node1; touch /tmp/pwned-name", "$(reboot)", "-oProxyCommand=touch /tmp/pwned-opt"):
        inv = tmp_path / "bad.yaml"
        inv.write_text(json.dumps({"hosts": [{"name": name}]}))
        import subprocess
        import sys

        proc = subprocess.run([sys.executable, "-m", "pytest", "--inventory", str(inv), "-p", "no:cacheprovider"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 4, proc.stdout + proc.stderr
        assert "bad.yaml:1" in proc.stdout + proc.stderr
    assert pwned(sim) == []


def test_secrets_stay_out_of_reports_and_facts(sim, tmp_path):
    secrets = {"DB_PASSWORD": "hunter2-db", "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI-secret",
               "HF_TOKEN": "hf_abcdefSECRET", "MY_API_KEY": "apikey-12345"}
    node = sim.node("node-02")
    with node.set_env(**secrets):
        facts_file = tmp_path / "facts.json"
        proc, doc = run_preflight(sim.write_inventory(tmp_path / "hosts.yaml"), tmp_path,
                                  "--facts-out", str(facts_file))
    texts = {"stdout": proc.stdout, "facts": facts_file.read_text()}
    for name in ("preflight.json", "preflight.html", "matrix.html"):
        texts[name] = (tmp_path / "reports" / name).read_text()
    for where, text in texts.items():
        for value in secrets.values():
            assert value not in text, (where, value)
    assert "DB_PASSWORD=<redacted>" in texts["facts"]
    # The redacted capture still replays: the same results offline.
    proc2, doc2 = run_preflight(sim.write_inventory(tmp_path / "hosts.yaml"), tmp_path / "replay",
                                "--facts-in", str(facts_file))

    def seen(d):
        return {(r["check"], r["host"], r["subject"], r["outcome"]) for r in d["results"]}

    assert seen(doc2) == seen(doc)


def test_probe_calls_only_read_only_tool_forms(sim, tmp_path):
    for node in sim.nodes:
        node.clear_calls()
    run_preflight(sim.write_inventory(tmp_path / "hosts.yaml"), tmp_path, "--ping", "all")
    calls = [c for node in sim.nodes for c in node.calls()]
    assert calls, "the fakes log every call"
    for call in calls:
        args = call["args"]
        if call["prog"] == "hccn_tool":
            assert "-s" not in args and "-g" in args, call
        elif call["prog"] == "npu-smi":
            assert args[:1] == ["info"], call
        else:
            raise AssertionError(f"unexpected tool call {call}")


def test_a_node_asking_for_a_second_factor_never_prompts_on_the_controller(sim, tmp_path):
    """With `AuthenticationMethods publickey,...` a node accepts the key and asks for more:
    paramiko's SSHClient then called input() for the node's prompts, which under `pytest -s` read
    the operator's terminal and sent it to the node (found by review).  The login is refused
    instead, saying why; the other nodes are checked as usual."""
    node = sim.node("node-02")
    # Not node.restart(): it waits for a key-only login, which this sshd no longer allows.
    node.sshd_options.update({"AuthenticationMethods": "publickey,password", "PasswordAuthentication": "yes"})
    node.stop(sessions=False)
    node._spawn_sshd()
    deadline = time.monotonic() + 60
    while "Server listening" not in node.sshd_log.read_text().rsplit("--- simcluster", 1)[-1]:
        assert time.monotonic() < deadline, node.sshd_log.read_text()[-2000:]
        time.sleep(0.1)
    inv = sim.write_inventory(tmp_path / "hosts.yaml", head={"min_nofile": sim.default_nofile},
                              worker={"min_nofile": sim.default_nofile})
    proc, doc = run_preflight(inv, tmp_path, "--connect-timeout", "10", "-k", "reachable")
    hosts = {h["name"]: h for h in doc["hosts"]}
    assert hosts["node-01"]["reachable"] and hosts["node-03"]["reachable"], proc.stdout[-3000:]
    refused = hosts["node-02"]
    assert not refused["reachable"] and refused["error_kind"] == "auth", refused
    assert "accepted the key but asks for a second factor or an interactive login" in refused["error"], refused
    assert "preflight never prompts" in refused["error"]
