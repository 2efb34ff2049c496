"""A store's state as of a batch that compaction has folded away, read by Delta time travel.

Compaction replaces a task's changelog rows up to batch ``C`` by one snapshot row per key
(``lakestate.ops.compaction``), so the table's newest version cannot say what the task's
state was at a batch ``B < C``. The version just before that compaction's commit still can:
it holds every row of the task's batches up to ``C``. Each compaction commit carries the txn
``lakestate-compaction/<app>/<task>`` (``io.txn_ids.compaction``, version ``C``) and names
its task and ``C`` in its commit metadata, so the version to read is the one before the
oldest compaction commit of the task through a batch after ``B``.

That version stays readable until VACUUM deletes the files the compaction replaced
(``lakestate maintain --retention-hours``: files replaced longer ago than the retention) or
Delta's log cleanup drops its commit files; then the state as of ``B`` is gone, and the error
says so and what retention would have kept it.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass

from deltalake import DeltaTable
from lakestate.io import delta_commits, txn_ids
from lakestate.ops.compaction import METADATA_KEY
from lakestate.read.status import format_time
from lakestate.task_id import TaskId

__all__ = ["older_versions"]


@dataclass(frozen=True)
class _Compaction:
    """A compaction commit of one task: its table ``version``, the batch it compacted
    ``through`` and when it was committed (epoch ms)."""

    version: int
    through: int
    at_ms: int


def older_versions(
    app: str, path: str, table: DeltaTable, past: dict[TaskId, int]
) -> Iterator[tuple[DeltaTable, dict[TaskId, int]]]:
    """For tasks ``past`` (task -> pinned batch), each compacted in ``table`` through a
    later batch: the older versions of the changelog at ``path`` that hold their state, each
    with the tasks to read there (each task once; tasks that one version serves share it).
    ValueError, naming the task and what to do, when the version is gone (vacuumed, or its
    log cleaned up)."""
    commits = _compactions(table)
    remaining = dict(past)
    while remaining:
        # The task whose state left the table first sets the version; every other task
        # whose pinned batch that version also holds (uncompacted) is read there too.
        firsts = {t: _first_past(path, commits, t, b) for t, b in remaining.items()}
        task = min(firsts, key=lambda t: firsts[t].version)
        first = firsts[task]
        old = _load(path, first.version - 1, task, remaining[task], first)
        served = {t: b for t, b in remaining.items() if _holds(old, app, t, b)}
        if task not in served:
            raise ValueError(
                f"{path}: table version {old.version()} does not hold task {task}'s state as "
                f"of batch {remaining[task]} (its batches and compactions are not in order, "
                f"e.g. after a rewind); query batch {first.through} or later"
            )
        _check_not_vacuumed(path, old, served, first)
        yield old, served
        remaining = {t: b for t, b in remaining.items() if t not in served}


def _compactions(table: DeltaTable) -> dict[str, list[_Compaction]]:
    """The compaction commits of ``table`` up to its version, per task, oldest first."""
    found: dict[str, list[_Compaction]] = {}
    for commit in table.history():
        version = commit.get("version")
        if version is None or version > table.version():
            continue
        try:
            meta = json.loads(commit.get("userMetadata") or "{}").get(METADATA_KEY)
        except (ValueError, AttributeError):
            continue
        if isinstance(meta, dict) and "task" in meta and "through" in meta:
            found.setdefault(str(meta["task"]), []).append(
                _Compaction(int(version), int(meta["through"]), int(commit.get("timestamp", 0)))
            )
    for commits in found.values():
        commits.sort(key=lambda c: c.version)
    return found


def _first_past(
    path: str, commits: dict[str, list[_Compaction]], task: TaskId, batch: int
) -> _Compaction:
    """The oldest compaction commit of ``task`` through a batch after ``batch``."""
    for commit in commits.get(str(task), []):
        if commit.through > batch:
            return commit
    raise ValueError(
        f"{path}: task {task} was compacted past batch {batch}, and the Delta log no longer "
        "has that compaction's commit (log cleanup), so its state as of that batch is gone; "
        "query a later batch"
    )


def _load(path: str, version: int, task: TaskId, batch: int, first: _Compaction) -> DeltaTable:
    try:
        return delta_commits.open_table(path, version)
    except Exception as exc:  # delta-rs raises several kinds for a version it cannot load
        raise ValueError(
            f"{path}: task {task}'s state as of batch {batch} is in table version {version}, "
            f"from before its compaction through batch {first.through}, which cannot be read "
            f"any more ({exc}); query batch {first.through} or later"
        ) from None


def _holds(table: DeltaTable, app: str, task: TaskId, batch: int) -> bool:
    """Whether ``table`` holds ``task``'s rows up to ``batch`` (its batch txn is there)
    uncompacted past it."""
    compacted = table.transaction_version(txn_ids.compaction(app, task)) or 0
    written = delta_commits.txn_versions(table, app, [task])[task]
    return compacted <= batch <= written


def _check_not_vacuumed(
    path: str, table: DeltaTable, tasks: dict[TaskId, int], first: _Compaction
) -> None:
    """ValueError when VACUUM deleted files of ``tasks`` that version ``table`` needs."""
    partitions = ", ".join(str(t.partition) for t in tasks)
    uris = table.file_uris(file_pruning_predicate=f"task IN ({partitions})")
    missing = [u for u in uris if not os.path.exists(u.removeprefix("file://"))]
    if not missing:
        return
    hours = max(1, math.ceil((time.time() * 1000 - first.at_ms) / 3_600_000))
    listed = ", ".join(f"task {t} batch {b}" for t, b in sorted(tasks.items()))
    raise ValueError(
        f"{path}: the state as of {listed} is in table version {table.version()}, from before "
        f"the compaction through batch {first.through} at {format_time(first.at_ms)} UTC, and "
        f"VACUUM has removed {len(missing)} of its files (e.g. {missing[0]}). VACUUM keeps the "
        "files that the versions of its retention need: a retention of at least "
        f"{hours} hours (`lakestate maintain APP --retention-hours {hours}`, the maintenance "
        "DAG's vacuum_retention_hours) would have kept it. Query batch "
        f"{first.through} or later"
    )
