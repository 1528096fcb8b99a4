"""Which hosts are the outliers: the cluster checks' shared question.

Hosts are grouped by the value they report; the value most of them share is taken as the
intended one, and every other group is named.  A "missing" value (unset, not installed,
does not resolve) never wins a tie, so a half-configured cluster points at the hosts that
lack the setting rather than at the ones that have it.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Hashable

from .hostlist import fold


@dataclass(frozen=True)
class Split:
    majority: Hashable
    agreeing: tuple[str, ...]
    others: dict  # value -> hosts, every group but the majority's

    @property
    def outliers(self) -> tuple[str, ...]:
        return tuple(sorted(h for hosts in self.others.values() for h in hosts))

    @property
    def unanimous(self) -> bool:
        return not self.others

    def describe(self, fmt=lambda value, hosts: f"{fold(hosts)}: {value}") -> str:
        """``node-03: ens3; node-[05-06]: eth1`` — the minority groups, for a message."""
        return "; ".join(fmt(value, hosts) for value, hosts in self.others.items())


def split(values: dict[str, Hashable], missing: Hashable = None) -> Split:
    """``values`` is {host: value}; ``missing`` is the value that means "not set"."""
    groups: dict = defaultdict(list)
    for host, value in values.items():
        groups[value].append(host)
    majority = max(groups, key=lambda v: (len(groups[v]), v != missing))
    return Split(majority, tuple(groups[majority]), {v: hs for v, hs in groups.items() if v != majority})
