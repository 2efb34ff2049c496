"""What the Airflow plugin shows of an app's scale-out: ``assignment_view(warehouse, app)``.

Read without a JVM, through delta-rs: the generations (``assign.history``, the
``_assignment`` table), the instances' lag reports (``engine.reports``, the ``_instances``
table) and the progress table (``engine.status``: each task's last complete batch, its
committed offsets and the topics' end offsets). The api-server holds no local store, so an
instance's lag on a task is its newest report's ``local_offsets`` against the offsets
committed now (``reports.lag_of``, as the rebalance computes it).

Warmup progress: the share of the task's committed offsets the warmup's store holds
(``held_pct``: 100 once it holds the last complete batch), its lag now, and its lag when
it became the task's warmup (``lag_at_assignment``: the lag that generation was computed
from; None: it held no store then). An instance is caught up on a task when its lag is at most
``acceptable.recovery.lag``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lakestate.assign import history as generations_table
from lakestate.assign.types import Assignment
from lakestate.io.kafka import KafkaCluster
from lakestate.read.status import TaskStatus, app_status
from lakestate.scaleout import lag_reports as reports_table
from lakestate.task_id import TaskId
from lakestate.topology.graph import Topology
from lakestate.warehouse import Warehouse

__all__ = ["DEFAULT_ACCEPTABLE_RECOVERY_LAG", "app_summary", "assignment_view", "held_pct"]

#: Kafka's default ``acceptable.recovery.lag`` (records).
DEFAULT_ACCEPTABLE_RECOVERY_LAG = 10000
#: Generations listed in a view's history, newest first.
HISTORY_LIMIT = 20


def app_summary(warehouse: Warehouse, app: str) -> dict[str, Any]:
    """One line of the apps list: the app's latest generation (None: never assigned), when
    and why it was computed, its instances and how many tasks it assigns."""
    latest = generations_table.latest(warehouse, app)
    if latest is None:
        return {"app": app, "generation": None, "at_ms": None, "reason": None,
                "instances": [], "tasks": 0}  # fmt: skip
    return {
        "app": app,
        "generation": latest.number,
        "at_ms": latest.at_ms,
        "reason": latest.reason,
        "instances": latest.instance_names,
        "tasks": len(latest.assignment.active),
    }


def held_pct(local_offsets: Mapping[str, int] | None, committed: Mapping[str, int]) -> float | None:
    """The share (percent, one decimal) of ``committed`` (offsets per input topic) that a
    store holding ``local_offsets`` has: None for no store, 100 when nothing is committed."""
    if local_offsets is None:
        return None
    total = sum(committed.values())
    if total == 0:
        return 100.0
    held = sum(min(end, int(local_offsets.get(key, 0))) for key, end in committed.items())
    return round(100.0 * held / total, 1)


def _global_topics(topology: Topology | None, tasks: list[TaskStatus]) -> set[str]:
    """The app's global topics: the topology's, and any input a task reads beyond its own
    partition (without the topology: from the progress rows)."""
    found = {g.topic for g in topology.global_tables} if topology is not None else set()
    return found | {i.topic for t in tasks for i in t.inputs if i.partition != t.task.partition}


def _committed(task: TaskStatus, global_topics: set[str]) -> dict[str, int]:
    """Per input topic of the task its committed offset, keyed as a report's
    ``local_offsets`` (global topics left out: every instance restores them, whoever owns
    the task)."""
    return {
        i.topic: i.committed
        for i in task.inputs
        if i.topic not in global_topics and i.partition == task.task.partition
    }


def _summary(
    generation: generations_table.Generation, before: generations_table.Generation | None
) -> dict[str, Any]:
    """A generation as the history lists it: when, why, for which instances, and the tasks
    whose active instance changed from the generation before."""
    a = generation.assignment
    previous = before.assignment.active if before is not None else {}
    return {
        "generation": generation.number,
        "reason": generation.reason,
        "at_ms": generation.at_ms,
        "probing_rebalance_needed": a.probing_rebalance_needed,
        "instances": list(generation.instances),
        "tasks": len(a.active),
        "moved": [str(t) for t in sorted(a.active) if before and previous.get(t) != a.active[t]],
        "warmups": sum(len(w) for w in a.warmup.values()),
        "standbys": sum(len(s) for s in a.standby.values()),
    }


def _warmup_since(
    history: list[generations_table.Generation], task: TaskId, instance: str
) -> generations_table.Generation:
    """The generation since which ``instance`` has been a warmup of ``task`` without a
    break (``history``: oldest first; the latest's, if it became one there)."""
    since = history[-1]
    for generation in reversed(history[:-1]):
        if instance not in generation.assignment.warmup.get(task, ()):
            break
        since = generation
    return since


def _task_ids(
    by_task: Mapping[TaskId, TaskStatus],
    assignment: Assignment | None,
    newest: dict[str, dict[TaskId, reports_table.Report]],
) -> list[TaskId]:
    """Every task known to the progress rows, the latest generation or a report, sorted."""
    return sorted(
        set(by_task)
        | (set(assignment.active) if assignment else set())
        | {t for by in newest.values() for t in by}
    )


def assignment_view(
    warehouse: Warehouse,
    app: str,
    topology: Topology | None = None,
    acceptable_recovery_lag: int = DEFAULT_ACCEPTABLE_RECOVERY_LAG,
    history_limit: int = HISTORY_LIMIT,
    cluster: KafkaCluster | None = None,
    kafka_topics: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """The app's assignment as the plugin's page and JSON show it (JSON-ready). ``cluster``,
    ``kafka_topics``: the app's Kafka cluster and its topics there (``describe.app_cluster``),
    whose lags are then its consumer group's, as ``lakestate status`` shows them.

    ``generation``: the latest generation's number (None: never assigned; every run then
    owns every task, as one instance does), with its ``reason``, ``at_ms``,
    ``probing_rebalance_needed``; ``history``: the generations newest first (at most
    ``history_limit``), each with its instances and the tasks whose active changed
    (``moved``); ``tasks``: per task (of ``topology``'s sub-topologies when given, of the
    progress rows, the generation and the reports) its ``active``, ``warmup`` and
    ``standby`` instances, its last complete batch (``last_batch``, ``last_commit_at_ms``),
    ``pending_batch``, ``input_lag`` (end offsets minus committed), ``committed_offsets``,
    and ``instances``: per instance assigned the task or reporting on it, its ``role`` in
    the latest generation ("none" if not assigned), ``lag`` now, ``caught_up``,
    ``held_pct``, and its newest report's ``local_batch``, ``reported_at_ms``,
    ``reported_generation``, ``reported_role``; a warmup also ``warmup_since`` (a
    generation) and ``lag_at_assignment``. ``instances``: per instance (the latest
    generation's, then any other that reported) ``configured`` (in the latest generation),
    ``queue``, ``capacity``, its active/warmup/standby task counts and
    ``last_report_at_ms``.
    """
    history = generations_table.history(warehouse, app)
    newest = reports_table.latest_by_instance(warehouse, app)
    status = app_status(warehouse, app, None, topology, cluster, kafka_topics)
    latest = history[-1] if history else None
    assignment = latest.assignment if latest is not None else None

    configured = latest.instance_names if latest is not None else []
    names = configured + sorted(set(newest) - set(configured))
    tasks = _task_entries(
        status.tasks, topology, assignment, names, newest, history, acceptable_recovery_lag
    )
    summaries = [_summary(g, history[i - 1] if i else None) for i, g in enumerate(history)]
    return {
        "app": app,
        "generation": latest.number if latest is not None else None,
        "reason": latest.reason if latest is not None else None,
        "at_ms": latest.at_ms if latest is not None else None,
        "probing_rebalance_needed": bool(assignment and assignment.probing_rebalance_needed),
        "acceptable_recovery_lag": acceptable_recovery_lag,
        "instances": _instances(names, latest, tasks, newest),
        "tasks": tasks,
        "history": summaries[::-1][:history_limit],
        "unresolved_subtopologies": status.unresolved,
    }


def _task_entries(
    statuses: list[TaskStatus],
    topology: Topology | None,
    assignment: Assignment | None,
    names: list[str],
    newest: dict[str, dict[TaskId, reports_table.Report]],
    history: list[Any],
    acceptable_recovery_lag: int,
) -> list[dict[str, Any]]:
    """Each task's entry of the view (``assignment_view``'s ``tasks``)."""
    global_topics = _global_topics(topology, statuses)
    by_task = {t.task: t for t in statuses}
    entries = []
    for task in _task_ids(by_task, assignment, newest):
        found = by_task.get(task)
        committed = _committed(found, global_topics) if found is not None else {}
        roles = _Roles.of(assignment, task)
        per_instance = _instances_on_task(
            task, roles, names, newest, committed, history, acceptable_recovery_lag
        )
        entries.append(_task_entry(task, roles, found, committed, per_instance))
    return entries


@dataclass(frozen=True)
class _Roles:
    """A task's instances in the latest generation (none: never assigned)."""

    active: str | None
    warmup: list[str]
    standby: list[str]

    @staticmethod
    def of(assignment: Assignment | None, task: TaskId) -> _Roles:
        if assignment is None:
            return _Roles(None, [], [])
        return _Roles(
            assignment.active.get(task),
            sorted(assignment.warmup.get(task, ())),
            sorted(assignment.standby.get(task, ())),
        )

    def role_of(self, instance: str) -> str:
        if instance == self.active:
            return "active"
        if instance in self.warmup:
            return "warmup"
        return "standby" if instance in self.standby else "none"


def _instance_on_task(
    name: str,
    role: str,
    report: reports_table.Report | None,
    committed: dict[str, int],
    acceptable_recovery_lag: int,
) -> dict[str, Any]:
    """An instance's entry on a task: its role, its lag and what its store holds, from its
    newest report on the task (None: it sent none)."""
    local = report.local_offsets if report is not None else None
    lag = reports_table.lag_of(local, committed)
    return {
        "instance": name,
        "role": role,
        "lag": lag,
        "caught_up": None if lag is None else lag <= acceptable_recovery_lag,
        "held_pct": held_pct(local, committed),
        "local_batch": report.local_batch if report else None,
        "reported_at_ms": report.at_ms if report else None,
        "reported_generation": report.generation if report else None,
        "reported_role": report.role if report else None,
    }


def _instances_on_task(
    task: TaskId,
    roles: _Roles,
    names: list[str],
    newest: dict[str, dict[TaskId, reports_table.Report]],
    committed: dict[str, int],
    history: list[generations_table.Generation],
    acceptable_recovery_lag: int,
) -> list[dict[str, Any]]:
    """The entries of the instances assigned ``task`` or reporting on it, in ``names`` order."""
    per_instance = []
    for name in names:
        report = newest.get(name, {}).get(task)
        role = roles.role_of(name)
        if role == "none" and report is None:
            continue
        entry = _instance_on_task(name, role, report, committed, acceptable_recovery_lag)
        if role == "warmup":
            since = _warmup_since(history, task, name)
            entry["warmup_since"] = since.number
            entry["lag_at_assignment"] = since.lags.get(name, {}).get(task)
        per_instance.append(entry)
    return per_instance


def _task_entry(
    task: TaskId,
    roles: _Roles,
    found: TaskStatus | None,
    committed: dict[str, int],
    per_instance: list[dict[str, Any]],
) -> dict[str, Any]:
    return {
        "task": str(task),
        "active": roles.active,
        "warmup": roles.warmup,
        "standby": roles.standby,
        "last_batch": found.batch if found else 0,
        "last_commit_at_ms": found.committed_at_ms if found else None,
        "pending_batch": found.pending_batch if found else None,
        "input_lag": found.lag if found else None,
        "committed_offsets": committed,
        "instances": per_instance,
    }


def _instances(
    names: list[str],
    latest: generations_table.Generation | None,
    tasks: list[dict[str, Any]],
    newest: dict[str, dict[TaskId, reports_table.Report]],
) -> list[dict[str, Any]]:
    """Per instance: whether the latest generation configures it, its queue and capacity,
    its task counts by role and its newest report's time."""
    described = {i["name"]: i for i in latest.instances} if latest is not None else {}
    return [
        {
            "name": name,
            "configured": name in described,
            "queue": described.get(name, {}).get("queue"),
            "capacity": described.get(name, {}).get("capacity"),
            "active": sum(1 for t in tasks if t["active"] == name),
            "warmup": sum(1 for t in tasks if name in t["warmup"]),
            "standby": sum(1 for t in tasks if name in t["standby"]),
            "last_report_at_ms": max(
                (r.at_ms for r in newest.get(name, {}).values()), default=None
            ),
        }
        for name in names
    ]
