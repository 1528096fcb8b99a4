"""preflight.hostlist: expand/fold node-set ranges (ClusterShell and Ansible syntaxes)."""

from __future__ import annotations

import random

import pytest

from preflight.hostlist import MAX_NAMES, HostlistError, expand, fold, natural_key, natural_sorted


# ------------------------------------------------------------------------------ expand: basics

def test_plain_name():
    assert expand("node01") == ["node01"]
    assert expand("localhost") == ["localhost"]
    assert expand("10.0.0.1") == ["10.0.0.1"]


def test_design_example():
    names = expand("node[01-16,20]")
    assert names == [f"node{i:02d}" for i in range(1, 17)] + ["node20"]
    assert len(names) == 17


def test_single_value_in_brackets():
    assert expand("node[7]") == ["node7"]
    assert expand("node[07]") == ["node07"]


def test_range_in_the_middle_and_suffix():
    assert expand("gpu[1-3].example.com") == ["gpu1.example.com", "gpu2.example.com", "gpu3.example.com"]
    assert expand("[1-2]node") == ["1node", "2node"]


def test_ip_range():
    assert expand("10.0.0.[2-4]") == ["10.0.0.2", "10.0.0.3", "10.0.0.4"]


def test_pattern_order_is_kept():
    assert expand("n[3,1,2]") == ["n3", "n1", "n2"]


def test_duplicates_are_removed_keeping_the_first():
    assert expand("n[1-3,2]") == ["n1", "n2", "n3"]
    assert expand("n[1-2],n1,n[0-1]") == ["n1", "n2", "n0"]


def test_whitespace_around_items_is_ignored():
    assert expand("n[1, 3 - 4]") == ["n1", "n3", "n4"]
    assert expand(" a , b ") == ["a", "b"]


# ------------------------------------------------------------------------------ padding

@pytest.mark.parametrize(
    "pattern, expected",
    [
        ("n[01-03]", ["n01", "n02", "n03"]),
        ("n[1-3]", ["n1", "n2", "n3"]),
        ("n[08-10]", ["n08", "n09", "n10"]),
        ("n[8-10]", ["n8", "n9", "n10"]),
        ("n[1-10]", [f"n{i}" for i in range(1, 11)]),
        ("n[001-003]", ["n001", "n002", "n003"]),
        ("n[001-3]", ["n001", "n002", "n003"]),  # padding comes from the lower bound
        ("n[098-101]", ["n098", "n099", "n100", "n101"]),
        ("n[09-100]", ["n09"] + [f"n{i}" for i in range(10, 101)]),
        ("n[0-2]", ["n0", "n1", "n2"]),
        ("n[00-02]", ["n00", "n01", "n02"]),
        ("n[10-12]", ["n10", "n11", "n12"]),
        ("n[01,3,005]", ["n01", "n3", "n005"]),
    ],
)
def test_padding(pattern, expected):
    assert expand(pattern) == expected


def test_padding_per_item():
    assert expand("n[01-02,7-8]") == ["n01", "n02", "n7", "n8"]


# ------------------------------------------------------------------------------ steps and syntaxes

@pytest.mark.parametrize(
    "pattern, expected",
    [
        ("node[1-10/3]", ["node1", "node4", "node7", "node10"]),
        ("node[1-10/2]", ["node1", "node3", "node5", "node7", "node9"]),
        ("node[01-10/4]", ["node01", "node05", "node09"]),
        ("node[1-1/5]", ["node1"]),
        ("node[1:10:2]", ["node1", "node3", "node5", "node7", "node9"]),
        ("node[01:16]", [f"node{i:02d}" for i in range(1, 17)]),
        ("node[1:3]", ["node1", "node2", "node3"]),
        ("node[0:9:3]", ["node0", "node3", "node6", "node9"]),
        ("node[1:3,7-8]", ["node1", "node2", "node3", "node7", "node8"]),
        ("node[1:2:1]", ["node1", "node2"]),
    ],
)
def test_steps_and_both_syntaxes(pattern, expected):
    assert expand(pattern) == expected


def test_both_syntaxes_agree():
    assert expand("n[01:16]") == expand("n[01-16]")
    assert expand("n[1:20:3]") == expand("n[1-20/3]")


@pytest.mark.parametrize(
    "pattern, expected",
    [
        ("host[a:c]", ["hosta", "hostb", "hostc"]),
        ("host[a-c]", ["hosta", "hostb", "hostc"]),
        ("host[A:C]", ["hostA", "hostB", "hostC"]),
        ("host[a:f:2]", ["hosta", "hostc", "hoste"]),
        ("host[x]", ["hostx"]),
        ("db-[a:b]-[1:2]", ["db-a-1", "db-a-2", "db-b-1", "db-b-2"]),
    ],
)
def test_alphabetic_ranges(pattern, expected):
    assert expand(pattern) == expected


