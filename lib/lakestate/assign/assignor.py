"""The task assignor (KIP-441's HighAvailabilityTaskAssignor, as a pure function)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from lakestate.assign.balance import balanced_target
from lakestate.assign.movement import can_run_on, holder, under_way, warmups
from lakestate.assign.standby import standbys
from lakestate.assign.types import Assignment, AssignorConfig, ClientState
from lakestate.task_id import TaskId


def _check(
    tasks: list[TaskId],
    clients: Mapping[str, ClientState],
    previous: Assignment | None,
    config: AssignorConfig,
) -> None:
    if not clients:
        raise ValueError("cannot assign tasks: no clients (an app needs at least one instance)")
    for t in tasks:
        if not isinstance(t, TaskId):
            raise ValueError(f"task {t!r} is not a TaskId (e.g. TaskId(0, 1) for task 0_1)")
    for name, state in clients.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"client name {name!r} must be a non-empty string")
        if not isinstance(state, ClientState):
            raise ValueError(f"client {name!r}: expected a ClientState, not {type(state).__name__}")
        cap = state.capacity
        if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
            raise ValueError(f"client {name!r}: capacity must be an integer >= 1, not {cap!r}")
        for t, lag in state.lags.items():
            if not isinstance(t, TaskId):
                raise ValueError(f"client {name!r}: lag for {t!r}, which is not a TaskId")
            if lag is not None and (isinstance(lag, bool) or not isinstance(lag, int) or lag < 0):
                raise ValueError(
                    f"client {name!r}, task {t}: lag must be None (no state) or an integer"
                    f" >= 0, not {lag!r}"
                )
    if previous is not None and not isinstance(previous, Assignment):
        raise ValueError(f"previous must be an Assignment or None, not {type(previous).__name__}")
    if not isinstance(config, AssignorConfig):
        raise ValueError(f"config must be an AssignorConfig, not {type(config).__name__}")


def _lag_views(
    clients: Mapping[str, ClientState], acceptable_recovery_lag: int
) -> tuple[Callable[[TaskId, str], int | None], Callable[[TaskId, str], bool]]:
    """A client's lag for a task (None: no state), and whether that lag is caught up."""

    def lag(t: TaskId, c: str) -> int | None:
        return clients[c].lag(t)

    def caught_up(t: TaskId, c: str) -> bool:
        held = lag(t, c)
        return held is not None and held <= acceptable_recovery_lag

    return lag, caught_up


def _actives(
    task_list: list[TaskId],
    names: list[str],
    clients: Mapping[str, ClientState],
    previous: Assignment,
    config: AssignorConfig,
    lag: Callable[[TaskId, str], int | None],
    caught_up: Callable[[TaskId, str], bool],
) -> tuple[dict[TaskId, str], dict[TaskId, str], dict[TaskId, str]]:
    """Steps 1-3 of ``assign``: each task's active and target, and the warmups under way."""
    held = {t: holder(t, names, previous.active.get(t), lag, caught_up) for t in task_list}
    going = under_way(task_list, names, previous.warmup, config.max_warmup_replicas)
    target = balanced_target(
        task_list,
        names,
        [clients[c].capacity for c in names],
        caught_up,
        lambda t, c: lag(t, c) is not None,
        lambda t, c: c == held[t] or c == going.get(t),
    )
    active = {
        t: target[t] if can_run_on(t, target[t], names, lag, caught_up) else held[t]
        for t in task_list
    }
    return active, target, going


def assign(
    tasks: Iterable[TaskId],
    clients: Mapping[str, ClientState],
    previous: Assignment | None,
    config: AssignorConfig,
) -> Assignment:
    """The next assignment of ``tasks`` over ``clients``, given the ``previous`` one.

    A client is *caught up* for a task when its lag is at most ``acceptable_recovery_lag``.

    1. Holder (``movement.holder``): where the task runs if not on its target: the previous
       active when caught up, else the least-lagging caught-up client; when no client is
       caught up, the least-lagging client (ties: the previous active, then the name).
    2. Target (``balance.balanced_target``): every client gets within one task of its
       capacity share; among such assignments, the one with the most tasks on caught-up
       clients, then on a sticky client (its holder, or the client warming it up in the
       previous assignment: ``movement.under_way``), then on clients holding state.
    3. Active: the target when it is caught up (or, when no client is, lags the least), else
       the holder. So the active is caught up whenever some client is.
    4. A task whose active is not its target is *pending*: its target gets a warmup, at most
       ``max_warmup_replicas`` in all (warmups under way first). ``probing_rebalance_needed``
       is True iff some task is pending (then at least one warmup was assigned).
    5. Standbys (``standby.standbys``): ``num_standby_replicas`` per task on clients other
       than its active and warmup (fewer when there are not enough clients).

    Deterministic; tasks unknown to ``previous`` and previous clients that left are fine.
    ValueError for no clients, a capacity < 1, a negative lag, or a task that is no TaskId.
    """
    task_list = list(dict.fromkeys(tasks))
    _check(task_list, clients, previous, config)
    task_list.sort()
    names = sorted(clients)
    previous = previous or Assignment(active={})

    lag, caught_up = _lag_views(clients, config.acceptable_recovery_lag)
    active, target, going = _actives(task_list, names, clients, previous, config, lag, caught_up)
    pending = [t for t in task_list if active[t] != target[t]]
    warm = warmups(
        pending,
        target,
        going,
        lambda t: sum(caught_up(t, c) for c in names),
        config.max_warmup_replicas,
    )
    standby = standbys(
        task_list,
        names,
        {c: clients[c].capacity for c in names},
        active,
        warm,
        previous.standby,
        lag,
        config.num_standby_replicas,
    )
    return Assignment(
        active=active, standby=standby, warmup=warm, probing_rebalance_needed=bool(pending)
    )
