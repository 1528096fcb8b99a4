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
