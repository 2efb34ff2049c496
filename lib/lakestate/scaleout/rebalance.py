"""The rebalance: the app's next assignment generation, computed when something changed, then fenced.

Steps (``rebalance``):

1. Finish the fence of the latest generation if a crash left it unfenced (a generation is
   in force only once its fence landed: ``scaleout/ownership.py``).
2. Read the configured instances (``scaleout/instances.py``), each instance's newest lag
   report per task (``scaleout/lag_reports.py``), the offsets every task committed (its last
   complete batch in ``_progress``) and the latest generation (``assign/history.py``).
   Everything through delta-rs: no JVM.
3. Compute the next assignment (``lakestate.assign.assign``, the previous generation's as
   ``previous``, each configured instance a client with its lags recomputed against the
   committed offsets now and its capacity) when: there is no generation yet ("first"),
   the configured instances changed ("instances changed"), a warmup caught up or some
   task's set of caught-up instances changed since the generation ("lags changed"), a
   probing rebalance is due ("probing": the generation asked for one and
   ``probing.rebalance.interval.ms`` passed since it), or ``force`` ("requested").
4. Write it as the next generation only when it differs from the latest (else "no
   change": nothing is written), then fence it: every task whose active changed (or that
   is new) gets the new generation as its owner epoch, in one commit to ``_progress``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lakestate.app import App, load_app
from lakestate.assign import AssignorConfig, ClientState, assign
from lakestate.assign import history as generations
from lakestate.assign.history import ConcurrentRebalanceError, Generation
from lakestate.checkpoint import faults
from lakestate.checkpoint.layout import ensure_layout
from lakestate.checkpoint.progress import now_ms as clock
from lakestate.checkpoint.standing import where_tasks_stand
from lakestate.errors import StreamsException
from lakestate.scaleout import instances, lag_reports, ownership
from lakestate.task_id import TaskId
from lakestate.warehouse import Warehouse

__all__ = ["NO_CHANGE", "RebalanceResult", "finish_fence", "rebalance"]

NO_CHANGE = "no change"
#: The fault points (checkpoint/faults.py) before a generation's commit, and between it and
#: its fence.
BEFORE_GENERATION = "rebalance_before_generation"
AFTER_GENERATION = "rebalance_after_generation"
#: How many times a rebalance computes again after another one wrote a generation first.
ATTEMPTS = 5


@dataclass(frozen=True)
class RebalanceResult:
    """What a rebalance did: the latest generation before it (``old``), the one it wrote
    (``new``; None when nothing changed), why it wrote one (``reason``: a generation reason;
    "no change" when it wrote none), why it computed the assignment again when that gave the
    same one (``recomputed``; None otherwise: a scheduled rebalance whose instances' lags
    moved computes again every time, and is no change all the same), whether it wrote one
    (``changed``), the clients' lags it
    computed with (per instance, per task; None: no store) and the tasks whose owner epoch
    it fenced (those of an unfinished earlier fence included)."""

    old: Generation | None
    new: Generation | None
    reason: str
    changed: bool
    lags: dict[str, dict[TaskId, int | None]] = field(default_factory=dict)
    fenced: dict[TaskId, int] = field(default_factory=dict)
    recomputed: str | None = None

    @property
    def current(self) -> Generation | None:
        """The generation in force after the rebalance."""
        return self.new or self.old

    def to_json(self) -> dict[str, Any]:
        return {
            "reason": self.reason,
            "changed": self.changed,
            "recomputed": self.recomputed,
            "old": None if self.old is None else self.old.to_json(),
            "new": None if self.new is None else self.new.to_json(),
            "lags": {
                i: {str(t): lag for t, lag in sorted(by_task.items())}
                for i, by_task in sorted(self.lags.items())
            },
            "fenced": {str(t): e for t, e in sorted(self.fenced.items())},
        }


def finish_fence(warehouse: Warehouse, app: str, generation: Generation) -> dict[TaskId, int]:
    """Put ``generation`` in force: every task whose in-force owner is not its active there
    gets the generation as owner epoch (one commit to ``_progress``; nothing when it is in
    force already). Returns the epochs written."""
    tasks = sorted(generation.assignment.active)
    owners = ownership.owners_in_force(warehouse, app, tasks)
    epochs = {t: generation.number for t in tasks if owners[t] != generation.assignment.active[t]}
    if epochs:
        ownership.write_fence(warehouse.progress_path(app), app, epochs, generation.number)
    return epochs


def rebalance(
    app: str | Path | App,
    warehouse: Warehouse,
    *,
    force: bool = False,
    now_ms: int | None = None,
    say: Callable[[str], None] = print,
) -> RebalanceResult:
    """Compute and put in force the app's next generation when its instances or lags
    changed, a probing rebalance is due, or ``force``; else change nothing (module doc).
    ``app``: the App or the path of its module. ``now_ms``: the time (default: now).
    Another rebalance writing a generation meanwhile: this one computes again from it."""
    if not isinstance(app, App):
        app = load_app(app)
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return _rebalance(app, warehouse, force, now_ms, say)
        except ConcurrentRebalanceError as exc:
            if attempt == ATTEMPTS:
                raise
            say(f"{exc}: computing again")
    raise AssertionError("unreachable")


def _rebalance(
    app: App, warehouse: Warehouse, force: bool, now_ms: int | None, say: Callable[[str], None]
) -> RebalanceResult:
    name = app.name
    now = clock() if now_ms is None else now_ms
    # The config first: a bad one is refused before anything is written.
    configured = instances.instances_of(app)
    try:
        config = AssignorConfig.from_config(app.config)
    except ValueError as exc:
        raise StreamsException(f"app {name}: {exc}") from None
    interval = instances.probing_rebalance_interval_ms(app)
    old = generations.latest(warehouse, name)
    fenced: dict[TaskId, int] = {}
    if old is not None:
        fenced = finish_fence(warehouse, name, old)
        if fenced:
            say(
                f"app {name}: generation {old.number} was not in force (a rebalance stopped "
                f"before its fence): fenced {len(fenced)} tasks"
            )
    layout = ensure_layout(app, warehouse)
    tasks = layout.tasks()
    standing = where_tasks_stand(layout, tasks).committed
    committed = {t: c.offsets for t, c in standing.items()}
    reported = lag_reports.latest_by_instance(warehouse, name)
    lag_reports.compact(warehouse, name)
    now_lags = lag_reports.lags(reported, committed)
    # As in Kafka, a task with nothing to restore (no store, or no batch committed yet) is
    # caught up on every instance: warming it up would copy nothing.
    empty = {t for t in tasks if not layout.stores_of(t.subtopology) or standing[t].batch_id == 0}
    lags = {
        i.name: {t: 0 if t in empty else now_lags.get(i.name, {}).get(t) for t in tasks}
        for i in configured
    }
    reason = _why(old, configured, lags, config, now - interval, force)
    if reason is None:
        return RebalanceResult(old, None, NO_CHANGE, False, lags, fenced)
    clients = {
        i.name: ClientState(
            {t: lag for t, lag in lags[i.name].items() if lag is not None}, i.capacity
        )
        for i in configured
    }
    computed = assign(tasks, clients, None if old is None else old.assignment, config)
    described = tuple(i.to_json() for i in configured)
    if old is not None and computed == old.assignment and described == old.instances:
        return RebalanceResult(old, None, NO_CHANGE, False, lags, fenced, recomputed=reason)
    expected = 1 if old is None else old.number + 1
    faults.maybe_fail(BEFORE_GENERATION, expected)
    number = generations.write_generation(
        warehouse, name, computed, configured, reason, now, lags, expected
    )
    new = Generation(number, computed, described, reason, now, lags)
    faults.maybe_fail(AFTER_GENERATION, number)
    epochs = finish_fence(warehouse, name, new)
    say(f"app {name}: generation {number} ({reason}) in force; {len(epochs)} tasks changed owner")
    return RebalanceResult(old, new, reason, True, lags, {**fenced, **epochs})


def _why(
    old: Generation | None,
    configured: list[instances.Instance],
    lags: Mapping[str, Mapping[TaskId, int | None]],
    config: AssignorConfig,
    probe_before: int,
    force: bool,
) -> str | None:
    """Why a new generation is computed now (None: nothing changed); a generation that
    asked for a probing rebalance is due for one when written at ``probe_before`` or
    earlier."""
    if old is None:
        return "first"
    if tuple(i.to_json() for i in configured) != old.instances:
        return "instances changed"
    if _caught_up(lags, config) != _caught_up(old.lags, config) or _warmup_caught_up(
        old, lags, config
    ):
        return "lags changed"
    if old.assignment.probing_rebalance_needed and old.at_ms <= probe_before:
        return "probing"
    return "requested" if force else None


def _caught_up(
    lags: Mapping[str, Mapping[TaskId, int | None]], config: AssignorConfig
) -> dict[TaskId, frozenset[str]]:
    """Per task, the instances whose store is within ``acceptable.recovery.lag``."""
    found: dict[TaskId, set[str]] = {}
    for instance, by_task in lags.items():
        for task, lag in by_task.items():
            if lag is not None and lag <= config.acceptable_recovery_lag:
                found.setdefault(task, set()).add(instance)
    return {t: frozenset(s) for t, s in found.items()}


def _warmup_caught_up(
    old: Generation, lags: Mapping[str, Mapping[TaskId, int | None]], config: AssignorConfig
) -> bool:
    for task, warm in old.assignment.warmup.items():
        for instance in warm:
            lag = lags.get(instance, {}).get(task)
            if lag is not None and lag <= config.acceptable_recovery_lag:
                return True
    return False