# ------------------------------------------------------------------------------ products

def test_cartesian_product_first_bracket_outermost():
    assert expand("rack[1-2]-npu[0-1]") == ["rack1-npu0", "rack1-npu1", "rack2-npu0", "rack2-npu1"]


def test_three_dimensions():
    names = expand("r[1-2]c[1-3]n[01-04]")
    assert len(names) == 2 * 3 * 4
    assert names[0] == "r1c1n01" and names[-1] == "r2c3n04"
    assert names[:5] == ["r1c1n01", "r1c1n02", "r1c1n03", "r1c1n04", "r1c2n01"]


def test_adjacent_brackets():
    assert expand("n[1-2][a:b]") == ["n1a", "n1b", "n2a", "n2b"]


def test_top_level_commas_join_patterns():
    names = expand("node[01-16,20],rack[1-2]-npu[0-1]")
    assert len(names) == 21  # as ClusterShell gives
    assert names[-4:] == ["rack1-npu0", "rack1-npu1", "rack2-npu0", "rack2-npu1"]
    assert expand("a,b,c") == ["a", "b", "c"]


# ------------------------------------------------------------------------------ errors

@pytest.mark.parametrize(
    "pattern, fragment",
    [
        ("node[1-3", "unbalanced brackets"),
        ("node1-3]", "unbalanced brackets"),
        ("node]1[", "unbalanced brackets"),
        ("node[[1-2]]", "nested '['"),
        ("node[]", "empty range"),
        ("node[1,]", "empty range"),
        ("node[,1]", "empty range"),
        ("node[1-]", "empty range bound"),
        ("node[-3]", "empty range bound"),
        ("node[:3]", "empty range bound"),
        ("node[1:]", "empty range bound"),
        ("node[5-1]", "reversed range '5-1'"),
        ("node[5:1]", "reversed range '5:1'"),
        ("node[f:a]", "reversed range 'f:a'"),
        ("node[1-x]", "range '1-x' mixes a number and a letter"),
        ("node[1-xy]", "non-numeric range bound 'xy'"),
        ("node[x-1]", "range 'x-1' mixes a letter and a number"),
        ("node[ab:cd]", "non-numeric range bound 'ab'"),
        ("node[a:10]", "range 'a:10' mixes a letter and a number"),
        ("node[1:b]", "range '1:b' mixes a number and a letter"),
        ("node[foo]", "non-numeric range bound 'foo'"),
        ("node[1.5-3]", "non-numeric range bound '1.5'"),
        ("node[a:F]", "mixes upper and lower case"),
        ("node[1-10/0]", "zero step"),
        ("node[1:10:0]", "zero step"),
        ("node[1-10/x]", "step 'x'"),
        ("node[1-10/-2]", "step '-2'"),
        ("node[1:10:]", "step ''"),
        ("node[1:2:3:4]", "too many ':'"),
        ("node[1-2-3]", "too many '-'"),
        ("node[5/2]", "step without a range"),
        ("node[1-100001]", "more than 100000 names"),
        ("n[1-1000]x[1-1000]", "more than 100000 names"),
        ("n[1-60000],m[1-60000]", "more than 100000 names"),
        ("n[0-99999999999999]", "more than 100000 names"),
        ("", "empty pattern"),
        ("   ", "empty pattern"),
        ("a,,b", "empty name"),
        ("a,", "empty name"),
    ],
)
def test_errors(pattern, fragment):
    with pytest.raises(HostlistError) as info:
        expand(pattern)
    message = str(info.value)
    assert fragment in message
    assert repr(pattern) in message  # the message names the pattern
    assert "\n" not in message


def test_error_is_a_value_error():
    with pytest.raises(ValueError):
        expand("n[2-1]")


def test_non_string_pattern():
    with pytest.raises(HostlistError):
        expand(None)  # type: ignore[arg-type]


def test_exactly_the_limit_is_allowed():
    assert len(expand(f"n[1-{MAX_NAMES}]")) == MAX_NAMES
    assert len(expand("n[1-50000],m[1-50000]")) == MAX_NAMES


def test_huge_range_fails_fast():
    import time

    start = time.monotonic()
    with pytest.raises(HostlistError):
        expand("n[0-999999999999999999]")
    assert time.monotonic() - start < 1


# ------------------------------------------------------------------------------ fold

