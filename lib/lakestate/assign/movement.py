"""Task movement (Kafka's TaskMovement): who is active now, and who warms up to take over.

A task moves to its balanced target at once only when the target is caught up; otherwise it
stays on a caught-up client and the target warms up (restores the task's state) so that a
later, probing, rebalance can move it with no restoration downtime.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from lakestate.task_id import TaskId

Lag = Callable[[TaskId, str], "int | None"]


def _lag_key(lag: int | None) -> float:
    return float("inf") if lag is None else lag


def active_client(
    task: TaskId,
    clients: Sequence[str],
    target: str,
    previous: str | None,
    lag: Lag,
    caught_up: Callable[[TaskId, str], bool],
) -> str:
    """The client that processes ``task`` in this generation.

    The target when it is caught up. Otherwise, when some client is caught up: the previous
    active if it is caught up (stickiness), else the caught-up client with the least lag (ties
    by name). When no client is caught up: the least-lagging client, ties going to the target,
    then the previous active, then by name (None, no state, lags the most).
    """
    if caught_up(task, target):
        return target
    ready = [c for c in clients if caught_up(task, c)]
    if ready:
        if previous in ready:
            return previous
        return min(ready, key=lambda c: (_lag_key(lag(task, c)), c))
    least = min(_lag_key(lag(task, c)) for c in clients)
    for preferred in (target, previous):
        if preferred in clients and _lag_key(lag(task, preferred)) == least:
            return preferred
    return min(c for c in clients if _lag_key(lag(task, c)) == least)


def warmups(
    pending: Sequence[TaskId],
    target: Mapping[TaskId, str],
    previous_warmup: Mapping[TaskId, frozenset[str]],
    caught_up_count: Callable[[TaskId], int],
    budget: int,
) -> dict[TaskId, frozenset[str]]:
    """A warmup on the target of the first ``budget`` pending tasks.

    Pending tasks are those whose active is not their target. Warmups already under way (the
    target warmed up in the previous assignment) come first, so a rebalance never drops a
    warmup halfway to start another; then tasks with the fewest caught-up clients (Kafka's
    order: the least available first), then by task.
    """
    order = sorted(
        pending,
        key=lambda t: (target[t] not in previous_warmup.get(t, ()), caught_up_count(t), t),
    )
    return {t: frozenset({target[t]}) for t in order[:budget]}
