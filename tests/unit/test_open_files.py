"""The controller's open-files limit (preflight.gather.raise_open_files_limit) and what a host
gets when the controller runs out of descriptors anyway (preflight.transport.ssh)."""

from __future__ import annotations

import errno
import json
import subprocess
import sys

import resource

import pytest

from preflight.transport.ssh import _translate

# Run apart: a lowered hard limit cannot be raised again by an unprivileged process.
_PROBE = """
import json, resource, sys
from preflight.gather import raise_open_files_limit
soft, hard, hosts = (int(a) for a in sys.argv[1:])
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
warning = raise_open_files_limit(hosts)
print(json.dumps({"limit": resource.getrlimit(resource.RLIMIT_NOFILE), "warning": warning}))
"""


def limits_after(soft: int, hard: int, hosts: int) -> dict:
    machine_hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if machine_hard != resource.RLIM_INFINITY and machine_hard < hard:
        pytest.skip(f"this machine's open-files hard limit ({machine_hard}) is below {hard}")
    out = subprocess.run([sys.executable, "-c", _PROBE, str(soft), str(hard), str(hosts)],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def test_a_low_soft_limit_is_raised_to_what_the_hosts_need():
    got = limits_after(1024, 8192, 1000)
    assert got == {"limit": [256 + 4 * 1000, 8192], "warning": None}


def test_a_soft_limit_already_high_enough_is_left_alone():
    assert limits_after(8000, 8192, 1000) == {"limit": [8000, 8192], "warning": None}
    assert limits_after(300, 8192, 10) == {"limit": [300, 8192], "warning": None}


def test_a_hard_limit_below_the_need_goes_as_far_as_it_can_and_says_so():
    got = limits_after(1024, 2048, 1000)
    assert got["limit"] == [2048, 2048]
    w = got["warning"]
    assert "2048" in w and "4256" in w and "1000 hosts" in w and "Too many open files" in w
    assert "ulimit -n 4256" in w


def test_running_out_of_descriptors_is_named_as_the_controllers_problem():
    err = _translate(OSError(errno.EMFILE, "Too many open files"), "node-07 (10.0.0.7)", 10)
    assert err.kind == "config"
    assert str(err) == ("node-07 (10.0.0.7): the controller ran out of open files (Too many open "
                        "files); raise `ulimit -n` where the checker runs")
    other = _translate(OSError(errno.EHOSTUNREACH, "No route to host"), "node-07", 10)
    assert (other.kind, str(other)) == ("unreachable", "node-07: No route to host")


@pytest.mark.parametrize("hosts", [1, 64])
def test_small_runs_need_no_more_than_a_default_limit(hosts):
    assert limits_after(1024, 1024, hosts)["warning"] is None