@pytest.mark.parametrize(
    "names, expected",
    [
        (["node01", "node02", "node03", "node07"], "node[01-03,07]"),
        (["node1"], "node1"),
        (["node1", "node2"], "node[1-2]"),
        (["node1", "node3"], "node[1,3]"),
        (["node08", "node09", "node10"], "node[08-10]"),
        (["node9", "node10"], "node[9-10]"),
        (["n1", "n01"], "n[1,01]"),
        (["node10", "node9", "node1", "node2"], "node[1-2,9-10]"),
        (["b", "a", "c"], "a,b,c"),
        (["localhost", "node2", "node1"], "localhost,node[1-2]"),
        (["node1", "node1", "node2"], "node[1-2]"),
        (["rack1-npu0", "rack1-npu1", "rack2-npu0", "rack2-npu1"], "rack[1-2]-npu[0-1]"),
        (["rack1-npu0", "rack1-npu1", "rack2-npu0"], "rack1-npu[0-1],rack2-npu0"),
        (["10.0.0.1", "10.0.0.2", "10.0.0.3"], "10.0.0.[1-3]"),
        (["node-01.example.com", "node-02.example.com"], "node-[01-02].example.com"),
        ([], ""),
    ],
)
def test_fold(names, expected):
    assert fold(names) == expected


def test_fold_accepts_any_iterable():
    assert fold(iter(["n2", "n1"])) == "n[1-2]"
    assert fold({"n2", "n1"}) == "n[1-2]"


def test_fold_sorts_groups_naturally():
    assert fold(["node10", "gpu2", "node2", "gpu10", "a"]) == "a,gpu[2,10],node[2,10]"


def test_fold_mixed_padding_widths():
    names = ["n098", "n099", "n100", "n101"]
    assert fold(names) == "n[098-101]"
    assert expand(fold(names)) == names


@pytest.mark.parametrize(
    "pattern",
    [
        "node[01-16,20]",
        "node[1-10]",
        "node[08-10]",
        "node[001-100]",
        "node[0-9]",
        "node[1,3,5]",
        "node[1-3,5-7,9]",
        "node[09-100]",
        "rack[1-2]-npu[0-1]",
        "r[1-4]c[1-2]n[01-16]",
        "node[01-16,20],rack[1-2]-npu[0-1]",
        "10.0.0.[1-254]",
        "a,b,node[1-2]",
        "gpu[1-3].example.com",
        "localhost",
        "node7",
        "n[1,01]",
        "x[1-2]y,x[1-2]z",
    ],
)
def test_fold_expand_round_trip_canonical(pattern):
    assert fold(expand(pattern)) == pattern


@pytest.mark.parametrize(
    "pattern",
    [
        "node[1-10/3]",
        "node[1:10:2]",
        "node[01:16]",
        "node[5,3,1,2,4]",
        "host[a:f]",
        "n[1-3,2-5]",
        "rack[1-3]-npu[0-7/2],rack9-npu1",
        "x[1-3]y[1-3],x4y[1-2]",
        "n[8-12],n[08-12]",
    ],
)
def test_fold_expand_round_trip_as_sets(pattern):
    names = expand(pattern)
    folded = fold(names)
    assert sorted(expand(folded)) == sorted(names)
    assert fold(expand(folded)) == folded  # the folded form is a fixed point


def test_fold_random_round_trips():
    rng = random.Random(1234)
    for _ in range(300):
        names = set()
        for _ in range(rng.randint(1, 40)):
            shape = rng.choice(["node{}", "node{:02d}", "r{}-n{}", "r{:02d}-n{:03d}", "gpu{}.lab", "x", "{}"])
            args = [rng.randint(0, 120) for _ in range(shape.count("{"))]
            names.add(shape.format(*args))
        folded = fold(names)
        assert sorted(expand(folded)) == sorted(names), folded
        assert fold(expand(folded)) == folded


def test_fold_large_set_is_compact():
    names = expand("node[0001-4096]")
    assert fold(names) == "node[0001-4096]"
    assert fold(reversed(names)) == "node[0001-4096]"


# ------------------------------------------------------------------------------ natural sort

def test_natural_sorted():
    assert natural_sorted(["node10", "node2", "node1", "gpu1", "node02"]) == [
        "gpu1", "node1", "node2", "node02", "node10",
    ]


def test_natural_key_handles_mixed_shapes():
    names = ["10.0.0.10", "10.0.0.9", "a", "1", "a1b2", "a1b10", "a01b3", ""]
    assert natural_sorted(names) == ["", "1", "10.0.0.9", "10.0.0.10", "a", "a1b2", "a1b10", "a01b3"]
    assert natural_key("n2") < natural_key("n10")


# ------------------------------------------------------------------------------ against ClusterShell

@pytest.mark.parametrize(
    "pattern",
    ["node[01-16,20]", "rack[1-2]-npu[0-1]", "node[1-10/3]", "node[08-10]", "n[1-3,7],m[01-02]",
     "r[1-3]c[1-2]n[01-04]", "10.0.0.[1-20]"],
)
def test_matches_clustershell_when_installed(pattern):
    nodeset = pytest.importorskip("ClusterShell.NodeSet")
    theirs = list(nodeset.NodeSet(pattern, resolver=nodeset.RESOLVER_NOGROUP))
    assert sorted(expand(pattern)) == sorted(theirs)
    assert sorted(expand(fold(theirs))) == sorted(theirs)
