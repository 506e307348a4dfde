"""Which node pairs of a lab run at the same time: a round-robin tournament.

Every ordered (initiator, responder) pair of N nodes runs once. Two pairs that share no node
can run together, so the pairs go in rounds in which each node is in at most one pair. The
circle method (fix one node, rotate the others) gives N-1 rounds of N/2 unordered pairs for
even N (N rounds with a bye for odd N); each round runs twice, once per direction, so N nodes
take 2(N-1) rounds (2N for odd N) instead of N(N-1) pair runs one after another.

    rounds = round_robin(["n1", "n2", "n3", "n4"])   # [[("n1","n4"), ("n2","n3")], ...]
    estimate(12, pair_seconds=40.0)                  # rounds vs one pair at a time
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Estimate", "estimate", "round_robin"]


def round_robin(nodes: Sequence[str]) -> list[list[tuple[str, str]]]:
    """Rounds of ordered (initiator, responder) pairs: every ordered pair of distinct nodes
    exactly once, no node twice in a round."""
    names = list(dict.fromkeys(nodes))
    if len(names) < 2:
        return []
    ring: list[str | None] = list(names)
    if len(ring) % 2:
        ring.append(None)  # the bye: whoever meets it sits the round out
    n = len(ring)
    forward: list[list[tuple[str, str]]] = []
    backward: list[list[tuple[str, str]]] = []
    for r in range(n - 1):
        pairs = []
        for i in range(n // 2):
            a, b = ring[i], ring[n - 1 - i]
            if a is not None and b is not None:
                # Alternate who initiates so each direction lands in a different half.
                pairs.append((a, b) if (r + i) % 2 == 0 else (b, a))
        forward.append(pairs)
        backward.append([(b, a) for a, b in pairs])
        ring = [ring[0], ring[-1], *ring[1:-1]]
    return forward + backward


@dataclass(frozen=True)
class Estimate:
    nodes: int
    pairs: int           # ordered pairs: N(N-1)
    rounds: int          # 2(N-1), or 2N for odd N
    sequential_s: float  # one pair at a time
    rounds_s: float      # pairs of a round at once

    @property
    def speedup(self) -> float:
        return self.sequential_s / self.rounds_s if self.rounds_s else 0.0


def estimate(nodes: int, pair_seconds: float, round_overhead_s: float = 0.0) -> Estimate:
    """What a lab of `nodes` nodes takes when every pair takes `pair_seconds`: the schedule is
    built (not just counted) so the figure is the schedule's own. A round lasts as long as its
    slowest pair; with equal pairs that is one pair's time plus `round_overhead_s`."""
    rounds = round_robin([f"n{i}" for i in range(nodes)])
    pairs = sum(len(r) for r in rounds)
    return Estimate(nodes=nodes, pairs=pairs, rounds=len(rounds),
                    sequential_s=pairs * pair_seconds,
                    rounds_s=len(rounds) * (pair_seconds + round_overhead_s))
