"""--inventory may belong to another plugin (pytest-ansible registers it): the checker still
starts, through --preflight-inventory, which always exists."""

import json

pytest_plugins = ["pytester"]


def test_preflight_inventory_works_when_another_plugin_owns_inventory(pytester):
    pytester.makepyfile(ansiblelike='''
def pytest_addoption(parser):
    parser.addoption("--inventory", dest="ansible_inventory", default=None, help="owned by another plugin")
''')
    pytester.makefile(".yaml", inv="hosts:\n  - {name: localhost, connection: local}\n")
    pytester.syspathinsert()
    result = pytester.runpytest_subprocess("-p", "ansiblelike", "--preflight-inventory", "inv.yaml",
                                           "-k", "reachable", "--report-dir", "out")
    assert result.ret == 0, result.stdout.str()[-2000:]
    doc = json.loads((pytester.path / "out" / "preflight.json").read_text())
    assert {r["check"] for r in doc["results"]} == {"cluster.reachable"}
    # --inventory still means what the other plugin made it mean: no preflight run.
    result = pytester.runpytest_subprocess("-p", "ansiblelike", "--inventory", "inv.yaml")
    assert not (pytester.path / "reports").exists()


def test_overlapping_runs_keep_their_own_reports(pytester):
    """Two nightly jobs writing to the same --report-dir at the same time."""
    import subprocess
    import sys

    pytester.makefile(".yaml", inv="hosts:\n  - {name: localhost, connection: local}\n")
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--preflight-inventory", "inv.yaml",
           "--report-dir", "shared", "-k", "reachable or nofile"]
    runs = [subprocess.Popen(cmd, cwd=pytester.path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for _ in range(2)]
    for run in runs:
        assert run.wait(timeout=120) in (0, 1)
    folders = sorted((pytester.path / "shared" / "runs").iterdir())
    assert len(folders) == 2
    for folder in folders:
        doc = json.loads((folder / "preflight.json").read_text())
        assert doc["run_id"] == folder.name
        assert (folder / "preflight.html").exists() and (folder / "matrix.html").exists()
    latest = (pytester.path / "shared" / "preflight.json").resolve()
    assert latest.parent in [f.resolve() for f in folders]
