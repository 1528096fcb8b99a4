"""preflight.parsers.system on real command output from this machine, plus hand-written edge cases.

Every parser takes untrusted node output: garbage must raise ParseError (which the facts layer turns
into a clear "unreadable output" error), never any other exception."""

from __future__ import annotations

import ipaddress
import json
import os
import shlex
import shutil
import socket
import subprocess
from dataclasses import replace as dataclasses_replace

import pytest

from preflight.ifname import route_nics, route_to
from preflight.parsers import ParseError, system
from preflight.parsers.system import (
    DevNode,
    NetInterface,
    NofileLimit,
    Route,
    TcpProbe,
    parse_dev_listing,
    parse_env0,
    IP_TEXT_MARK,
    parse_ip_addr,
    parse_ip_addr_json,
    parse_ip_route,
    parse_listening_ports,
    parse_nofile,
    parse_tcp_probe,
)


def sh(command: str, **kw) -> str:
    return subprocess.run(["bash", "-c", command], capture_output=True, check=True, timeout=20,
                          **kw).stdout.decode("utf-8", errors="replace")


def assert_parse_error(func, text):
    """Exactly ParseError: a bare ValueError/TypeError would crash the check instead of erroring it."""
    try:
        func(text)
    except ParseError:
        return
    except Exception as exc:  # noqa: BLE001
        pytest.fail(f"{func.__name__}({text[:60]!r}) raised {type(exc).__name__}: {exc}, not ParseError")
    pytest.fail(f"{func.__name__}({text[:60]!r}) did not raise")


# ------------------------------------------------------------------------------ env -0


def test_env0_real_output():
    env = {"PATH": "/usr/bin:/bin", "PF_MULTI": "line1\nline2", "PF_EQ": "a=b==c", "PF_EMPTY": "",
           "HOME": "/root", "PF_UNICODE": "昇腾"}
    parsed = parse_env0(sh("env -0", env=env))
    assert {k: parsed[k] for k in env} == env  # bash adds PWD, SHLVL and _
    # and the same through the real process environment of this test run
    assert parse_env0(sh("env -0"))["PATH"] == os.environ["PATH"]


def test_env0_values_with_newlines_and_equals():
    text = "A=1\0B=x=y=z\0C=first\nNOT_A_VAR=2\nthird\0D=\0E==\0"
    assert parse_env0(text) == {"A": "1", "B": "x=y=z", "C": "first\nNOT_A_VAR=2\nthird", "D": "", "E": "="}


def test_env0_skips_fragments_and_keeps_the_last_duplicate():
    assert parse_env0("junk\0=nameless\0A=1\0A=2\0") == {"A": "2"}


@pytest.mark.parametrize("text", ["", "\0\0\0", "no assignments here", "=x\0=y\0", "\n"])
def test_env0_garbage_is_a_parse_error(text):
    assert_parse_error(parse_env0, text)


# ------------------------------------------------------------------------------ ulimit -n


def test_nofile_real_output():
    out = sh('printf "%s %s\\n" "$(ulimit -Sn)" "$(ulimit -Hn)"')
    soft, hard = out.split()
    expected = NofileLimit(None if soft == "unlimited" else int(soft), None if hard == "unlimited" else int(hard))
    assert parse_nofile(out) == expected


def test_nofile_with_a_lowered_limit():
    assert parse_nofile(sh('ulimit -n 1024; printf "%s %s\\n" "$(ulimit -Sn)" "$(ulimit -Hn)"')) == \
        NofileLimit(1024, 1024)


@pytest.mark.parametrize("text, expected", [
    ("65536 65536\n", NofileLimit(65536, 65536)),
    ("unlimited unlimited", NofileLimit(None, None)),
    ("1024 unlimited", NofileLimit(1024, None)),
    ("  0\t\t1048576  \n", NofileLimit(0, 1048576)),
])
def test_nofile_values(text, expected):
    assert parse_nofile(text) == expected


@pytest.mark.parametrize("text", ["", "1024", "1 2 3", "-1 5", "1024 lots", "0x10 5", "1e5 1", "1.5 2",
                                  "UNLIMITED 1", "bash: ulimit: error"])
