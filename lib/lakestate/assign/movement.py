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


def holder(
    task: TaskId,
    clients: Sequence[str],
    previous: str | None,
    lag: Lag,
    caught_up: Callable[[TaskId, str], bool],
) -> str:
    """Where ``task`` runs when it cannot run on its target: the previous active when it is
    caught up (stickiness), else the caught-up client with the least lag (ties by name); when
    no client is caught up, the least-lagging client, ties going to the previous active, then
    by name (None, no state, lags the most).

    On its own output this gives the same client again: it only ever picks a previous active
    that is caught up or least lagging.
    """
    ready = [c for c in clients if caught_up(task, c)]
    if ready:
        if previous in ready:
            return previous
        return min(ready, key=lambda c: (_lag_key(lag(task, c)), c))
    least = min(_lag_key(lag(task, c)) for c in clients)
    if previous in clients and _lag_key(lag(task, previous)) == least:
        return previous
    return min(c for c in clients if _lag_key(lag(task, c)) == least)


def can_run_on(
    task: TaskId,
    client: str,
    clients: Sequence[str],
    lag: Lag,
    caught_up: Callable[[TaskId, str], bool],
) -> bool:
    """Whether ``client`` may be ``task``'s active now: it is caught up, or no client is and
    it lags no more than any other."""
    if caught_up(task, client):
        return True
    if any(caught_up(task, c) for c in clients):
        return False
    return _lag_key(lag(task, client)) == min(_lag_key(lag(task, c)) for c in clients)


def under_way(
    tasks: Sequence[TaskId],
    clients: Sequence[str],
    previous_warmup: Mapping[TaskId, frozenset[str]],
    budget: int,
) -> dict[TaskId, str]:
    """The previous assignment's warmups that may go on: of clients still present, one per
    task (the first by name), for at most ``budget`` tasks (the first by task). An assignment
    made with the same budget passes whole."""
    going: dict[TaskId, str] = {}
    for t in tasks:
        present = sorted(c for c in previous_warmup.get(t, ()) if c in clients)
        if present and len(going) < budget:
            going[t] = present[0]
    return going


def warmups(
    pending: Sequence[TaskId],
    target: Mapping[TaskId, str],
    going: Mapping[TaskId, str],
    caught_up_count: Callable[[TaskId], int],
    budget: int,
) -> dict[TaskId, frozenset[str]]:
    """A warmup on the target of the first ``budget`` pending tasks.

    Pending tasks are those whose active is not their target. Warmups already under way
    (``going``: the target was warming up in the previous assignment, see ``under_way``) come
    first, so a rebalance never drops a
    warmup halfway to start another; then tasks with the fewest caught-up clients (Kafka's
    order: the least available first), then by task.
    """
    order = sorted(
        pending,
        key=lambda t: (going.get(t) != target[t], caught_up_count(t), t),
    )
    return {t: frozenset({target[t]}) for t in order[:budget]}
