"""The app's assignment history: numbered generations in ``<warehouse>/apps/<app>/_assignment``.

One Delta commit per generation, a row per task (its active, standbys and warmups, the
instances and the reason of the generation), carrying the txn
``assignment_txn_id(app)`` = the generation: two rebalances that both compute generation
``g`` cannot both write it (delta-rs fails the later commit). History is kept, so a
generation is queryable with SQL (``lakestate sql``) and by number. Written and read with
delta-rs (no JVM). The assignor itself (``lakestate.assign``) never touches Delta.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from lakestate.assign import Assignment
from lakestate.errors import StreamsException, TaskMigratedException
from lakestate.io import delta_commits, txn_ids
from lakestate.task_id import TaskId
from lakestate.warehouse import Warehouse

__all__ = [
    "REASONS",
    "ConcurrentRebalanceError",
    "Generation",
    "assignment_path",
    "assignment_txn_id",
    "generation",
    "history",
    "latest",
    "write_generation",
]

#: Why a generation was computed (the ``reason`` column).
REASONS = ("first", "instances changed", "lags changed", "probing", "requested")

SCHEMA = pa.schema(
    [
        pa.field("generation", pa.int64()),
        pa.field("task", pa.string()),
        pa.field("active", pa.string()),
        pa.field("standby", pa.list_(pa.string())),
        pa.field("warmup", pa.list_(pa.string())),
        pa.field("probing_rebalance_needed", pa.bool_()),
        pa.field("instances", pa.string()),  # JSON [{"name", "queue", "capacity"}]
        pa.field("reason", pa.string()),
        pa.field("at_ms", pa.int64()),
        # JSON {instance: lag or null}: each client's lag for the task that the generation
        # was computed from (what the next rebalance compares its caught-up sets with)
        pa.field("lags", pa.string()),
    ]
)


class ConcurrentRebalanceError(StreamsException):
    """Another rebalance wrote the same generation first; nothing was written."""


@dataclass(frozen=True)
class Generation:
    """Generation ``number`` of an app's assignment: the assignment, the instances it was
    computed for (``{"name", "queue", "capacity"}`` each), why, when (epoch ms), and the
    lags it was computed from (per instance, per task; None: no store)."""

    number: int
    assignment: Assignment
    instances: tuple[dict[str, Any], ...]
    reason: str
    at_ms: int
    lags: dict[str, dict[TaskId, int | None]] = field(default_factory=dict)

    @property
    def instance_names(self) -> list[str]:
        return [i["name"] for i in self.instances]

    def to_json(self) -> dict[str, Any]:
        a = self.assignment
        return {
            "generation": self.number,
            "reason": self.reason,
            "at_ms": self.at_ms,
            "instances": list(self.instances),
            "lags": {
                i: {str(t): lag for t, lag in sorted(by_task.items())}
                for i, by_task in sorted(self.lags.items())
            },
            "probing_rebalance_needed": a.probing_rebalance_needed,
            "tasks": {
                str(t): {
                    "active": a.active[t],
                    "standby": sorted(a.standby.get(t, ())),
                    "warmup": sorted(a.warmup.get(t, ())),
                }
                for t in sorted(a.active)
            },
        }


def assignment_path(warehouse: Warehouse, app: str) -> str:
    return warehouse.app_path(app) + "/_assignment"


def assignment_txn_id(app: str) -> str:
    """The Delta txn app id, in ``_assignment``, whose version is the latest generation."""
    return txn_ids.assignment(app)


def _instances_json(instances: Iterable[Any]) -> str:
    found = []
    for i in instances:
        found.append(i.to_json() if hasattr(i, "to_json") else dict(i))
    return json.dumps(found, sort_keys=True)


def _generation_table(
    number: int,
    assignment: Assignment,
    described: str,
    reason: str,
    at_ms: int,
    lags: Mapping[str, Mapping[TaskId, int | None]] | None,
) -> pa.Table:
    """Generation ``number``'s rows: one per task, in task order."""
    rows = [
        {
            "generation": number,
            "task": str(t),
            "active": assignment.active[t],
            "standby": sorted(assignment.standby.get(t, ())),
            "warmup": sorted(assignment.warmup.get(t, ())),
            "probing_rebalance_needed": bool(assignment.probing_rebalance_needed),
            "instances": described,
            "reason": reason,
            "at_ms": at_ms,
            "lags": json.dumps(
                {i: by_task.get(t) for i, by_task in sorted((lags or {}).items())},
                sort_keys=True,
            ),
        }
        for t in sorted(assignment.active)
    ]
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def write_generation(
    warehouse: Warehouse,
    app: str,
    assignment: Assignment,
    instances: Iterable[Any],
    reason: str,
    at_ms: int | None = None,
    lags: Mapping[str, Mapping[TaskId, int | None]] | None = None,
    number: int | None = None,
) -> int:
    """Write ``assignment`` as the app's next generation (the latest + 1; 1 for the first)
    in one commit; returns its number. ``instances``: ``engine.instances.Instance``s (or
    dicts ``{"name", "queue", "capacity"}``); ``lags``: the clients' lags it was computed
    from (per instance, per task); ``number``: the generation it must be (the one after
    the generation it was computed from). ConcurrentRebalanceError when another rebalance
    wrote that generation, or another one, meanwhile (this one writes nothing)."""
    if reason not in REASONS:
        raise ValueError(f"unknown generation reason {reason!r} (one of {', '.join(REASONS)})")
    path = assignment_path(warehouse, app)
    delta_commits.create_table(
        path,
        SCHEMA,
        [],
        name=f"{app}__assignment",
        description=f"lakestate assignment generations of app {app}: a row per task per generation",
    )
    table = delta_commits.open_table(path)
    latest_number = table.transaction_version(assignment_txn_id(app)) or 0
    if number is not None and number != latest_number + 1:
        raise ConcurrentRebalanceError(
            f"app {app}: another rebalance wrote generation {latest_number} meanwhile; this "
            f"one, computed as generation {number}, wrote nothing"
        )
    number = latest_number + 1
    at_ms = int(time.time() * 1000) if at_ms is None else at_ms
    data = _generation_table(number, assignment, _instances_json(instances), reason, at_ms, lags)
    metadata = {"app": app, "generation": number, "reason": reason}
    try:
        delta_commits.append(table, data, app, {}, metadata, {assignment_txn_id(app): number})
    except TaskMigratedException as exc:
        raise ConcurrentRebalanceError(
            f"app {app}: another rebalance wrote generation {number} at the same time; this "
            "one wrote nothing (run it again to see the new generation)"
        ) from exc
    return number