def test_nofile_garbage_is_a_parse_error(text):
    assert_parse_error(parse_nofile, text)


def test_nofile_unicode_digit_is_a_parse_error():
    assert_parse_error(parse_nofile, "² 1024")


# ------------------------------------------------------------------------------ ip -j addr show


@pytest.mark.skipif(shutil.which("ip") is None, reason="iproute2 not installed")
def test_ip_addr_real_output():
    text = sh("ip -j addr show")
    interfaces = parse_ip_addr_json(text)
    raw = json.loads(text)
    assert set(interfaces) == {e["ifname"] for e in raw}
    lo = interfaces["lo"]
    assert isinstance(lo, NetInterface)
    assert lo.up is True  # loopback: operstate UNKNOWN, flags UP
    assert "127.0.0.1/8" in lo.addresses
    for e in raw:
        iface = interfaces[e["ifname"]]
        assert iface.operstate == e.get("operstate", "UNKNOWN")
        if "UP" not in e.get("flags", []):
            assert iface.up is False


def _can_unshare_net() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("ip") is None:
        return False
    return subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _can_unshare_net(), reason="needs root, unshare -n and ip")
def test_ip_addr_no_carrier_in_a_private_netns():
    # A veth whose peer is down: administratively UP, but NO-CARRIER (operstate LOWERLAYERDOWN).
    text = sh("unshare -n sh -c 'ip link add pfa type veth peer name pfb && ip link set pfa up && "
              "ip addr add 198.18.7.1/24 dev pfa && ip link set lo up && ip -j addr show'")
    interfaces = parse_ip_addr_json(text)
    assert "NO-CARRIER" in next(e for e in json.loads(text) if e["ifname"] == "pfa")["flags"]
    assert interfaces["pfa"].up is False
    assert interfaces["pfa"].addresses == ("198.18.7.1/24",)
    assert interfaces["pfb"].up is False  # never set up
    assert interfaces["lo"].up is True


@pytest.mark.skipif(not _can_unshare_net(), reason="needs root, unshare -n and ip")
def test_ip_addr_text_reads_as_the_json_does():
    """iproute2 before 4.14 (CentOS 7) has no -j: its text form, read from the same namespace at the
    same moment, gives the same interfaces (flags, state, addresses, link-local apart, veth@peer)."""
    both = sh("unshare -n sh -c 'ip link add pfa type veth peer name pfb && ip link set pfa up && "
              "ip addr add 198.18.7.1/24 dev pfa && ip addr add fd00:7::1/64 dev pfa nodad && ip link set lo up && "
              "ip link add pfc type veth peer name pfd && ip link set pfc up && ip link set pfd up && "
              "ip addr add 198.18.8.1/24 dev pfc && ip -j addr show && echo @@ && ip addr show'")
    as_json, as_text = both.split("\n@@\n")
    text = parse_ip_addr(IP_TEXT_MARK + "\n" + as_text)
    assert text == parse_ip_addr_json(as_json) == parse_ip_addr(as_json)
    assert text["pfa"].up is False and text["pfa"].addresses == ("198.18.7.1/24", "fd00:7::1/64")
    assert text["pfc"].up is True and text["pfc"].link_local and text["lo"].addresses == ("127.0.0.1/8", "::1/128")


