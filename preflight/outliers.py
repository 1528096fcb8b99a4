"""Which hosts are the outliers: the cluster checks' shared question.

Hosts are grouped by the value they report; the value most of them share is taken as the
intended one, and every other group is named.  A "missing" value (unset, not installed,
does not resolve) never wins a tie, so a half-configured cluster points at the hosts that
lack the setting rather than at the ones that have it.  Two values held by equally many
hosts (two nodes, two interface names) leave no majority: every host is named, none is
blamed by the order of the inventory.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Hashable

from .hostlist import fold


@dataclass(frozen=True)
class Split:
    majority: Hashable  # None when tied
    agreeing: tuple[str, ...]  # () when tied
    others: dict  # value -> hosts, every group but the majority's (every group when tied)
    tied: bool = False

    @property
    def outliers(self) -> tuple[str, ...]:
        return tuple(sorted(h for hosts in self.others.values() for h in hosts))

    @property
    def unanimous(self) -> bool:
        return not self.others

    def describe(self, fmt=lambda value, hosts: f"{fold(hosts)}: {value}") -> str:
        """``node-03: ens3; node-[05-06]: eth1`` — the minority groups (all groups when tied)."""
        return "; ".join(fmt(value, hosts) for value, hosts in self.others.items())

    def versus(self, fmt=lambda hosts, value: f"{fold(hosts)} have {value}", lead=", while ") -> str:
        """What the rest agree on, to follow :meth:`describe`: ``, while node-[01-02] have eth0``;
        when tied, that no value is held by most nodes."""
        if self.tied:
            return " (no majority: as many nodes have one value as another)"
        return lead + fmt(self.agreeing, self.majority)


def split(values: dict[str, Hashable], missing: Hashable = None) -> Split:
    """``values`` is {host: value}; ``missing`` is the value that means "not set"."""
    groups: dict = defaultdict(list)
    for host, value in values.items():
        groups[value].append(host)

    def weight(v):
        return len(groups[v]), v != missing

    ranked = sorted(groups, key=weight, reverse=True)
    if len(ranked) > 1 and weight(ranked[0]) == weight(ranked[1]):
        return Split(None, (), dict(groups), tied=True)
    majority = ranked[0]
    return Split(majority, tuple(groups[majority]), {v: hs for v, hs in groups.items() if v != majority})
