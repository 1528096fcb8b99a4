"""preflight.outliers.split: which hosts a cluster check names."""

import pytest

from preflight.outliers import split

MISSING = "unset"


@pytest.mark.parametrize("values, majority, outliers", [
    ({"a": "x"}, "x", ()),
    ({"a": "x", "b": "x"}, "x", ()),
    ({"a": "x", "b": "x", "c": "y"}, "x", ("c",)),
    ({"c": "y", "a": "x", "b": "x"}, "x", ("c",)),  # inventory order does not matter
    ({"a": "x", "b": "y", "c": "z", "d": "x"}, "x", ("b", "c")),
    # "missing" never wins a tie: the hosts without the setting are the odd ones out
    ({"a": MISSING, "b": "x"}, "x", ("a",)),
    ({"a": "x", "b": MISSING}, "x", ("b",)),
    ({"a": MISSING, "b": MISSING, "c": "x"}, MISSING, ("c",)),  # but a real majority does
    ({"a": MISSING, "b": MISSING}, MISSING, ()),
    ({"a": MISSING, "b": MISSING, "c": "x", "d": "x"}, "x", ("a", "b")),
])
def test_majority_and_outliers(values, majority, outliers):
    sides = split(values, missing=MISSING)
    assert not sides.tied
    assert sides.majority == majority and sides.outliers == outliers
    assert sides.unanimous == (not outliers)
    assert sorted(sides.agreeing + sides.outliers) == sorted(values)


@pytest.mark.parametrize("values", [
    {"a": "x", "b": "y"},
    {"b": "y", "a": "x"},
    {"a": "x", "b": "y", "c": "x", "d": "y"},
    {"a": "x", "b": "y", "c": "z"},
    {"a": "x", "b": "x", "c": "y", "d": "y", "e": "z"},  # the two biggest groups tie
])
def test_a_tie_names_every_host_and_no_majority(values):
    sides = split(values, missing=MISSING)
    assert sides.tied and sides.majority is None and sides.agreeing == ()
    assert sides.outliers == tuple(sorted(values)) and not sides.unanimous
    assert "no majority" in sides.versus()
    for value in set(values.values()):
        assert f": {value}" in sides.describe()


def test_describe_and_versus_read_as_one_sentence():
    sides = split({"node-01": "eth0", "node-02": "eth0", "node-03": "ens3"})
    assert sides.describe() + sides.versus() == "node-03: ens3, while node-[01-02] have eth0"
    assert sides.versus(lambda hosts, v: f"{v} elsewhere", lead=" but ") == " but eth0 elsewhere"