@pytest.mark.skipif(shutil.which("ip") is None, reason="iproute2 not installed")
def test_the_interfaces_command_falls_back_to_text_where_ip_has_no_json(tmp_path):
    from preflight.facts import FACTS

    fake = tmp_path / "ip"  # iproute2 4.11: the real ip, but -j unknown
    fake.write_text(f'#!/bin/sh\ncase "$1" in -j) echo \'Option "-j" is unknown, try "ip -help".\' >&2; exit 255;; esac\n'
                    f'exec {shutil.which("ip")} "$@"\n')
    fake.chmod(0o755)
    spec = FACTS["net.interfaces"]
    done = subprocess.run(["sh", "-c", spec.command], env={"PATH": f"{tmp_path}:/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and done.stdout.startswith(IP_TEXT_MARK), done
    assert spec.parse(done.stdout) == parse_ip_addr_json(sh("ip -j addr show"))


def test_ip_addr_hand_written():
    text = json.dumps([
        {"ifname": "eth0", "flags": ["BROADCAST", "MULTICAST", "UP", "LOWER_UP"], "operstate": "UP",
         "addr_info": [{"family": "inet", "local": "10.0.0.1", "prefixlen": 24},
                       {"family": "inet6", "local": "fe80::1", "prefixlen": 64}]},
        {"ifname": "eth1", "flags": ["NO-CARRIER", "BROADCAST", "MULTICAST", "UP"], "operstate": "DOWN",
         "addr_info": [{"family": "inet", "local": "10.0.1.1", "prefixlen": 24}]},
        {"ifname": "eth2", "flags": ["NO-CARRIER", "BROADCAST", "UP"], "operstate": "UNKNOWN"},
        {"ifname": "eth3", "flags": ["BROADCAST", "UP"], "operstate": "DOWN"},
        {"ifname": "eth4", "flags": ["BROADCAST"], "operstate": "UP"},
        {"ifname": "enp189s0f0", "flags": ["UP"], "addr_info": None},
        {"ifindex": 9},  # no name: skipped
        "not a dict",
    ])
    i = parse_ip_addr_json(text)
    assert list(i) == ["eth0", "eth1", "eth2", "eth3", "eth4", "enp189s0f0"]
    assert i["eth0"] == NetInterface("eth0", True, "UP", ("10.0.0.1/24",), link_local=("fe80::1/64",))
    assert i["eth1"].up is False and i["eth1"].addresses == ("10.0.1.1/24",)
    assert i["eth2"].up is False  # NO-CARRIER wins over operstate UNKNOWN
    assert i["eth3"].up is False
    assert i["eth4"].up is False  # not administratively up
    assert i["enp189s0f0"] == NetInterface("enp189s0f0", True, "UNKNOWN", ())


def test_ip_addr_empty_list_is_no_interfaces():
    assert parse_ip_addr_json("[]") == {}


@pytest.mark.parametrize("text", ["", "Object \"addr\" is unknown, try \"ip help\".", "{\"ifname\": \"x\"}",
                                  "[{\"ifname\": \"x\"", "null", "42", "\"lo\"", "\x00\xff"])
def test_ip_addr_garbage_is_a_parse_error(text):
    assert_parse_error(parse_ip_addr_json, text)


# ------------------------------------------------------------------------------ ip -o route show table main

# A node's routing table as an Ascend host can have it: two defaults (metric decides), the NPU
# device network behind another NIC, a more specific route at two metrics, multipath routes (one
# with a nexthop whose NIC goes down: dead), routes without a NIC, a link route, a TOS route, a
# host route, a NIC that is down (its routes leave the table), IPv6 with multipath.
_ROUTES = """
ip link set lo up
for i in eth0 eth1 bond0 eth2 eth3; do ip link add $i type veth peer name p$i; done
for i in eth0 eth1 bond0 eth3 peth0 peth1 pbond0 peth3; do ip link set $i up; done
ip addr add 10.0.0.5/24 dev eth0; ip addr add 192.168.1.5/16 dev eth1; ip addr add 172.16.0.5/24 dev bond0
ip addr add 10.9.0.5/24 dev eth2; ip addr add 10.8.0.5/24 dev eth3
ip route add default via 10.0.0.1 dev eth0 proto dhcp metric 100
ip route add default via 172.16.0.1 dev bond0 metric 150
ip route add 29.1.0.0/16 via 192.168.1.1 dev eth1
ip route add 29.1.5.0/24 via 172.16.0.1 dev bond0 metric 10
ip route add 29.1.5.0/24 via 10.0.0.1 dev eth0 metric 5
ip route add blackhole 29.1.6.0/24
ip route add unreachable 29.1.7.0/24
ip route add prohibit 29.1.8.0/24
ip route add 29.2.0.0/16 nexthop via 10.0.0.1 dev eth0 nexthop via 172.16.0.1 dev bond0
ip route add throw 29.3.0.0/16
ip route add 29.4.0.0/16 dev eth1 scope link
ip route add 29.5.0.0/16 tos 0x10 dev eth1
ip route add 29.7.0.0/16 nexthop via 10.8.0.1 dev eth3 nexthop via 192.168.1.1 dev eth1
ip route add 29.8.0.1 dev bond0
ip link set eth3 down
ip -6 addr add 2001:db8::5/64 dev eth0 nodad
ip -6 route add 2001:db9::/32 via 2001:db8::1 dev eth0
ip -6 route add 2001:dbb::/32 nexthop via 2001:db8::1 dev eth0 nexthop via 2001:db8::2 dev eth0
"""
_PROBED = ["8.8.8.8", "29.1.0.9", "29.1.5.9", "29.1.6.9", "29.1.7.9", "29.1.8.9", "29.2.0.9", "29.3.0.9",
           "29.4.1.1", "29.5.0.9", "29.7.0.9", "29.8.0.1", "29.8.0.2", "10.0.0.9", "192.168.200.1", "10.9.0.9",
           "2001:db9::1", "2001:db8::9", "2001:dba::1", "2001:dbb::1"]


@pytest.mark.skipif(not _can_unshare_net(), reason="needs root, unshare -n and ip")
def test_ip_route_real_output_agrees_with_ip_route_get():
    # The kernel is the oracle: for every probed address, the NIC our lookup picks from the table
    # is the one `ip route get` names (one of them for a multipath route), or none where it errs.
    from preflight.facts import FACTS
    asked = " ".join(_PROBED)
    text = sh("unshare -n bash -c " + shlex.quote(
        _ROUTES + FACTS["net.routes"].command + "; echo '@@GET'; "
        f"for a in {asked}; do echo \"$a $(ip -o route get $a 2>/dev/null)\"; done"))
    table, _, got = text.partition("@@GET\n")
    routes = parse_ip_route(table)
    assert {r.network.version for r in routes} == {4, 6}
    assert Route(ipaddress.ip_network("0.0.0.0/0"), ("bond0",), "unicast", 150) in routes
    kernel = {}
    for line in got.splitlines():
        address, _, answer = line.partition(" ")
        words = answer.split()
        kernel[address] = words[words.index("dev") + 1] if "dev" in words else None
    assert set(kernel) == set(_PROBED)
    for address, dev in kernel.items():
        ours = route_nics(routes, address)
        assert (dev in ours) if dev else ours == (), (address, dev, ours)
    assert route_nics(routes, "29.2.0.9") == ("eth0", "bond0")  # multipath: every nexthop's NIC
    assert route_nics(routes, "29.7.0.9") == ("eth1",)  # ... but a dead one's
    assert route_nics(routes, "2001:dbb::1") == ("eth0", "eth0")
    assert route_nics(routes, "29.1.5.9") == ("eth0",)  # the lower metric of two equal prefixes
    assert route_nics(routes, "29.5.0.9") == ("eth0",)  # a TOS route is not for `ip route get`
    assert route_nics(routes, "10.9.0.9") == ("eth0",)  # eth2 is down: its link route is gone
    assert route_to(routes, "29.1.6.9").kind == "blackhole" and route_to(routes, "8.8.8.8").network.prefixlen == 0


def test_ip_route_without_ipv6_and_hand_written_edges():
    # iproute2 4.x spacing (two blanks before proto), a host route, IPv6 disabled (an empty part).
    routes = parse_ip_route("default via 10.0.0.1 dev eth0  proto static  metric 100 \n"
                            "29.1.2.3 dev eth1  scope link \n@@IPV6\n")
    assert [(str(r.network), r.nics, r.metric) for r in routes] == [("0.0.0.0/0", ("eth0",), 100),
                                                                    ("29.1.2.3/32", ("eth1",), 0)]
    assert route_nics(routes, "29.1.2.3") == ("eth1",) and route_nics(routes, "29.1.2.4") == ("eth0",)
    assert route_nics(routes, "not an address") == () and route_to(routes, "2001:db8::1") is None
    [v6] = parse_ip_route("@@IPV6\ndefault via fe80::1 dev eth0 proto ra metric 1024 expires 1798sec pref medium\n")
    assert str(v6.network) == "::/0" and v6.metric == 1024 and v6.nics == ("eth0",)


@pytest.mark.parametrize("text", ["", "Option \"-j\" is unknown, try \"ip -help\".\n@@IPV6",
                                  "default via 10.0.0.1 dev eth0\n",  # cut before the IPv6 part
                                  "bogus dev eth0\n@@IPV6", "blackhole\n@@IPV6",
                                  "default via 10.0.0.1 dev eth0 metric x\n@@IPV6",
                                  "default via 10.0.0.1 dev eth0 metric \u0661\n@@IPV6",
                                  "2001:db8::/64 dev eth0\n@@IPV6", "@@IPV6\n10.0.0.0/8 dev eth0",
                                  "\x00\xff\n@@IPV6"])
def test_ip_route_garbage_is_a_parse_error(text):
    assert_parse_error(parse_ip_route, text)


@pytest.mark.parametrize("text", ['[{"ifname": "x", "flags": 5}]', '[{"ifname": "x", "addr_info": 5}]'])
def test_ip_addr_wrongly_typed_fields_are_a_parse_error(text):
    assert_parse_error(parse_ip_addr_json, text)


def test_ip_addr_deeply_nested_json_is_a_parse_error():
    assert_parse_error(parse_ip_addr_json, "[" * 100000)


# ------------------------------------------------------------------------------ /dev listing


def test_dev_listing_real_output():
    nodes = parse_dev_listing(sh("cd /dev && stat -c '%n|%F|%t|%T|%U|%G|%a' null zero"))
    assert nodes == {
        "null": DevNode("null", "char", 1, 3, "root", "root", "666"),
        "zero": DevNode("zero", "char", 1, 5, "root", "root", "666"),
    }


def test_dev_listing_real_directory_file_and_link(tmp_path):
    (tmp_path / "f").write_text("x")
    (tmp_path / "e").touch()
    (tmp_path / "d").mkdir()
    (tmp_path / "l").symlink_to("f")
    nodes = parse_dev_listing(sh(f"cd {tmp_path} && stat -c '%n|%F|%t|%T|%U|%G|%a' f e d l"))
    assert {n: (v.kind, v.major, v.minor) for n, v in nodes.items()} == {
        "f": ("file", None, None), "e": ("file", None, None), "d": ("directory", None, None),
        "l": ("link", None, None)}


def test_dev_listing_hand_written():
    text = ("davinci0|character special file|ec|0|root|HwHiAiUser|660\n"
            "davinci15|character special file|ec|f|root|root|600\n"
            "sda|block special file|8|0|root|disk|660\n"
            "fifo|fifo|0|0|root|root|644\n"
            "stat: cannot statx 'davinci*': No such file or directory\n"
            "\n")
    nodes = parse_dev_listing(text)
    assert nodes["davinci0"] == DevNode("davinci0", "char", 236, 0, "root", "HwHiAiUser", "660")
    assert nodes["davinci15"].minor == 15
    assert nodes["sda"].kind == "block" and nodes["sda"].major == 8
    assert nodes["fifo"].kind == "other"
    assert set(nodes) == {"davinci0", "davinci15", "sda", "fifo"}


def test_dev_listing_empty_is_no_nodes():
    assert parse_dev_listing("") == {}  # no device nodes at all is a fact, not an error


@pytest.mark.parametrize("text", ["davinci0|character special file|zz|0|root|root|660",
                                  "davinci0|character special file||0|root|root|660", "a|b|c",
                                  "Last login: Fri Dec  4 10:00:00 2026\n"])
def test_dev_listing_garbage_is_a_parse_error(text):
    assert_parse_error(parse_dev_listing, text)


# ------------------------------------------------------------------------------ /proc/net/tcp


def test_listening_ports_real_output_with_our_own_listener():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as srv, \
            socket.socket(socket.AF_INET, socket.SOCK_STREAM) as bound_only:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        port = srv.getsockname()[1]
        bound_only.bind(("127.0.0.1", 0))  # bound, not listening: state 07, not 0A
        other = bound_only.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as client:  # an ESTABLISHED (01) entry too
            text = sh("cat /proc/net/tcp /proc/net/tcp6 2>/dev/null")
            client_port = client.getsockname()[1]
        ports = parse_listening_ports(text)
    assert isinstance(ports, frozenset)
    assert port in ports
    assert other not in ports
    assert client_port not in ports
    assert f":{port:04X} 00000000:0000 0A" in text


def test_listening_ports_ipv6_listener():
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    try:
        srv = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        srv.bind(("::1", 0))
    except OSError:
        pytest.skip("no ::1 here")
    with srv:
        srv.listen(1)
        port = srv.getsockname()[1]
        ports = parse_listening_ports(sh("cat /proc/net/tcp /proc/net/tcp6 2>/dev/null"))
    assert port in ports


def test_listening_ports_hand_written():
    text = (
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        "   0: 00000000:1A0A 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1\n"
        "   1: 0100007F:18EB 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2 1\n"
        "   2: 0100007F:0016 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 3 1\n"
        "   3: 0100007F:ZZZZ 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4 1\n"
        "   4: 0100007F 00000000:0000 0A\n"
        "  sl  local_address                         remote_address                        st tx_queue\n"
        "   0: 00000000000000000000000000000000:2EE0 00000000000000000000000000000000:0000 0A 0:0\n"
        "   1: 00000000000000000000000000000000:0050 00000000000000000000000000000000:0000 06 0:0\n"
    )
    assert parse_listening_ports(text) == frozenset({0x1A0A, 0x18EB, 0x2EE0})


def test_listening_ports_header_only_is_none():
    assert parse_listening_ports("  sl  local_address rem_address   st tx_queue\n") == frozenset()


@pytest.mark.parametrize("text", ["", "cat: /proc/net/tcp: No such file or directory",
                                  "   0: 00000000:1A0A 00000000:0000 0A 00000000:00000000\n", "\x00\x01"])
def test_listening_ports_garbage_is_a_parse_error(text):
    assert_parse_error(parse_listening_ports, text)


# ------------------------------------------------------------------------------ phase-two TCP probe records


@pytest.mark.parametrize("text, expected", [
    ("open 10.0.0.1 6379 existing\n", TcpProbe("open", "10.0.0.1", 6379, "existing", "")),
    ("refused 10.0.0.1 6379 none connection refused by peer",
     TcpProbe("refused", "10.0.0.1", 6379, "none", "connection refused by peer")),
    ("timeout node-01 29500 temporary no answer in 3s",
     TcpProbe("timeout", "node-01", 29500, "temporary", "no answer in 3s")),
    ("unreachable fd00::1 6379 none", TcpProbe("unreachable", "fd00::1", 6379, "none", "")),
    ("unresolved head.example 6379 none Name or service not known",
     TcpProbe("unresolved", "head.example", 6379, "none", "Name or service not known")),
    ("error 10.0.0.1 1 none OSError: [Errno 99] x", TcpProbe("error", "10.0.0.1", 1, "none", "OSError: [Errno 99] x")),
])
def test_tcp_probe_records(text, expected):
    assert parse_tcp_probe(text) == expected


@pytest.mark.parametrize("text", ["", "open", "open 10.0.0.1 6379", "closed 10.0.0.1 6379 none",
                                  "open 10.0.0.1 port none", "open 10.0.0.1 -1 none",
                                  "Traceback (most recent call last):", "OPEN 10.0.0.1 6379 none"])
def test_tcp_probe_garbage_is_a_parse_error(text):
    assert_parse_error(parse_tcp_probe, text)


def test_tcp_probe_unicode_digit_port_is_a_parse_error():
    assert_parse_error(parse_tcp_probe, "open 10.0.0.1 ² none")


# -- pdsh: command -v, then pdsh -V ------------------------------------------------------------
# The -V formats as pdsh prints them (src/pdsh/opt.c _show_version): 2.34 from Debian's apt,
# 2.26 built with ssh and exec only, 2.23 with mrsh as its default.

def test_pdsh_modules_and_default():
    pdsh = system.parse_pdsh("/usr/bin/pdsh\npdsh-2.34 (+readline+debug)\nrcmd modules: ssh,rsh,exec (default: rsh)\n"
                             "misc modules: machines,dshgroup,netgroup,genders\n")
    assert pdsh == system.Pdsh("/usr/bin/pdsh", ("ssh", "rsh", "exec"), "rsh")
    pdsh = system.parse_pdsh("/usr/local/bin/pdsh\npdsh-2.26\nrcmd modules: ssh,exec (default: ssh)\nmisc modules: (none)\n")
    assert pdsh.rcmd == ("ssh", "exec") and pdsh.default_rcmd == "ssh"
    pdsh = system.parse_pdsh("/usr/bin/pdsh\npdsh-2.23 (+debug)\nrcmd modules: ssh,rsh,mrsh,exec (default: mrsh)\n"
                             "misc modules: slurm,dshgroup,nodeupdown (*conflicting: genders)\n"
                             "[* To force-load a conflicting module, use the -M <name> option]\n")
    assert pdsh.rcmd == ("ssh", "rsh", "mrsh", "exec") and pdsh.default_rcmd == "mrsh"


def test_pdsh_yum_build_without_ssh():
    pdsh = system.parse_pdsh("/usr/bin/pdsh\npdsh-2.34\nrcmd modules: rsh,exec (default: rsh)\nmisc modules: (none)\n")
    assert "ssh" not in pdsh.rcmd and pdsh.default_rcmd == "rsh"


def test_pdsh_with_one_module_or_none_that_loads():
    # pdsh prints "(default: X)" only with more than one rcmd module (src/pdsh/opt.c): one is the default.
    assert system.parse_pdsh("/usr/bin/pdsh\npdsh-2.34 (+readline+debug)\nrcmd modules: ssh\n"
                             "misc modules: (none)\n") == system.Pdsh("/usr/bin/pdsh", ("ssh",), "ssh")
    # Captured: Debian's pdsh.bin with its module folder missing (exit 1).
    broken = system.parse_pdsh('/usr/bin/pdsh\npdsh@vm: Can\'t stat "/usr/lib/x86_64-linux-gnu/pdsh": No such file or '
                               "directory\npdsh@vm: Couldn't load any pdsh modules\n")
    assert broken.rcmd is None and "Couldn't load any pdsh modules" in broken.broken


def test_pdsh_absent_or_silent():
    assert system.parse_pdsh("") is None
    assert system.parse_pdsh("\n") is None
    # A pdsh whose -V says nothing about modules: installed, modules unknown.
    assert system.parse_pdsh("/opt/pdsh/bin/pdsh\n") == system.Pdsh("/opt/pdsh/bin/pdsh")
    assert system.parse_pdsh("/usr/bin/pdsh\nrcmd modules: (none)\n") == system.Pdsh("/usr/bin/pdsh", (), None)


# Captured from Debian bookworm's pdsh 2.34-0.2 package (genders' library absent: no misc module),
# then the same with its sshcmd.so removed, as yum's pdsh is without pdsh-rcmd-ssh.
DEBIAN_PDSH_V = "pdsh-2.34 (+readline+debug)\nrcmd modules: ssh,rsh,exec (default: rsh)\nmisc modules: (none)\n"
NO_SSH_PDSH_V = "pdsh-2.34 (+readline+debug)\nrcmd modules: rsh,exec (default: rsh)\nmisc modules: (none)\n"


def _can_overlay_etc() -> bool:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    import tempfile

    with tempfile.TemporaryDirectory() as layer:
        probe = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                                f"mount -t overlay overlay -o lowerdir={layer}:/etc /etc"], capture_output=True)
    return probe.returncode == 0