def _generations(data: pa.Table) -> list[Generation]:
    by_number: dict[int, list[dict[str, Any]]] = {}
    for row in data.to_pylist():
        by_number.setdefault(row["generation"], []).append(row)
    return [_generation(n, rows) for n, rows in sorted(by_number.items())]


def _generation(number: int, rows: list[Mapping[str, Any]]) -> Generation:
    first = rows[0]
    tasks = {TaskId.parse(r["task"]): r for r in rows}
    assignment = Assignment(
        active={t: r["active"] for t, r in tasks.items()},
        standby={t: frozenset(r["standby"] or ()) for t, r in tasks.items() if r["standby"]},
        warmup={t: frozenset(r["warmup"] or ()) for t, r in tasks.items() if r["warmup"]},
        probing_rebalance_needed=bool(first["probing_rebalance_needed"]),
    )
    lags: dict[str, dict[TaskId, int | None]] = {}
    for task, r in tasks.items():
        for instance, lag in json.loads(r.get("lags") or "{}").items():
            lags.setdefault(instance, {})[task] = lag
    return Generation(
        number,
        assignment,
        tuple(json.loads(first["instances"])),
        first["reason"],
        first["at_ms"],
        lags,
    )


def _open(warehouse: Warehouse, app: str) -> DeltaTable | None:
    path = assignment_path(warehouse, app)
    return delta_commits.open_table(path) if delta_commits.table_exists(path) else None


def _read(table: DeltaTable | None, numbers: Iterable[int] | None) -> list[Generation]:
    """The generations ``numbers`` (None: all) of the opened table, in one scan."""
    if table is None:
        return []
    dataset = table.to_pyarrow_dataset()
    if numbers is None:
        return _generations(dataset.to_table())
    return _generations(dataset.to_table(filter=pc.field("generation").isin(sorted(set(numbers)))))


def latest(warehouse: Warehouse, app: str) -> Generation | None:
    """The app's newest generation (None: none yet)."""
    table = _open(warehouse, app)
    number = 0 if table is None else table.transaction_version(assignment_txn_id(app)) or 0
    found = _read(table, [number]) if number else []
    return found[0] if found else None


def generation(warehouse: Warehouse, app: str, number: int) -> Generation | None:
    """Generation ``number`` of the app (None: not written)."""
    return generations(warehouse, app, [number]).get(number)


def generations(warehouse: Warehouse, app: str, numbers: Iterable[int]) -> dict[int, Generation]:
    """The app's generations ``numbers`` that were written, by number (one read)."""
    numbers = list(numbers)
    if not numbers:
        return {}
    return {g.number: g for g in _read(_open(warehouse, app), numbers)}


def history(warehouse: Warehouse, app: str) -> list[Generation]:
    """Every generation of the app, oldest first."""
    return _read(_open(warehouse, app), None)
