"""Who pings whom, and when: rounds of disjoint node pairs.

``all``: a round-robin tournament (the circle method).  With N nodes (one idle per round
when N is odd), N-1 rounds (N rounds when odd) cover every pair exactly once; within a
round every node is in at most one pair, and a pair pings both ways, so no NPU is asked to
ping twice at once.  ``ring``: one round, each node pinging its successor.
"""

from __future__ import annotations

MODES = ("all", "ring", "none")


def tournament(names: list[str]) -> list[list[tuple[str, str]]]:
    """Rounds of unordered disjoint pairs covering every pair of ``names`` exactly once."""
    players: list[str | None] = list(names)
    if len(players) % 2:
        players.append(None)  # the node paired with None sits the round out
    m = len(players)
    rounds = []
    for _ in range(m - 1):
        pairs = []
        for i in range(m // 2):
            a, b = players[i], players[m - 1 - i]
            if a is not None and b is not None:
                pairs.append((a, b))
        rounds.append(pairs)
        players = [players[0], players[-1], *players[1:-1]]  # rotate all but the first
    return [r for r in rounds if r]


def ping_rounds(names: list[str], mode: str) -> list[list[tuple[str, str]]]:
    """Rounds of directed (source, destination) pings."""
    if mode not in MODES:
        raise ValueError(f"--ping must be one of {', '.join(MODES)}")
    if mode == "none" or len(names) < 2:
        return []
    if mode == "ring":
        if len(names) == 2:
            return [[(names[0], names[1]), (names[1], names[0])]]
        return [[(names[i], names[(i + 1) % len(names)]) for i in range(len(names))]]
    return [[p for a, b in pairs for p in ((a, b), (b, a))] for pairs in tournament(names)]