@pytest.mark.skipif(not _can_overlay_etc(), reason="needs root, unshare -m and overlayfs")
def test_pdsh_fact_command_ignores_the_default_file_without_debians_wrapper(tmp_path):
    """Only Debian's /usr/bin/pdsh wrapper reads /etc/pdsh/rcmd_default; another pdsh does not."""
    from preflight.facts import FACTS

    bindir, etc = tmp_path / "bin", tmp_path / "etc"
    bindir.mkdir()
    (etc / "pdsh").mkdir(parents=True)
    (etc / "pdsh" / "rcmd_default").write_text("ssh\n")
    (bindir / "pdsh").write_text("#!/bin/sh\nprintf '%s' " + shlex.quote(DEBIAN_PDSH_V) + "\n")
    (bindir / "pdsh").chmod(0o755)
    setup = f"mount -t overlay overlay -o lowerdir={etc}:/etc /etc && PATH={bindir}:/usr/bin:/bin exec bash -c \"$0\""
    done = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", setup, FACTS["tools.pdsh"].command],
                          capture_output=True, text=True, timeout=60)
    pdsh = system.parse_pdsh(done.stdout)
    assert pdsh.default_file is None and pdsh.site_default == "rsh", done.stdout


@pytest.mark.skipif(not _can_overlay_etc(), reason="needs root, unshare -m and overlayfs")
@pytest.mark.parametrize("rcmd_default, version, expected", [
    (None, DEBIAN_PDSH_V, system.Pdsh("@", ("ssh", "rsh", "exec"), "rsh", None)),
    ("ssh\n", DEBIAN_PDSH_V, system.Pdsh("@", ("ssh", "rsh", "exec"), "rsh", "ssh")),
    ("", NO_SSH_PDSH_V, system.Pdsh("@", ("rsh", "exec"), "rsh", None)),
    ("absent", "", None),
])
def test_pdsh_fact_command_reads_version_and_debians_default_file(tmp_path, rcmd_default, version, expected):
    """The probe's own command, run by bash with a pdsh that prints the captured bytes, and in a
    private mount namespace an /etc/pdsh/rcmd_default (an overlay on /etc; the real one is untouched)."""
    from preflight.facts import FACTS

    bindir, etc = tmp_path / "bin", tmp_path / "etc"
    bindir.mkdir()
    (etc / "pdsh").mkdir(parents=True)
    if rcmd_default not in (None, "absent"):
        (etc / "pdsh" / "rcmd_default").write_text(rcmd_default)
    if rcmd_default != "absent":
        (bindir / "pdsh").write_text("#!/bin/sh\n[ \"$1\" = -V ] && printf '%s' " + shlex.quote(version) + "\n")
        (bindir / "pdsh").chmod(0o755)
        (bindir / "pdsh.bin").write_text("")  # Debian's wrapper sits beside its binary
    setup = f"mount -t overlay overlay -o lowerdir={etc}:/etc /etc && PATH={bindir}:/usr/bin:/bin exec bash -c \"$0\""
    done = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", setup, FACTS["tools.pdsh"].command],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode in FACTS["tools.pdsh"].ok_rc, done.stderr
    pdsh = system.parse_pdsh(done.stdout)
    if expected is None:
        assert pdsh is None
    else:
        assert pdsh == dataclasses_replace(expected, path=str(bindir / "pdsh"))
        assert pdsh.site_default == (expected.default_file or "rsh")


def test_ip_addr_text_garbage_is_a_parse_error():
    assert_parse_error(parse_ip_addr, IP_TEXT_MARK + "\nBusyBox v1.36: applet not found\n")
    assert parse_ip_addr(IP_TEXT_MARK + "\n") == {}


def test_ip_addr_text_reads_each_address_scope():
    """The scope was never read (a lazy match before an optional group): a scope link address outside
    fe80::/10 and 169.254/16 (Cilium's cilium_host /32) counted as configured, unlike the JSON form."""
    text = (IP_TEXT_MARK + "\n5: cilium_host@cilium_net: <BROADCAST,MULTICAST,NOARP,UP,LOWER_UP> mtu 1500 qdisc noqueue "
            "state UP group default qlen 1000\n    link/ether aa:bb:cc:dd:ee:ff brd ff:ff:ff:ff:ff:ff\n"
            "    inet 10.9.9.9/32 scope link cilium_host\n       valid_lft forever preferred_lft forever\n"
            "    inet 172.17.0.2/16 brd 172.17.255.255 scope global cilium_host\n")
    [iface] = parse_ip_addr(text).values()
    assert iface.name == "cilium_host" and iface.link_local == ("10.9.9.9/32",) and iface.addresses == ("172.17.0.2/16",)
