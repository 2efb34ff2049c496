"""Standby replicas: hot copies of a task's store on clients other than its active."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction

from lakestate.task_id import TaskId


def standbys(
    tasks: Sequence[TaskId],
    clients: Sequence[str],
    capacities: Mapping[str, int],
    active: Mapping[TaskId, str],
    warmup: Mapping[TaskId, frozenset[str]],
    previous_standby: Mapping[TaskId, frozenset[str]],
    lag: Callable[[TaskId, str], int | None],
    count: int,
) -> dict[TaskId, frozenset[str]]:
    """``count`` standbys per task (fewer when there are not enough other clients).

    Never on the task's active or warmup clients. Preferred, in order: a previous standby
    (stickiness), a client holding state (least lag first), the least loaded client (actives
    plus standbys per capacity unit, counted as they are placed, tasks in order), then by
    name. A former active that still holds the state thus becomes the standby of a task that
    moved to its standby (Kafka's swap).
    """
    if count == 0:
        return {}
    load = {c: 0 for c in clients}
    for c in active.values():
        load[c] += 1
    placed: dict[TaskId, frozenset[str]] = {}
    for t in tasks:
        taken = {active[t], *warmup.get(t, ())}
        before = previous_standby.get(t, frozenset())

        def key(c: str, t: TaskId = t, before: frozenset[str] = before) -> tuple:
            held = lag(t, c)
            return (
                c not in before,
                held is None,
                0 if held is None else held,
                Fraction(load[c], capacities[c]),
                c,
            )

        chosen = sorted((c for c in clients if c not in taken), key=key)[:count]
        for c in chosen:
            load[c] += 1
        placed[t] = frozenset(chosen)
    return placed
