"""Co-partitioning (Kafka's copartition groups and CopartitionedTopicsEnforcer).

A join reads its two sides in one task: partition ``p`` of one side meets partition ``p``
of the other, so both sides must be partitioned alike, the same key in the same
partition number. The DSL records, per join, the source nodes feeding each side; ``build()``
turns them into topics (``CopartitionGroup``) and checks that both sides run in one
sub-topology. The partition counts are only known at run time: the engine calls ``check``
while it plans, before anything is committed. A repartition topic in a group takes the
external topics' partition count when the engine creates it, as Kafka sizes it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from lakestate.errors import TopologyException


@dataclass(frozen=True)
class CopartitionGroup:
    """The topics of one join's two sides. Topics are as the sub-topology names them:
    external names, or repartition topic suffixes (listed in ``internal`` too)."""

    join_node: str
    left: tuple[str, ...]
    right: tuple[str, ...]
    internal: frozenset[str] = frozenset()

    @property
    def topics(self) -> tuple[str, ...]:
        return self.left + tuple(t for t in self.right if t not in self.left)


def check(
    group: CopartitionGroup,
    partitions: Mapping[str, int],
    real_name: Callable[[str], str],
) -> None:
    """Raise a TopologyException naming both sides when their topics (real names through
    ``real_name``) do not all have the same number of partitions in ``partitions``."""
    counts = {t: partitions[real_name(t)] for t in group.topics if real_name(t) in partitions}
    if len(set(counts.values())) <= 1:
        return

    def side(topics: tuple[str, ...]) -> str:
        return ", ".join(
            f"{real_name(t)!r} ({counts[t]} partitions)" for t in topics if t in counts
        )

    raise TopologyException(
        f"join {group.join_node}: topics not co-partitioned: {side(group.left)} joined with "
        f"{side(group.right)}; both sides of a join must have the same number of partitions "
        "(the same key in the same partition number)"
    )


def external_count(
    group: CopartitionGroup, partitions: Mapping[str, int], real_name: Callable[[str], str]
) -> int | None:
    """The partition count a repartition topic of ``group`` must have: its external topics'
    (None when the group has none, or they disagree: ``check`` names that)."""
    counts = {
        partitions[real_name(t)]
        for t in group.topics
        if t not in group.internal and real_name(t) in partitions
    }
    return counts.pop() if len(counts) == 1 else None
