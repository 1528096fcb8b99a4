"""preflight.inventory: native and Ansible YAML inventories, validation and error messages."""

from __future__ import annotations

import dataclasses
import json
import pickle
import re
import textwrap
from pathlib import Path

import pytest

from preflight.inventory import KEYS, Host, Inventory, InventoryError, load_inventory, parse_jump_host

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", "/home/op")


def write(tmp_path: Path, text: str, name: str = "hosts.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def load(tmp_path: Path, text: str, name: str = "hosts.yaml") -> Inventory:
    return load_inventory(write(tmp_path, text, name))


def error(tmp_path: Path, text: str, name: str = "hosts.yaml") -> InventoryError:
    path = write(tmp_path, text, name)
    with pytest.raises(InventoryError) as info:
        load_inventory(path)
    err = info.value
    assert err.file == str(path)
    assert "\n" not in str(err)
    return err


def where(err: InventoryError) -> tuple[int | None, str | None]:
    return err.line, err.key


DESIGN = """
defaults:                       # every host, unless the host or its group says otherwise
  user: root
  port: 22
  identity_file: ~/.ssh/id_ed25519
  known_hosts: ~/.ssh/known_hosts   # default: OpenSSH's own files
  ssh_config: ~/.ssh/config         # default: ~/.ssh/config when it exists
  jump_host: bastion.example.com    # optional ProxyJump
hosts:
  - {name: localhost, connection: local}
  - {name: node-01, address: 10.0.0.1, groups: [head]}
  - {name: "node[02-16]", groups: [worker]}   # a range; address defaults to the name
groups:
  worker: {npus_per_node: 8, chip: 910B3}
"""


# =============================================================================== InventoryError

def test_error_format_all_parts():
    e = InventoryError("hosts.yaml", 12, "hosts[3].adress", "unknown key 'adress' (did you mean 'address'?)")
    assert str(e) == "hosts.yaml:12: hosts[3].adress: unknown key 'adress' (did you mean 'address'?)"
    assert (e.file, e.line, e.key, e.message) == ("hosts.yaml", 12, "hosts[3].adress",
                                                  "unknown key 'adress' (did you mean 'address'?)")


def test_error_format_omits_missing_parts():
    assert str(InventoryError("h.yaml", None, None, "no such file")) == "h.yaml: no such file"
    assert str(InventoryError("h.yaml", 3, None, "bad")) == "h.yaml:3: bad"
    assert str(InventoryError("h.yaml", None, "hosts", "bad")) == "h.yaml: hosts: bad"


def test_error_is_one_line_and_pickles():
    e = InventoryError("h.yaml", 1, "k", "two\nlines")
    assert "\n" not in str(e)
    e2 = pickle.loads(pickle.dumps(e))
    assert str(e2) == str(e)


# =============================================================================== native format

def test_design_snippet(tmp_path):
    inv = load(tmp_path, DESIGN)
    assert inv.path == str(tmp_path / "hosts.yaml")
    assert len(inv.hosts) == 17
    assert [h.name for h in inv.hosts] == ["localhost", "node-01"] + [f"node{i:02d}" for i in range(2, 17)]

    local = inv.by_name("localhost")
    assert local.connection == "local"
    assert local.address == "localhost"
    assert local.groups == ()
    assert local.roles == frozenset()
    assert dict(local.vars) == {}

    head = inv.by_name("node-01")
    assert head.address == "10.0.0.1"
    assert head.connection == "ssh"
    assert head.groups == ("head",)
    assert head.roles == {"head"}
    assert (head.user, head.port) == ("root", 22)
    assert head.identity_file == "/home/op/.ssh/id_ed25519"
    assert head.known_hosts == "/home/op/.ssh/known_hosts"
    assert head.ssh_config == "/home/op/.ssh/config"
    assert head.jump_host == "bastion.example.com"
    assert dict(head.vars) == {}

    for i in range(2, 17):
        w = inv.by_name(f"node{i:02d}")
        assert w.address == f"node{i:02d}"
        assert w.groups == ("worker",)
        assert w.roles == {"worker"}
        assert dict(w.vars) == {"npus_per_node": 8, "chip": "910B3"}
        assert (w.user, w.port, w.jump_host) == ("root", 22, "bastion.example.com")
        assert w.line == 11

    assert [h.line for h in inv.hosts[:2]] == [9, 10]
    assert inv.with_role("head") == (head,)
    assert len(inv.with_role("worker")) == 15
    assert inv.with_role("launcher") == ()


def test_inventory_helpers(tmp_path):
    inv = load(tmp_path, DESIGN)
    assert len(inv) == 17
    assert list(inv)[0].name == "localhost"
    assert inv.names[:2] == ("localhost", "node-01")
    with pytest.raises(KeyError, match="no host 'nope'"):
        inv.by_name("nope")


def test_objects_are_read_only(tmp_path):
    inv = load(tmp_path, """
        hosts:
          - {name: a, env: {X: "1"}, tags: {rack: A1, slots: [1, 2]}}
    """)
    h = inv.hosts[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        h.name = "b"  # type: ignore[misc]
    with pytest.raises(TypeError):
        h.vars["chip"] = "x"  # type: ignore[index]
    with pytest.raises(TypeError):
        h.vars["env"]["Y"] = "2"  # type: ignore[index]
    for mutate in (lambda m: m.pop("env"), lambda m: m.update(a=1), lambda m: m.clear(),
                   lambda m: m.setdefault("q", 1), lambda m: m.popitem(), lambda m: m.__delitem__("env")):
        with pytest.raises(TypeError):
            mutate(h.vars)
    assert set(h.vars) == {"env", "tags"}
    assert h.vars["tags"]["slots"] == (1, 2)
    assert isinstance(inv.hosts, tuple)
    hash(h)  # usable in sets and as dict keys
    assert h == load(tmp_path, "hosts: [{name: a, env: {X: '1'}, tags: {rack: A1, slots: [1, 2]}}]").hosts[0]


def test_hosts_serialise(tmp_path):
    import copy

    inv = load(tmp_path, """
        hosts:
          - {name: a, env: {X: "1"}, tags: {rack: A1, slots: [1, 2]}, groups: [worker]}
    """)
    h = inv.hosts[0]
    as_dict = dataclasses.asdict(h)
    assert json.loads(json.dumps(as_dict))["vars"] == {"env": {"X": "1"}, "tags": {"rack": "A1", "slots": [1, 2]}}
    assert json.loads(json.dumps(h.vars))["env"] == {"X": "1"}
    assert pickle.loads(pickle.dumps(h)) == h
    assert pickle.loads(pickle.dumps(inv)) == inv
    assert pickle.loads(pickle.dumps(inv)).by_name("a") == h
    assert copy.deepcopy(h) == h
    with pytest.raises(TypeError):
        copy.deepcopy(h).vars["env"].update(Y="2")
    mutable = dict(h.vars)
    mutable["chip"] = "x"  # a plain copy is an ordinary dict
    assert "chip" not in h.vars


def test_host_built_by_hand_is_read_only_too():
    h = Host(name="n", address="n", groups=["worker"], vars={"env": {"A": "1"}, "tags": {"l": [1]}})
    assert h.groups == ("worker",) and h.roles == {"worker"}
    assert h.vars == {"env": {"A": "1"}, "tags": {"l": (1,)}}
    with pytest.raises(TypeError):
        h.vars["env"]["B"] = "2"  # type: ignore[index]
    assert Host(name="n", address="n").vars == {}
    assert Host(name="n", address="n").connection == "ssh"


def test_every_key(tmp_path):
    inv = load(tmp_path, """
        hosts:
          - name: n1
            address: 192.0.2.7
            connection: ssh
            user: ops.admin-1
            port: 2222
            identity_file: ~/keys/id
            known_hosts: /etc/ssh/kh
            ssh_config: ~/cfg
            jump_host: jumper@bastion:2200
            groups: [head, worker, extra]
            npus_per_node: 16
            chip: 910B3
            min_nofile: 65536
            ray_port: 6379
            ray_dashboard_port: 8265
            ray_client_port: 10001
            ray_min_worker_port: 10002
            ray_max_worker_port: 19999
            shared_paths: [/mnt/shared, /data]
            max_clock_skew_s: 0.5
            python_modules: [deepspeed, decord.bridge]
            processes_per_npu: 2
            launcher: true
            env: {HCCL_CONNECT_TIMEOUT: 1200, ASCEND_HOME: /usr/local/Ascend}
            python: /opt/py/bin/python3
            sudo: yes
            cann: "8.0.RC3"
            driver: 24.1.rc2
            hccl_connect_timeout: 1800
            hbm_idle_mb: 0
            checkpoint_dir: /mnt/ckpt
            checkpoint_free_gb: 12.5
            tags: {rack: A1, anything: [1, {x: y}]}
    """)
    h = inv.hosts[0]
    assert h == Host(
        name="n1", address="192.0.2.7", connection="ssh", user="ops.admin-1", port=2222,
        identity_file="/home/op/keys/id", jump_host="jumper@bastion:2200", known_hosts="/etc/ssh/kh",
        ssh_config="/home/op/cfg", groups=("head", "worker", "extra"), vars=h.vars, line=1,
    )
    assert dict(h.vars) == {
        "npus_per_node": 16, "chip": "910B3", "min_nofile": 65536, "ray_port": 6379, "launcher": True,
        "ray_dashboard_port": 8265, "ray_client_port": 10001, "ray_min_worker_port": 10002,
        "ray_max_worker_port": 19999, "shared_paths": ("/mnt/shared", "/data"),
        "max_clock_skew_s": 0.5, "python_modules": ("deepspeed", "decord.bridge"), "processes_per_npu": 2,
        "env": {"HCCL_CONNECT_TIMEOUT": "1200", "ASCEND_HOME": "/usr/local/Ascend"},
        "python": "/opt/py/bin/python3", "sudo": True, "cann": "8.0.RC3", "driver": "24.1.rc2",
        "hccl_connect_timeout": 1800, "hbm_idle_mb": 0, "checkpoint_dir": "/mnt/ckpt",
        "checkpoint_free_gb": 12.5, "tags": {"rack": "A1", "anything": (1, {"x": "y"})},
    }
    assert h.roles == {"head", "worker", "launcher"}
    # every key of the table was exercised
    assert set(KEYS) - {"name"} <= set(h.vars) | {f.name for f in dataclasses.fields(Host)}


def test_key_table_is_documented():
    for key, spec in KEYS.items():
        assert spec.doc, key
        assert spec.kind in ("host", "conn", "var")


def test_precedence_defaults_groups_host(tmp_path):
    inv = load(tmp_path, """
        defaults:
          user: d
          port: 1001
          chip: from-defaults
          min_nofile: 1
          env: {A: d, B: d}
          jump_host: bastion
        groups:
          g1: {user: g1, port: 1002, chip: from-g1, env: {B: g1, C: g1}}
          g2: {port: 1003, chip: from-g2, env: {C: g2}}
        hosts:
          - {name: a, groups: [g1, g2]}
          - {name: b, groups: [g2, g1]}
          - {name: c, groups: [g1, g2], port: 1004, env: {A: host}, jump_host: null}
          - {name: d}
    """)
    a, b, c, d = inv.hosts
    assert (a.user, a.port, a.vars["chip"]) == ("g1", 1003, "from-g2")
    assert dict(a.vars["env"]) == {"A": "d", "B": "g1", "C": "g2"}
    assert (b.user, b.port, b.vars["chip"]) == ("g1", 1002, "from-g1")
    assert dict(b.vars["env"]) == {"A": "d", "B": "g1", "C": "g1"}
    assert (c.port, c.jump_host) == (1004, None)
    assert dict(c.vars["env"]) == {"A": "host", "B": "g1", "C": "g2"}
    assert a.vars["min_nofile"] == 1
    assert (d.user, d.port, d.vars["chip"], d.jump_host) == ("d", 1001, "from-defaults", "bastion")


def test_null_clears_an_inherited_value(tmp_path):
    inv = load(tmp_path, """
        defaults: {user: root, chip: 910B3, identity_file: ~/.ssh/k}
        groups:
          plain: {chip: null}
        hosts:
          - {name: a, user: null, groups: [plain]}
          - {name: b, identity_file: ~}
    """)
    a, b = inv.hosts
    assert a.user is None and "chip" not in a.vars
    assert b.user == "root" and b.identity_file is None and b.vars["chip"] == "910B3"


def test_undefined_group_is_fine_and_groups_are_deduplicated(tmp_path):
    inv = load(tmp_path, """
        hosts:
          - {name: a, groups: [nowhere, worker, nowhere]}
        groups:
          unused: {chip: x}
    """)
    assert inv.hosts[0].groups == ("nowhere", "worker")
    assert inv.hosts[0].roles == {"worker"}


def test_localhost_defaults_to_ssh(tmp_path):
    h = load(tmp_path, "hosts: [{name: localhost}]").hosts[0]
    assert (h.connection, h.address) == ("ssh", "localhost")


def test_launcher_role(tmp_path):
    inv = load(tmp_path, """
        groups:
          head: {launcher: true}
        hosts:
          - {name: h, groups: [head]}
          - {name: w, groups: [worker], launcher: false}
    """)
    assert inv.by_name("h").roles == {"head", "launcher"}
    assert inv.by_name("w").roles == {"worker"}
    assert inv.with_role("launcher") == (inv.by_name("h"),)


def test_range_with_address_range(tmp_path):
    inv = load(tmp_path, """
        hosts:
          - {name: "node[02-16]", address: "10.0.0.[2-16]", groups: [worker]}
          - {name: "rack[1-2]-npu[0-1]", address: "192.168.[1-2].[10-11]"}
          - {name: "n[1:5:2]", address: "10.1.0.[1:3]"}
    """)
    assert [(h.name, h.address) for h in inv.hosts[:3]] == [
        ("node02", "10.0.0.2"), ("node03", "10.0.0.3"), ("node04", "10.0.0.4")]
    assert inv.by_name("node16").address == "10.0.0.16"
    assert [(h.name, h.address) for h in inv.hosts[15:19]] == [
        ("rack1-npu0", "192.168.1.10"), ("rack1-npu1", "192.168.1.11"),
        ("rack2-npu0", "192.168.2.10"), ("rack2-npu1", "192.168.2.11")]
    assert [(h.name, h.address) for h in inv.hosts[19:]] == [
        ("n1", "10.1.0.1"), ("n3", "10.1.0.2"), ("n5", "10.1.0.3")]


def test_scalar_host_entry_is_a_name(tmp_path):
    inv = load(tmp_path, """
        defaults: {user: ops}
        hosts:
          - node[1-2]
          - other
    """)
    assert [(h.name, h.user, h.line) for h in inv.hosts] == [("node1", "ops", 3), ("node2", "ops", 3),
                                                              ("other", "ops", 4)]


@pytest.mark.parametrize("address", ["10.0.0.1", "::1", "fe80::1%eth0", "2001:db8::7", "node.example.com",
                                     "a_b-c.d", "x"])
def test_valid_addresses(tmp_path, address):
    h = load(tmp_path, f"hosts: [{{name: a, address: '{address}'}}]").hosts[0]
    assert h.address == address


@pytest.mark.parametrize("address, host, port", [("node-01:2222", "node-01", "2222"), ("10.0.0.1:22", "10.0.0.1", "22")])
def test_an_address_with_a_port_says_so_not_that_it_is_bad_ipv6(tmp_path, address, host, port):
    e = error(tmp_path, f"hosts:\n  - {{name: a, address: '{address}'}}\n")
    assert where(e) == (2, "hosts[0].address")
    assert f"has a port in it: write address: {host} and port: {port}" in e.message, e.message
    assert "IPv6" not in e.message


def test_an_ansible_ini_inventory_is_named_with_the_command_that_converts_it(tmp_path):
    e = error(tmp_path, "# cluster\n\n[head]\nnode-01 ansible_host=10.0.0.1\n\n[worker]\nnode-02 ansible_host=10.0.0.2\n")
    assert where(e) == (3, None)
    assert "[head] starts an Ansible INI inventory" in e.message and "ansible-inventory -i" in e.message
    assert "--list --yaml" in e.message and "YAML syntax error" not in e.message


def test_an_ini_inventory_without_a_section_and_a_json_export_say_what_they_are(tmp_path):
    """Both read as "top level must be a mapping" / "unknown group key 'hostvars'"."""
    e = error(tmp_path, "node-01 ansible_host=10.0.0.1 ansible_user=root\nnode-02 ansible_host=10.0.0.2\n")
    assert where(e) == (1, None)
    assert "node-01 ansible_host=10.0.0.1 ansible_user=root starts an Ansible INI inventory" in e.message
    export = ('{"_meta": {"hostvars": {"n1": {"ansible_host": "10.0.0.1"}}},\n'
              ' "all": {"children": ["ungrouped"]}, "ungrouped": {"hosts": ["n1"]}}\n')
    e = error(tmp_path, export)
    assert where(e) == (1, "_meta") and "ansible-inventory --list` JSON export is not read" in e.message
    assert "--list --yaml > hosts.yaml" in e.message
    # A YAML inventory whose first line is a plain mapping is still YAML.
    assert load(tmp_path, "hosts:\n  - {name: node-01, address: 10.0.0.1}\n").hosts[0].name == "node-01"


def test_merge_keys_and_anchors(tmp_path):
    inv = load(tmp_path, """
        defaults: &d {user: root, port: 22}
        groups:
          w:
            <<: *d
            port: 2222
            npus_per_node: 8
        hosts:
          - {name: a, groups: [w]}
    """)
    assert (inv.hosts[0].user, inv.hosts[0].port) == ("root", 2222)
    assert inv.hosts[0].vars["npus_per_node"] == 8


def test_example_inventory_loads():
    inv = load_inventory(REPO / "inventory.example.yaml")
    assert [(h.name, h.connection) for h in inv.hosts] == [("localhost", "local")]


def test_example_inventory_commented_part_loads(tmp_path):
    text = (REPO / "inventory.example.yaml").read_text()
    tail = text.split("# A real cluster:", 1)[1]
    body = "\n".join(
        line[2:] if line.startswith("# ") else line[1:] if line.startswith("#") else line
        for line in tail.splitlines()[1:]
    )
    inv = load(tmp_path, body)
    assert len(inv) == 16
    assert inv.by_name("node-01").roles == {"head", "worker", "launcher"}
    assert inv.by_name("node16").address == "10.0.0.16"
    assert inv.by_name("node16").vars["chip"] == "910B3"
    assert inv.by_name("node-01").vars["ray_port"] == 6379


def test_example_inventory_documents_every_key():
    """inventory.example.yaml is where the README sends readers for the keys: each one is listed."""
    header = (REPO / "inventory.example.yaml").read_text().split("# A real cluster:", 1)[0]
    documented = set(re.findall(r"^#\s+([a-z_]+)\s", header, re.M))
    assert set(KEYS) - documented == set()


def test_accepts_pathlike_and_bom(tmp_path):
    path = tmp_path / "bom.yaml"
    path.write_bytes(b"\xef\xbb\xbfhosts: [a]\n")
    assert load_inventory(path).names == ("a",)
    assert load_inventory(str(path)).path == str(path)


# =============================================================================== native errors

def test_missing_file(tmp_path):
    path = tmp_path / "nope.yaml"
    with pytest.raises(InventoryError) as info:
        load_inventory(path)
    assert str(info.value) == f"{path}: no such file"
    assert info.value.line is None


def test_directory(tmp_path):
    with pytest.raises(InventoryError, match="is a directory"):
        load_inventory(tmp_path)


def test_yaml_syntax_error(tmp_path):
    e = error(tmp_path, """
        hosts:
          - {name: a}
          - {name: b
        groups: {}
    """)
    assert e.line == 4
    assert e.key is None
    assert "YAML syntax error" in e.message


def test_yaml_indentation_error(tmp_path):
    e = error(tmp_path, "hosts:\n  - name: a\n   user: root\n")
    assert e.line == 3
    assert str(e).startswith(f"{tmp_path / 'hosts.yaml'}:3: YAML syntax error: ")


def test_yaml_tab_error(tmp_path):
    e = error(tmp_path, "hosts:\n\t- a\n")
    assert e.line == 2 and "YAML syntax error" in e.message


def test_not_utf8(tmp_path):
    path = tmp_path / "hosts.yaml"
    path.write_bytes(b"hosts:\n  - name: \xff\n")
    with pytest.raises(InventoryError) as info:
        load_inventory(path)
    assert (info.value.line, info.value.message) == (2, "not UTF-8 text")


def test_control_character_in_file(tmp_path):
    e = error(tmp_path, "hosts:\n  - a\x07\n")
    assert e.line == 2 and "unacceptable character" in e.message


def test_python_tags_are_refused(tmp_path):
    e = error(tmp_path, "hosts:\n  - {name: !!python/object/apply:os.system [id]}\n")
    assert where(e) == (2, "hosts[0].name")
    assert "could not determine a constructor" in e.message


@pytest.mark.parametrize("text, kind", [("- a\n- b\n", "a list"), ("just a string\n", "the scalar"),
                                        ("42\n", "the scalar")])
def test_top_level_not_a_mapping(tmp_path, text, kind):
    e = error(tmp_path, text)
    assert e.line == 1 and e.message.startswith("top level must be a mapping") and kind in e.message


def test_empty_file(tmp_path):
    e = error(tmp_path, "# only a comment\n")
    assert e.message == "empty inventory: no hosts"


def test_duplicate_key(tmp_path):
    e = error(tmp_path, """
        hosts:
          - name: a
            user: x
            port: 22
            user: y
    """)
    assert str(e) == f"{tmp_path / 'hosts.yaml'}:5: hosts[0].user: duplicate key 'user' (first at line 3)"


def test_duplicate_top_level_key(tmp_path):
    e = error(tmp_path, """
        hosts: [a]
        groups: {}
        hosts: [b]
    """)
    assert where(e) == (3, "hosts")
    assert e.message == "duplicate key 'hosts' (first at line 1)"


def test_duplicate_group_key(tmp_path):
    e = error(tmp_path, """
        hosts: [a]
        groups:
          worker: {chip: a}
          head: {}
          worker: {chip: b}
    """)
    assert where(e) == (5, "groups.worker")


def test_duplicate_env_key(tmp_path):
    e = error(tmp_path, """
        hosts:
          - name: a
            env:
              X: "1"
              X: "2"
    """)
    assert where(e) == (5, "hosts[0].env.X")


def test_merge_key_override_is_not_a_duplicate(tmp_path):
    inv = load(tmp_path, """
        defaults: &d {port: 22}
        groups:
          g: {<<: *d, port: 23}
        hosts: [{name: a, groups: [g]}]
    """)
    assert inv.hosts[0].port == 23


def test_duplicate_host(tmp_path):
    e = error(tmp_path, """
        hosts:
          - {name: node1}
          - {name: node2}
          - {name: "node[1-3]"}
    """)
    assert str(e) == (f"{tmp_path / 'hosts.yaml'}:4: hosts[2].name: duplicate host 'node1' "
                      f"(first declared at line 2)")


def test_duplicate_host_in_block_style(tmp_path):
    e = error(tmp_path, """
        hosts:
          - name: a
            user: x
          - user: y
            name: a
    """)
    assert where(e) == (5, "hosts[1].name")
    assert "first declared at line 2" in e.message


def test_bad_range(tmp_path):
    e = error(tmp_path, """
        hosts:
          - {name: ok}
          - {name: "node[5-1]"}
    """)
    assert where(e) == (3, "hosts[1].name")
    assert e.message == "bad range: 'node[5-1]': reversed range '5-1' (start 5 > end 1)"


@pytest.mark.parametrize("pattern, fragment", [("node[1-3", "unbalanced"), ("n[1-10/0]", "zero step"),
                                               ("n[1-200000]", "more than 100000"), ("n[]", "empty range")])
def test_bad_ranges(tmp_path, pattern, fragment):
    e = error(tmp_path, f"hosts:\n  - name: '{pattern}'\n")
    assert where(e) == (2, "hosts[0].name")
    assert fragment in e.message


def test_bad_address_range(tmp_path):
    e = error(tmp_path, "hosts:\n  - {name: 'n[1-2]', address: '10.0.0.[9-1]'}\n")
    assert where(e) == (2, "hosts[0].address")
    assert "reversed range" in e.message


@pytest.mark.parametrize(
    "name, address, fragment",
    [
        ("n[1-3]", "10.0.0.[1-2]", "name 'n[1-3]' expands to 3 hosts but address '10.0.0.[1-2]' to 2"),
        ("n[1-3]", "10.0.0.1", "expands to 3 hosts but address '10.0.0.1' to 1"),
        ("n1", "10.0.0.[1-2]", "address '10.0.0.[1-2]' expands to 2 addresses but the name is one host"),
    ],
)
def test_address_range_length_mismatch(tmp_path, name, address, fragment):
    e = error(tmp_path, f"hosts:\n  - name: '{name}'\n    address: '{address}'\n")
    assert where(e) == (3, "hosts[0].address")
    assert fragment in e.message


def test_no_hosts_key(tmp_path):
    e = error(tmp_path, "defaults: {user: root}\n")
    assert where(e) == (1, "hosts")
    assert e.message.startswith("no hosts")


@pytest.mark.parametrize("text", ["hosts: []\n", "hosts:\n", "hosts: ~\n"])
def test_empty_hosts(tmp_path, text):
    e = error(tmp_path, text)
    assert where(e) == (1, "hosts")
    assert e.message.startswith("no hosts")


def test_hosts_not_a_list(tmp_path):
    e = error(tmp_path, "hosts:\n  a: {}\n")
    assert where(e) == (2, "hosts")
    assert e.message == "must be a list of host entries, not a mapping"


def test_host_without_name(tmp_path):
    e = error(tmp_path, """
        hosts:
          - {name: a}
          - address: 10.0.0.2
            user: root
    """)
    assert str(e) == f"{tmp_path / 'hosts.yaml'}:3: hosts[1]: host entry has no 'name'"


def test_host_with_null_name(tmp_path):
    e = error(tmp_path, "hosts:\n  - {name: , user: root}\n")
    assert where(e) == (2, "hosts[0]") and e.message == "host entry has no 'name'"


def test_host_entry_not_a_mapping(tmp_path):
    e = error(tmp_path, "hosts:\n  - [a, b]\n")
    assert where(e) == (2, "hosts[0]")
    assert "must be a host entry mapping" in e.message


def test_unknown_key_with_suggestion(tmp_path):
    e = error(tmp_path, """
        hosts:
          - {name: a}
          - {name: b}
          - {name: c}
          - name: d
            adress: 10.0.0.4
    """)
    assert str(e) == (f"{tmp_path / 'hosts.yaml'}:6: hosts[3].adress: "
                      "unknown key 'adress' (did you mean 'address'?)")


@pytest.mark.parametrize(
    "text, line, key, fragment",
    [
        ("defaults: {usr: root}\nhosts: [a]\n", 1, "defaults.usr", "(did you mean 'user'?)"),
        ("hosts: [a]\ngroups:\n  w: {npus_per_nod: 8}\n", 3, "groups.w.npus_per_nod",
         "(did you mean 'npus_per_node'?)"),
        ("hosts: [{name: a, jumphost: b}]\n", 1, "hosts[0].jumphost", "(did you mean 'jump_host'?)"),
        ("hosts: [{name: a, zzz: b}]\n", 1, "hosts[0].zzz", "unknown key 'zzz' (allowed: address, "),
        ("host: [a]\n", 1, "host", "unknown top-level key 'host' (did you mean 'hosts'?)"),
        ("hosts: [a]\ndefault: {}\n", 2, "default", "(did you mean 'defaults'?)"),
    ],
)
def test_unknown_keys(tmp_path, text, line, key, fragment):
    e = error(tmp_path, text)
    assert where(e) == (line, key)
    assert fragment in e.message


@pytest.mark.parametrize("key", ["address", "groups", "name"])
def test_host_only_keys_elsewhere(tmp_path, key):
    e = error(tmp_path, f"hosts: [a]\ndefaults:\n  {key}: x\n")
    assert where(e) == (3, f"defaults.{key}")
    assert e.message == f"{key!r} is only allowed on a host entry"
    e = error(tmp_path, f"hosts: [a]\ngroups:\n  g:\n    {key}: x\n")
    assert where(e) == (4, f"groups.g.{key}")


@pytest.mark.parametrize(
    "key, value, fragment",
    [
        ("connection", "telnet", "must be 'ssh' or 'local', not 'telnet'"),
        ("user", "1root", "invalid user name '1root'"),
        ("user", "a" * 33, "invalid user name"),
        ("user", "42", "must be a string, not an integer"),
        ("port", "0", "0 is out of range (expected 1..65535)"),
        ("port", "65536", "out of range"),
        ("port", "'22'", "must be an integer, not a string '22'"),
        ("port", "true", "must be an integer, not a boolean"),
        ("port", "22.5", "must be an integer, not a number"),
        ("identity_file", "[a, b]", "must be a string, not a list"),
        ("identity_file", "''", "must not be empty"),
        ("identity_file", '"a\\0b"', "contains a NUL or newline"),
        ("known_hosts", '"a\\nb"', "contains a NUL or newline"),
        ("ssh_config", "{a: b}", "must be a string, not a mapping"),
        ("jump_host", "'a:99999'", "port '99999' is not a number in 1..65535"),
        ("jump_host", "'a,b'", "only one jump host is supported"),
        ("jump_host", "'bad user@host'", "invalid user 'bad user'"),
        ("jump_host", "'[host]:22'", "brackets are only for an IPv6 address"),
        ("npus_per_node", "0", "0 is out of range (expected >= 1)"),
        ("npus_per_node", "eight", "must be an integer, not a string 'eight'"),
        ("chip", "910", "must be a string, not an integer; quote it in YAML (\"910\")"),
        ("chip", "''", "must not be empty"),
        ("chip", '"9\\n10"', "contains a control character"),
        ("min_nofile", "-1", "out of range"),
        ("ray_port", "70000", "out of range"),
        ("launcher", "'yes please'", "must be true or false, not a string"),
        ("launcher", "1", "must be true or false, not an integer"),
        ("env", "[A]", "must be a mapping of variable name to value, not a list"),
        ("env", "{A: [1]}", "value of A must be a string, not a list"),
        ("env", "{A: true}", "value of A must be a string, not a boolean True; quote it in YAML"),
        ("env", "{A: 1.5}", "quote it in YAML"),
        ("env", '{A: "x\\ny"}', "contains a NUL or newline"),
        ("env", "{1A: x}", "invalid environment variable name '1A'"),
        ("env", "{A-B: x}", "invalid environment variable name 'A-B'"),
        ("python", "3", "must be a string"),
        ("sudo", "'root'", "must be true or false"),
        ("cann", "8.0", "quote it in YAML (\"8.0\")"),
        ("driver", "[1]", "must be a string, not a list"),
        ("hccl_connect_timeout", "0", "out of range"),
        ("hccl_connect_timeout", "1.5", "must be an integer"),
        ("hccl_connect_timeout", "8000", "8000 is out of range (expected 1..7200)"),
        ("hbm_idle_mb", "-5", "out of range (expected >= 0)"),
        ("checkpoint_dir", "{}", "must be a string"),
        ("checkpoint_free_gb", "-1", "out of range"),
        ("checkpoint_free_gb", "'lots'", "must be a number, not a string 'lots'"),
        ("checkpoint_free_gb", "false", "must be a number, not a boolean"),
        ("tags", "[a]", "must be a mapping, not a list"),
        ("groups", "worker", "must be a list of group names, not a string"),
        ("groups", "[a b]", "invalid group name 'a b'"),
        ("groups", "[-x]", "invalid group name '-x'"),
        ("groups", "[[x]]", "invalid group name ['x']"),
    ],
)
def test_bad_values_on_a_host(tmp_path, key, value, fragment):
    e = error(tmp_path, f"hosts:\n  - name: a\n    {key}: {value}\n")
    assert where(e) == (3, f"hosts[0].{key}")
    assert fragment in e.message


@pytest.mark.parametrize("key, value", [("port", "0"), ("user", "'a b'"), ("chip", "1"), ("env", "{'A B': x}"),
                                        ("jump_host", "'a;b'"), ("connection", "rsh")])
def test_bad_values_in_defaults_and_groups(tmp_path, key, value):
    e = error(tmp_path, f"hosts: [a]\ndefaults:\n  {key}: {value}\n")
    assert where(e) == (3, f"defaults.{key}")
    e = error(tmp_path, f"hosts: [a]\ngroups:\n  worker:\n    {key}: {value}\n")
    assert where(e) == (4, f"groups.worker.{key}")


def test_bad_group_name(tmp_path):
    e = error(tmp_path, "hosts: [a]\ngroups:\n  'bad group': {}\n")
    assert where(e) == (3, "groups.bad group")
    assert "invalid group name 'bad group'" in e.message


def test_groups_not_a_mapping(tmp_path):
    e = error(tmp_path, "hosts: [a]\ngroups: [worker]\n")
    assert where(e) == (2, "groups")
    assert e.message == "must be a mapping of group name to settings, not a list"


def test_non_string_key(tmp_path):
    e = error(tmp_path, "hosts:\n  - {name: a, 22: port}\n")
    assert where(e) == (2, "hosts[0]")
    assert e.message == "keys must be strings, not an integer 22"


def test_env_error_points_at_the_variable(tmp_path):
    e = error(tmp_path, """
        hosts:
          - name: a
            env:
              GOOD: x
              "A B": y
    """)
    assert str(e) == (f"{tmp_path / 'hosts.yaml'}:5: hosts[0].env: invalid environment variable name 'A B' "
                      "(expected [A-Za-z_][A-Za-z0-9_]*)")


# =============================================================================== injection

INJECTION = [
    "node1; touch /tmp/pwned",
    "$(reboot)",
    "`reboot`",
    "a|b",
    "a&b",
    "a>b",
    "a<b",
    "a b",
    "a'b",
    'a"b',
    "a\nb",
    "-oProxyCommand=x",
    "a\\b",
    "a/b",
    "a*",
    "a$b",
    "a\tb",
    "",
    "fe80::1%eth0;id",
    "::1%$(id)",
    "a..b",
    "host-",
    "a%b",
    "x" * 64,
    "300.1.1.1",
    "1.2.3",
    "1:2:3",
]


@pytest.mark.parametrize("value", INJECTION)
def test_injection_in_name_rejected(tmp_path, value):
    e = error(tmp_path, f"hosts:\n  - name: {json.dumps(value)}\n")
    assert where(e) == (2, "hosts[0].name")
    assert repr(value) in e.message


@pytest.mark.parametrize("value", INJECTION)
def test_injection_in_address_rejected(tmp_path, value):
    e = error(tmp_path, f"hosts:\n  - name: a\n    address: {json.dumps(value)}\n")
    assert where(e) == (3, "hosts[0].address")
    assert repr(value) in e.message


@pytest.mark.parametrize("value", INJECTION)
def test_injection_in_ansible_host_rejected(tmp_path, value):
    e = error(tmp_path, f"all:\n  hosts:\n    a: {{ansible_host: {json.dumps(value)}}}\n")
    assert where(e) == (3, "all.hosts.a.ansible_host")


@pytest.mark.parametrize("value", INJECTION)
def test_injection_in_jump_host_rejected(tmp_path, value):
    e = error(tmp_path, f"hosts:\n  - name: a\n    jump_host: {json.dumps('u@' + value)}\n")
    assert where(e) == (3, "hosts[0].jump_host")


def test_named_injection_cases(tmp_path):
    f = tmp_path / "hosts.yaml"
    cases = {
        'hosts:\n  - {name: "node1; touch /tmp/pwned"}\n':
            "hosts[0].name: 'node1; touch /tmp/pwned' is not a valid host name",
        'hosts:\n  - {name: a, address: "$(reboot)"}\n':
            "hosts[0].address: '$(reboot)' is not a valid host name",
        'hosts:\n  - {name: a, user: "root -oProxyCommand=x"}\n':
            "hosts[0].user: invalid user name 'root -oProxyCommand=x'",
        'hosts:\n  - {name: a, jump_host: "a;b"}\n':
            "hosts[0].jump_host: invalid jump host 'a;b': host 'a;b' is not a valid host name",
        'hosts:\n  - {name: a, env: {"A B": x}}\n':
            "hosts[0].env: invalid environment variable name 'A B'",
        'hosts:\n  - {name: "node[1-2]; rm -rf /"}\n':
            "hosts[0].name: 'node1; rm -rf /' (from 'node[1-2]; rm -rf /') is not a valid host name",
        'hosts:\n  - {name: "-oProxyCommand=id"}\n':
            "hosts[0].name: '-oProxyCommand=id' starts with '-'",
        'hosts:\n  - {name: a, jump_host: "-oProxyCommand=id"}\n':
            "hosts[0].jump_host: invalid jump host '-oProxyCommand=id': host '-oProxyCommand=id' starts with '-'",
        'hosts:\n  - {name: a, jump_host: "x@-J"}\n':
            "hosts[0].jump_host: invalid jump host 'x@-J': host '-J' starts with '-'",
        'hosts:\n  - {name: a, user: "-l"}\n':
            "hosts[0].user: invalid user name '-l'",
        'hosts:\n  - {name: a, identity_file: "k\\nProxyCommand x"}\n':
            "hosts[0].identity_file: 'k\\nProxyCommand x' contains a NUL or newline",
        # YAML 1.1 numbers not in plain decimal: port 02222 was read as 1170.
        'hosts:\n  - {name: a, port: 02222}\n':
            "hosts[0].port: 02222 reads as the number 1170 in YAML (octal, hex or with '_'); write it in plain decimal",
        'hosts:\n  - {name: a, ray_port: 0x18EB}\n':
            "hosts[0].ray_port: 0x18EB reads as the number 6379 in YAML (octal, hex or with '_'); write it in plain decimal",
    }
    for text, expected in cases.items():
        f.write_text(text)
        with pytest.raises(InventoryError) as info:
            load_inventory(f)
        assert str(info.value).startswith(f"{f}:2: {expected}"), (text, str(info.value))


@pytest.mark.parametrize(
    "jump, parsed",
    [
        ("bastion", (None, "bastion", None)),
        ("ops@bastion", ("ops", "bastion", None)),
        ("ops@bastion:2222", ("ops", "bastion", 2222)),
        ("10.0.0.1:22", (None, "10.0.0.1", 22)),
        ("[2001:db8::1]:2200", (None, "2001:db8::1", 2200)),
        ("u@[::1]", ("u", "::1", None)),
        ("2001:db8::1", (None, "2001:db8::1", None)),
    ],
)
def test_parse_jump_host(jump, parsed):
    assert parse_jump_host(jump) == parsed


@pytest.mark.parametrize("jump", ["a;b", "a b", "u@", "@h", "h:", "h:0", "h:x", "[h]", "a@b@c", "$(x)", "h:22:33x",
                                  "a,b"])
def test_parse_jump_host_rejects(jump):
    with pytest.raises(ValueError):
        parse_jump_host(jump)


# =============================================================================== Ansible format

ANSIBLE = """
all:
  vars: {ansible_user: ops, npu_driver: "24.1.rc2", chip: 910B3}
  children:
    ascend_a2:
      vars:
        ansible_ssh_private_key_file: ~/.ssh/cluster_ed25519
        ansible_ssh_common_args: "-o ProxyJump=ops@jump01:2222 -o StrictHostKeyChecking=yes"
        npus_per_node: 8
      hosts:
        node[01:16]:                       # ranges allowed in host keys
        node20: {ansible_host: 10.0.0.20, ansible_port: 2222, npus_per_node: 16}
      children:
        head:
          hosts:
            node01: {launcher: true}
          vars: {chip: 910B4}
    bastion:
      hosts: {jump01: {ansible_host: 1.2.3.4}}
"""


def test_ansible_inventory(tmp_path):
    inv = load(tmp_path, ANSIBLE)
    assert len(inv) == 18
    assert inv.names == tuple(f"node{i:02d}" for i in range(1, 17)) + ("node20", "jump01")

    n1 = inv.by_name("node01")
    assert n1.groups == ("ascend_a2", "head")
    assert n1.roles == {"head", "launcher"}
    assert n1.address == "node01"
    assert (n1.user, n1.port, n1.connection) == ("ops", None, "ssh")
    assert n1.identity_file == "/home/op/.ssh/cluster_ed25519"
    assert n1.jump_host == "ops@jump01:2222"
    assert dict(n1.vars) == {"npu_driver": "24.1.rc2", "chip": "910B4", "npus_per_node": 8, "launcher": True}
    assert n1.line == 10

    n2 = inv.by_name("node02")
    assert n2.groups == ("ascend_a2",)
    assert dict(n2.vars) == {"npu_driver": "24.1.rc2", "chip": "910B3", "npus_per_node": 8}

    n20 = inv.by_name("node20")
    assert (n20.address, n20.port, n20.line) == ("10.0.0.20", 2222, 11)
    assert n20.vars["npus_per_node"] == 16

    j = inv.by_name("jump01")
    assert (j.address, j.user, j.jump_host, j.identity_file, j.groups) == ("1.2.3.4", "ops", None, None, ("bastion",))
    assert inv.with_role("head") == (n1,)


def test_ansible_yml_extension_and_precedence_chain(tmp_path):
    inv = load(tmp_path, """
        all:
          vars: {level: all, a: all}
          children:
            parent:
              vars: {level: parent, b: parent}
              children:
                child:
                  vars: {level: child, c: child}
                  hosts:
                    h1: {level: host}
                    h2:
    """, name="inv.yml")
    h1, h2 = inv.hosts
    assert dict(h1.vars) == {"level": "host", "a": "all", "b": "parent", "c": "child"}
    assert h2.vars["level"] == "child"
    assert h1.groups == ("parent", "child")


def test_ansible_same_depth_groups_merge_by_name_like_ansible(tmp_path):
    inv = load(tmp_path, """
        all:
          children:
            zeta: {vars: {x: zeta}, hosts: {h: }}
            alpha: {vars: {x: alpha}, hosts: {h: }}
    """)
    h = inv.hosts[0]
    assert h.groups == ("zeta", "alpha")  # order of appearance
    assert h.vars["x"] == "zeta"  # Ansible: same depth sorted by name, the last one wins


def test_ansible_host_in_several_groups_is_one_host(tmp_path):
    inv = load(tmp_path, """
        all:
          hosts:
            node01: {ansible_port: 2200}
          children:
            worker:
              hosts:
                node[01:03]:
            head:
              hosts:
                node01: {ansible_user: boss}
    """)
    assert inv.names == ("node01", "node02", "node03")
    n1 = inv.by_name("node01")
    assert n1.groups == ("worker", "head")
    assert (n1.port, n1.user, n1.line) == (2200, "boss", 3)
    assert n1.roles == {"worker", "head"}


def test_ansible_group_defined_in_two_places(tmp_path):
    inv = load(tmp_path, """
        all:
          children:
            a:
              children:
                shared: {vars: {x: 1}, hosts: {h1: }}
            b:
              children:
                shared: {vars: {y: 2}, hosts: {h2: }}
    """)
    h1, h2 = inv.hosts
    # 'shared' is a child of both a and b, so its hosts are in both
    assert set(h1.groups) == {"a", "b", "shared"} and set(h2.groups) == {"a", "b", "shared"}
    assert dict(h1.vars) == {"x": 1, "y": 2} == dict(h2.vars)


def test_ansible_top_level_groups_besides_all(tmp_path):
    inv = load(tmp_path, """
        all:
          vars: {ansible_user: u}
        workers:
          hosts: {w1: , w2: }
    """)
    assert [(h.name, h.user, h.groups) for h in inv.hosts] == [("w1", "u", ("workers",)), ("w2", "u", ("workers",))]


def test_ansible_without_all(tmp_path):
    inv = load(tmp_path, """
        worker:
          hosts:
            n[1:2]:
          vars: {npus_per_node: 8}
    """)
    assert inv.names == ("n1", "n2")
    assert inv.hosts[0].roles == {"worker"}
    assert inv.hosts[0].vars["npus_per_node"] == 8


@pytest.mark.parametrize(
    "args, jump",
    [
        ("-o ProxyJump=bastion", "bastion"),
        ("-o 'ProxyJump bastion'", "bastion"),
        ("-oProxyJump=u@b:2", "u@b:2"),
        ("-o proxyjump=b", "b"),
        ("-J u@b", "u@b"),
        ("-Jb", "b"),
        ("-o StrictHostKeyChecking=no -o ProxyJump=b", "b"),
        ("-o ProxyCommand='ssh -W %h:%p -q ops@bastion'", "ops@bastion"),
        ("-o ProxyCommand=\"ssh -W %h:%p -p 2222 -l ops bastion\"", "ops@bastion:2222"),
        ("-o ProxyJump=none", None),
        ("-o ServerAliveInterval=5", None),
    ],
)
def test_ansible_ssh_args_jump_host(tmp_path, args, jump):
    inv = load(tmp_path, f"all:\n  hosts:\n    a:\n      ansible_ssh_common_args: {_yaml_str(args)}\n")
    assert inv.hosts[0].jump_host == jump


def _yaml_str(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def test_ansible_common_args_come_before_extra_args(tmp_path):
    # Ansible runs ssh ... common args ... extra args, and ssh keeps the first ProxyJump
    inv = load(tmp_path, """
        all:
          hosts:
            a:
              ansible_ssh_common_args: -o ProxyJump=common
              ansible_ssh_extra_args: -o ProxyJump=extra
            b:
              ansible_ssh_extra_args: -o ProxyJump=extra
              ansible_ssh_common_args: -o ProxyJump=common
            c:
              ansible_ssh_extra_args: -J extra
    """)
    assert [h.jump_host for h in inv.hosts] == ["common", "common", "extra"]


def test_ansible_host_args_replace_group_args(tmp_path):
    inv = load(tmp_path, """
        all:
          vars:
            ansible_ssh_common_args: -o ProxyJump=bastion
          hosts:
            direct: {ansible_ssh_common_args: "-o ServerAliveInterval=5"}
            via:
    """)
    assert [h.jump_host for h in inv.hosts] == [None, "bastion"]


def test_ansible_ssh_args_other_settings(tmp_path):
    inv = load(tmp_path, """
        all:
          hosts:
            a: {ansible_ssh_common_args: "-F ~/cfg -o UserKnownHostsFile=~/kh"}
    """)
    assert (inv.hosts[0].ssh_config, inv.hosts[0].known_hosts) == ("/home/op/cfg", "/home/op/kh")


@pytest.mark.parametrize(
    "args, fragment",
    [
        ("-o ProxyJump=a;b", "invalid jump host 'a;b'"),
        ("-J $(id)", "invalid jump host '$(id)'"),
        ("-o ProxyCommand='nc %h %p'", "ProxyCommand 'nc %h %p' is not supported; use -o ProxyJump="),
        ("-o ProxyCommand='ssh -W %h:%p b; id'", "is not supported"),
        ("-o ProxyJump='a b", "cannot split"),
        ("-o ProxyJump=a,b", "only one jump host"),
        # ignored, these sent the run to port 22 as the default user and key
        ("-p 2222", "-p is not read from SSH arguments; set ansible_port"),
        ("-ladmin", "-l is not read from SSH arguments; set ansible_user"),
        ("-i ~/.ssh/other", "set ansible_ssh_private_key_file"),
        ("-o Port=2200", "-o Port=2200 is not read from SSH arguments; set ansible_port"),
        ("-o User=x", "set ansible_user"),
        ("-o 'IdentityFile ~/k'", "set ansible_ssh_private_key_file"),
        ("-o HostName=10.0.0.9", "set ansible_host"),
    ],
)
def test_ansible_bad_ssh_args(tmp_path, args, fragment):
    e = error(tmp_path, f"all:\n  hosts:\n    h1:\n      ansible_ssh_common_args: {_yaml_str(args)}\n")
    assert where(e) == (4, "all.hosts.h1.ansible_ssh_common_args")
    assert fragment in e.message


@pytest.mark.parametrize("conn, expected", [("local", "local"), ("ssh", "ssh"), ("paramiko", "ssh"),
                                            ("smart", "ssh")])
def test_ansible_connection(tmp_path, conn, expected):
    inv = load(tmp_path, f"all:\n  hosts:\n    a: {{ansible_connection: {conn}}}\n")
    assert inv.hosts[0].connection == expected


def test_ansible_connection_unsupported(tmp_path):
    e = error(tmp_path, """
        all:
          children:
            win:
              hosts:
                w1: {ansible_connection: winrm}
    """)
    assert str(e) == (f"{tmp_path / 'hosts.yaml'}:5: all.children.win.hosts.w1.ansible_connection: "
                      "unsupported connection 'winrm' (supported: local, ssh, paramiko, smart)")


def test_ansible_aliases_and_become(tmp_path):
    inv = load(tmp_path, """
        all:
          hosts:
            a: {ansible_ssh_host: 10.0.0.1, ansible_ssh_user: u, ansible_ssh_port: "2022",
                ansible_private_key_file: /k, ansible_become: yes}
            b: {ansible_ssh_host: 10.0.0.1, ansible_host: 10.0.0.2, ansible_become: "false"}
    """)
    a, b = inv.hosts
    assert (a.address, a.user, a.port, a.identity_file, a.vars["sudo"]) == ("10.0.0.1", "u", 2022, "/k", True)
    # Ansible's ssh plugin reads ansible_host, then ansible_ssh_host: the last one set wins
    assert (b.address, b.vars["sudo"]) == ("10.0.0.1", False)


def test_ansible_ssh_spelling_wins_over_new_one_at_any_level(tmp_path):
    # as ansible -vvv shows: ESTABLISH SSH CONNECTION FOR USER: legacy ... -o Port=2202 ... 10.0.0.3
    inv = load(tmp_path, """
        all:
          vars: {ansible_ssh_user: legacy, ansible_ssh_port: 2202}
          children:
            worker:
              vars: {ansible_ssh_host: 10.0.0.3}
              hosts:
                n1: {ansible_host: 10.0.0.2, ansible_user: newuser, ansible_port: 2201}
          hosts:
            n2:2200: {ansible_user: newuser}
    """)
    n1, n2 = inv.by_name("n1"), inv.by_name("n2")
    assert (n1.address, n1.user, n1.port) == ("10.0.0.3", "legacy", 2202)
    assert (n2.user, n2.port) == ("legacy", 2202)


def test_ansible_host_key_with_port(tmp_path):
    inv = load(tmp_path, """
        all:
          hosts:
            node1:2222:
            node[2:3]:2200:
            node4:2222: {ansible_port: 22}
            "2001:db8::1":
            "[2001:db8::2]:2222":
    """)
    assert [(h.name, h.port) for h in inv.hosts] == [("node1", 2222), ("node2", 2200), ("node3", 2200),
                                                     ("node4", 22), ("2001:db8::1", None), ("2001:db8::2", 2222)]
    assert inv.hosts[-1].address == "2001:db8::2"  # was: "bad range: '[2001:db8::2]'"


def test_ansible_unknown_vars_kept_known_vars_validated(tmp_path):
    inv = load(tmp_path, """
        all:
          vars:
            anything: {nested: [1, 2]}
            ansible_python_interpreter: /usr/bin/python3
            port: "not ours"
          hosts: {a: }
    """)
    v = inv.hosts[0].vars
    assert v["anything"]["nested"] == (1, 2)
    assert v["ansible_python_interpreter"] == "/usr/bin/python3"
    assert v["port"] == "not ours" and inv.hosts[0].port is None

    e = error(tmp_path, """
        all:
          children:
            w:
              vars: {npus_per_node: eight}
              hosts: {a: }
    """)
    assert where(e) == (4, "all.children.w.vars.npus_per_node")
    assert e.message == "must be an integer, not a string 'eight'"


def test_ansible_env_merges(tmp_path):
    inv = load(tmp_path, """
        all:
          vars: {env: {A: "1", B: "1"}}
          hosts:
            h: {env: {B: "2"}}
    """)
    assert dict(inv.hosts[0].vars["env"]) == {"A": "1", "B": "2"}


@pytest.mark.parametrize(
    "text, line, key, fragment",
    [
        ("all:\n  hosts: {a: }\n  childs: {}\n", 3, "all.childs",
         "unknown group key 'childs' (did you mean 'children'?)"),
        ("all:\n  children:\n    w:\n      host: {a: }\n", 4, "all.children.w.host",
         "unknown group key 'host' (did you mean 'hosts'?)"),
        ("all:\n  hosts: [a, b]\n", 2, "all.hosts", "must be a mapping of host name to host vars, not a list"),
        ("all:\n  hosts:\n    a: [1]\n", 3, "all.hosts.a", "must be a mapping of variables, not a list"),
        ("all:\n  vars: [1]\n  hosts: {a: }\n", 2, "all.vars", "must be a mapping of variables, not a list"),
        ("all:\n  children: [w]\n", 2, "all.children", "must be a mapping of child group name to group"),
        ("all:\n  children:\n    w: [a]\n", 3, "all.children.w", "must be a group mapping"),
        ("all:\n  children:\n    'bad group':\n      hosts: {a: }\n", 3, "all.children.bad group",
         "invalid group name 'bad group'"),
        ("all:\n  children:\n    all:\n      hosts: {a: }\n", 3, "all.children.all", "'all' cannot be a child"),
        ("all:\n  vars: {x: 1}\n", 1, "all", "no hosts"),
        ("all:\n", 1, "all", "no hosts"),
        ("all:\n  hosts:\n    a: {ansible_port: 0}\n", 3, "all.hosts.a.ansible_port", "out of range"),
        ("all:\n  hosts:\n    a: {ansible_port: x}\n", 3, "all.hosts.a.ansible_port", "must be an integer"),
        ("all:\n  hosts:\n    a: {ansible_user: 'r; id'}\n", 3, "all.hosts.a.ansible_user", "invalid user name"),
        ("all:\n  hosts:\n    a: {ansible_host: '$(reboot)'}\n", 3, "all.hosts.a.ansible_host",
         "'$(reboot)' is not a valid host name"),
        ("all:\n  hosts:\n    a: {ansible_host: 'n[1-2]'}\n", 3, "all.hosts.a.ansible_host", "not a valid host"),
        ("all:\n  hosts:\n    a: {ansible_host: 10}\n", 3, "all.hosts.a.ansible_host", "must be a string"),
        ("all:\n  hosts:\n    a: {ansible_ssh_private_key_file: \"a\\0\"}\n", 3,
         "all.hosts.a.ansible_ssh_private_key_file", "NUL"),
        ("all:\n  hosts:\n    a: {ansible_become: maybe}\n", 3, "all.hosts.a.ansible_become", "true or false"),
        ("all:\n  hosts:\n    'n1; id':\n", 3, "all.hosts.n1; id", "'n1; id' is not a valid host name"),
        ("all:\n  hosts:\n    'n[3:1]':\n", 3, "all.hosts.n[3:1]", "reversed range"),
        ("all:\n  hosts:\n    a:\n    a:\n", 4, "all.hosts.a", "duplicate key 'a' (first at line 3)"),
        ("all:\n  hosts: {a: }\nhosts: [b]\n", 3, "hosts", "mixes native key 'hosts' with an Ansible 'all:'"),
    ],
)
def test_ansible_errors(tmp_path, text, line, key, fragment):
    e = error(tmp_path, text)
    assert where(e) == (line, key), str(e)
    assert fragment in e.message, str(e)


def test_ansible_group_cycles(tmp_path):
    e = error(tmp_path, """
        all:
          children:
            a:
              children:
                b:
                  children:
                    a:
                      hosts: {h: }
    """)
    assert where(e) == (7, "all.children.a.children.b.children.a")
    assert e.message == "group cycle: a -> b -> a"

    e = error(tmp_path, """
        all:
          children:
            a:
              children:
                b: {hosts: {h: }}
            b:
              children:
                a:
    """)
    assert "group cycle" in e.message and e.line == 3

    e = error(tmp_path, """
        all:
          children:
            a: &A
              children:
                b: *A
    """)
    assert "group cycle" in e.message


def test_alias_bomb_is_refused_cheaply(tmp_path):
    # A "billion laughs" style document: aliases share nodes, so loading copies nothing, but
    # preflight.json and --facts-out would write 10^12 values out.
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 12):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    text = "hosts: [h]\ndefaults:\n  tags:\n" + "\n".join("    " + line for line in lines) + "\n"
    e = error(tmp_path, text)
    assert where(e) == (4, "defaults.tags") and "more than 10000 values" in e.message
    # A few aliases within the bound are labels as usual.
    inv = load(tmp_path, "hosts: [h]\ndefaults:\n  tags: {a: &r [1, 2], b: *r, c: *r}\n")
    assert inv.hosts[0].vars["tags"] == {"a": (1, 2), "b": (1, 2), "c": (1, 2)}


def test_alias_bomb_in_an_ansible_variable_is_refused_cheaply(tmp_path):
    """Ansible inventories keep arbitrary vars as written: the same bound as native tags (a bomb
    under all.vars wrote a 297 MB --facts-out in 35 s; one level more, 3 GB)."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 12):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    text = ("all:\n  vars:\n" + "\n".join("    " + line for line in lines)
            + "\n  hosts:\n    localhost: {ansible_connection: local}\n")
    e = error(tmp_path, text)
    assert where(e) == (6, "all.vars.a3") and "more than 10000 values" in e.message


# ========================================================================= found by review


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf"])
def test_a_number_setting_must_be_finite(tmp_path, value):
    # nan compares false with everything: max_clock_skew_s: .nan would pass every clock.
    e = error(tmp_path, f"hosts:\n  - {{name: n1, max_clock_skew_s: {value}}}\n")
    assert where(e) == (2, "hosts[0].max_clock_skew_s") and "finite" in e.message


def test_an_ansible_host_key_with_a_bad_port_is_an_inventory_error(tmp_path):
    e = error(tmp_path, 'all:\n  hosts:\n    "a:99999":\n')
    assert where(e) == (3, "all.hosts.a:99999")
    assert "port in the host key" in e.message and "1..65535" in e.message


def test_absurdly_nested_yaml_is_an_inventory_error(tmp_path):
    deep = "[" * 600 + "]" * 600
    e = error(tmp_path, f"hosts:\n  - {{name: n1, tags: {{x: {deep}}}}}\n")
    assert "nested too deeply" in e.message


@pytest.mark.parametrize("value", ["12345", "0x7f000001", "0X10"])
def test_a_bare_number_is_not_a_host_name(tmp_path, value):
    # getaddrinfo reads "12345" as 0.0.48.57 and "0x7f000001" as 127.0.0.1.
    e = error(tmp_path, f'hosts:\n  - {{name: n1, address: "{value}"}}\n')
    assert where(e) == (2, "hosts[0].address") and "bare number" in e.message


@pytest.mark.parametrize("named, meant", [("workers", "worker"), ("heads", "head"), ("trainer", "trainers")])
def test_a_group_one_letter_off_a_defined_group_or_role_is_an_error(tmp_path, named, meant):
    """`groups: [workers]` with `worker` defined silently dropped npus_per_node and chip from the
    host (their checks then skipped); a label unlike any group or role is still a label."""
    text = (f"groups:\n  worker: {{npus_per_node: 8}}\n  trainers: {{chip: 910B3}}\n"
            f"hosts:\n  - {{name: n1, groups: [{named}]}}\n")
    e = error(tmp_path, text)
    assert where(e) == (5, "hosts[0].groups") and f"did you mean {meant!r}?" in e.message
    inv = load(tmp_path, "groups:\n  worker: {npus_per_node: 8}\nhosts:\n  - {name: n1, groups: [rack7, head]}\n")
    assert inv.hosts[0].groups == ("rack7", "head")
    # Numbered or lettered labels beside a defined one are names of their own, not typos.
    inv = load(tmp_path, "groups:\n  rack1: {chip: 910B3}\n  pod-a: {npus_per_node: 8}\n"
                         "hosts:\n  - {name: n1, groups: [rack2, pod-b, rack01, node-group-2]}\n")
    assert inv.hosts[0].groups == ("rack2", "pod-b", "rack01", "node-group-2")


def test_an_ansible_variable_a_letter_off_one_of_ours_is_an_error(tmp_path):
    text = "all:\n  hosts:\n    n1:\n      npu_per_node: 8\n      deploy_env: prod\n"
    e = error(tmp_path, text)
    assert e.key.endswith("npu_per_node") and "did you mean 'npus_per_node'?" in e.message
    inv = load(tmp_path, "all:\n  hosts:\n    n1:\n      npus_per_node: 8\n      deploy_env: prod\n"
                         "      python3: /usr/bin/python3\n      chips: 2\n      ray_ports: [6379]\n      launch: x\n")
    assert inv.hosts[0].vars["deploy_env"] == "prod" and inv.hosts[0].vars["chips"] == 2


@pytest.mark.parametrize("typo, meant", [("ansible_hosts", "ansible_host"), ("ansible_usr", "ansible_user"),
                                         ("ansible_prot", "ansible_port")])
def test_an_ansible_connection_variable_mistyped_is_an_error(tmp_path, typo, meant):
    """It was kept as a free variable: the node was reached by its inventory name, as the default user."""
    e = error(tmp_path, f"all:\n  hosts:\n    a:\n      {typo}: 192.0.2.1\n")
    assert where(e) == (4, f"all.hosts.a.{typo}") and f"did you mean {meant!r}?" in e.message


def test_ansibles_known_hosts_dev_null_is_kept_for_the_run_to_explain(tmp_path):
    """Shared with Ansible itself (with StrictHostKeyChecking=no): refusing the file would make the
    operator fork their inventory; the host-key error says what to do instead."""
    inv = load(tmp_path, "all:\n  hosts:\n    a:\n      ansible_ssh_common_args: '-o StrictHostKeyChecking=no -o "
                         "UserKnownHostsFile=/dev/null'\n")
    assert inv.hosts[0].known_hosts == "/dev/null"


def test_env_null_clears_an_inherited_declaration(tmp_path):
    inv = load(tmp_path, "defaults:\n  env: {HCCL_CONNECT_TIMEOUT: '1200', TASK_QUEUE_ENABLE: '2'}\n"
                         "hosts:\n  - {name: a, env: {HCCL_CONNECT_TIMEOUT: null}}\n  - {name: b}\n")
    assert dict(inv.hosts[0].vars["env"]) == {"TASK_QUEUE_ENABLE": "2"}
    assert dict(inv.hosts[1].vars["env"]) == {"HCCL_CONNECT_TIMEOUT": "1200", "TASK_QUEUE_ENABLE": "2"}


@pytest.mark.parametrize("value, number", [("0x10", 16), ("010", 8), ("1_000", 1000), ("1:30", 90), ("+5", 5)])
def test_an_env_number_yaml_would_rewrite_must_be_quoted(tmp_path, value, number):
    e = error(tmp_path, f"hosts:\n  - name: a\n    env:\n      X: {value}\n")
    assert where(e) == (4, "hosts[0].env.X")
    assert e.message == f"{value} reads as the number {number} in YAML; quote it (X: '{value}') to keep it as written"
    assert dict(load(tmp_path, f"hosts:\n  - name: a\n    env: {{X: '{value}', Y: 1200}}\n").hosts[0].vars["env"]) == {
        "X": value, "Y": "1200"}


@pytest.mark.parametrize("text, line, key", [
    ('all:\n  hosts:\n    "node1:\u00b2":\n', 3, "all.hosts"),
    ('all:\n  hosts:\n    node1: {ansible_port: "\u00b2"}\n', 3, "all.hosts.node1.ansible_port"),
    ('all:\n  hosts:\n    node1: {ansible_ssh_common_args: "-J admin@bastion:\u00b2"}\n', 3,
     "all.hosts.node1.ansible_ssh_common_args"),
])
def test_a_port_of_non_ascii_digits_is_an_inventory_error_not_a_traceback(tmp_path, text, line, key):
    """"²" passes str.isdigit() and fails int(): a ValueError traceback at startup."""
    e = error(tmp_path, text)
    assert where(e)[0] == line and where(e)[1].startswith(key), (where(e), e.message)


@pytest.mark.parametrize("value", ["python3; touch /tmp/pwned", "$(id)", "py thon", "`id`"])
def test_python_that_cannot_be_a_program_is_refused(tmp_path, value):
    """It was accepted (quoted wherever used, so harmless), against the rule that unsafe values are refused."""
    e = error(tmp_path, f"hosts:\n  - name: n1\n    python: {_yaml_str(value)}\n")
    assert where(e) == (3, "hosts[0].python") and "not a program name or path" in e.message


@pytest.mark.parametrize("value", ["python3", "/opt/conda/envs/py3.10/bin/python", "~/venv/bin/python3.11"])
def test_python_programs_and_paths_are_accepted(tmp_path, value):
    assert load(tmp_path, f"hosts:\n  - name: n1\n    python: {value}\n").hosts[0].vars["python"] == value


def test_ansible_group_priority_orders_groups_of_one_depth(tmp_path):
    # ansible-inventory: groups of one depth apply by (priority, name); the priority is no variable
    inv = load(tmp_path, """
        all:
          children:
            aaa:
              vars: {chip: 910A, ansible_user: fromaaa}
              hosts: {n1: }
            zzz:
              vars: {chip: 910B, ansible_group_priority: 0, ansible_user: fromzzz}
              hosts: {n1: }
            ppp:
              vars: {ansible_group_priority: "10", ansible_port: 2200}
              hosts: {n2: }
            qqq:
              vars: {ansible_port: 2300}
              hosts: {n2: }
    """)
    n1, n2 = inv.by_name("n1"), inv.by_name("n2")
    assert (n1.user, n1.vars["chip"], n2.port) == ("fromaaa", "910A", 2200)
    assert "ansible_group_priority" not in n1.vars and "ansible_group_priority" not in n2.vars
    err = error(tmp_path, """
        all:
          children:
            worker:
              vars:
                ansible_group_priority: high
              hosts: {n1: }
    """)
    assert where(err) == (5, "all.children.worker.vars.ansible_group_priority")
    assert err.message == "must be an integer, not a string 'high'"


def test_ansible_host_vars_given_twice_later_in_the_file_wins(tmp_path):
    # ansible-inventory reads a group's vars, hosts and children in the order written
    inv = load(tmp_path, """
        all:
          children:
            worker:
              children:
                rack1:
                  hosts:
                    n1: {ansible_user: a, tier: rack}
              hosts:
                n1: {ansible_user: b, tier: worker}
          hosts:
            n1: {ansible_port: 1111, tier: top}
    """)
    n1 = inv.by_name("n1")
    assert (n1.user, n1.port, n1.vars["tier"], n1.groups) == ("b", 1111, "top", ("worker", "rack1"))


def test_ansible_ssh_args_first_proxy_jump_wins_as_in_ssh(tmp_path):
    # ansible -vvv: ssh -o ProxyJump=first ... -o ProxyJump=common -o ProxyJump=common2 -o ProxyJump=extra
    # and ssh keeps the first value of an option
    inv = load(tmp_path, """
        all:
          vars:
            ansible_ssh_common_args: "-o ProxyJump=common.example -o ProxyJump=common2.example"
          hosts:
            n1:
              ansible_ssh_args: "-C -o ProxyJump=first.example"
              ansible_ssh_extra_args: "-o ProxyJump=extra.example"
            n2:
              ansible_ssh_extra_args: "-o ProxyJump=extra.example -o UserKnownHostsFile=/kh"
            n3:
              ansible_ssh_common_args: "-J one.example -o ProxyJump=two.example -o UserKnownHostsFile=/a -o UserKnownHostsFile=/b"
    """)
    n1, n2, n3 = (inv.by_name(n) for n in ("n1", "n2", "n3"))
    assert (n1.jump_host, n2.jump_host, n2.known_hosts) == ("first.example", "common.example", "/kh")
    assert (n3.jump_host, n3.known_hosts) == ("one.example", "/a")
    assert "ansible_ssh_args" not in n1.vars


def test_ansible_jinja_template_in_a_setting_is_an_error(tmp_path):
    err = error(tmp_path, """
        all:
          hosts:
            node01:
              ansible_host: "{{ inventory_hostname }}.ib"
    """)
    assert where(err) == (4, "all.hosts.node01.ansible_host")
    assert "Jinja template" in err.message
    err = error(tmp_path, """
        all:
          vars:
            ifname: eth0
            env: {HCCL_SOCKET_IFNAME: "{{ ifname }}"}
          hosts:
            node01:
    """)
    assert where(err) == (4, "all.vars.env.HCCL_SOCKET_IFNAME") and "Jinja template" in err.message
    inv = load(tmp_path, """
        all:
          vars:
            note: "{{ not_ours }}"
          hosts:
            node01:
    """)
    assert inv.hosts[0].vars["note"] == "{{ not_ours }}"


@pytest.mark.parametrize("text, line", [
    ("[head]  # the Ray head\nnode01 ansible_host=10.0.0.1\n", 1),
    ("node01 ansible_port=22  # ssh\n[worker]\nnode01\n", 2),
    ("node01\nnode02\n\n[worker]\nnode01\n", 4),
])
def test_ini_inventory_named_as_such_past_the_first_line(tmp_path, text, line):
    path = tmp_path / "hosts"
    path.write_text(text)
    with pytest.raises(InventoryError) as info:
        load_inventory(path)
    assert info.value.line == line and "starts an Ansible INI inventory" in info.value.message
