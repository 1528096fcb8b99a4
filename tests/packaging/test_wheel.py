"""The built wheel, installed into a fresh virtualenv, works from any directory.

This is how operators install the checker, so it is tested the same way: build the wheel
from this checkout, install it (dependencies from the package index) into a venv with no
access to the checkout or this environment's packages, then run `pytest --inventory` and
`preflight --inventory` from an unrelated directory.
"""

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(args, cwd, timeout=300):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    work = tmp_path_factory.mktemp("wheel")
    built = _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(work / "dist"), str(ROOT)], work)
    assert built.returncode == 0, built.stderr[-3000:]
    [wheel] = (work / "dist").glob("ascend_preflight-*.whl")
    venv = work / "venv"
    made = _run([sys.executable, "-m", "venv", str(venv)], work)
    assert made.returncode == 0, made.stderr
    pip = _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel)],
               work, timeout=600)
    assert pip.returncode == 0, pip.stderr[-3000:]
    elsewhere = work / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "hosts.yaml").write_text("hosts:\n  - {name: localhost, connection: local}\n")
    return wheel, venv, elsewhere


def test_wheel_ships_the_check_catalog_and_the_entry_points(installed):
    wheel, _, _ = installed
    names = zipfile.ZipFile(wheel).namelist()
    for module in ("cluster", "devices", "npu", "hccl", "env", "tools", "limits", "network"):
        assert f"preflight/checks/{module}.py" in names
    for module in ("versions", "firewall", "checkpoint", "packages"):
        assert f"preflight/checks/{module}.py" in names
    assert "preflight/compat/compat.yaml" in names and "preflight/nodefacts.py" in names
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "[pytest11]" in text and "preflight.plugin" in text and "preflight = preflight.cli:main" in text


@pytest.mark.parametrize("command", ["pytest", "preflight"])
def test_installed_checker_runs_the_builtin_checks_from_another_directory(installed, command):
    _, venv, elsewhere = installed
    proc = _run([str(venv / "bin" / command), "--inventory", "hosts.yaml", "--report-dir", f"out-{command}"],
                elsewhere)
    assert proc.returncode in (0, 1), proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "Traceback" not in proc.stdout + proc.stderr
    doc = json.loads((elsewhere / f"out-{command}" / "preflight.json").read_text())
    checks = {r["check"] for r in doc["results"]}
    assert {"cluster.reachable", "devices.davinci_nodes", "limits.nofile", "hccl.link_up"} <= checks
    assert (elsewhere / f"out-{command}" / "preflight.html").exists()
    assert (elsewhere / f"out-{command}" / "matrix.html").exists()


def test_installed_checker_reports_a_bad_inventory_in_one_line(installed):
    _, venv, elsewhere = installed
    (elsewhere / "bad.yaml").write_text("hosts:\n  - {name: node1, adress: 10.0.0.1}\n")
    proc = _run([str(venv / "bin" / "pytest"), "--inventory", "bad.yaml"], elsewhere)
    assert proc.returncode == 4
    assert "bad.yaml:2" in proc.stdout + proc.stderr and "adress" in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
