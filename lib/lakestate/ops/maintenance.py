"""Table maintenance of an app through delta-rs (no Spark): OPTIMIZE and VACUUM.

An app's tables (``app_tables``) are its changelog tables, its progress table and the topics
it writes: its sinks and repartition topics, as its progress rows name them (field
``tables``), so no app module is needed. Its input topics are left to whoever writes them.

``optimize`` rewrites each Delta partition's small files into bigger ones
(``DeltaTable.optimize.compact``). Its commit adds and removes files with ``dataChange``
false and carries no ``txn``: the rows, every task's txn version and the end offsets that
lakestate reads from a topic's commits (``logtable.ends._recorded_ends`` steps over commits that
change no data) stay as they were. It commits beside the engine's appends: delta-rs checks
an OPTIMIZE against concurrent appends and lets both through.

``vacuum`` deletes the files that no version of the last ``retention`` needs: files removed
(by OPTIMIZE or compaction) longer than ``retention`` ago, and files that no commit
references and that are older than ``retention`` (left by a write that crashed before its
commit). Every version that was the table's latest at some moment within ``retention``
stays readable (time travel, e.g. to rewind an app); older versions may not be. Retention
is at least an hour, in whole hours (delta-rs's unit; rounded up): a younger file may belong
to a batch that is reading it or about to commit it.

One table is rewritten by one maintainer at a time (``table_lock``): delta-rs 1.6.6 lets
two commits that remove the same files with ``dataChange`` false both succeed (two OPTIMIZEs
from one snapshot, or an OPTIMIZE and a compaction), and the table then holds the rewritten
rows twice. ``optimize`` and ``compact_changelogs`` hold the lock of each table they rewrite
(a ``flock`` on ``<table>/_lakestate_maintenance.lock`` on a local warehouse, a lease in
``<table>/_lakestate_lease`` on object storage: ``ops.table_lease``). The engine's batches take no such lock: appends
and these rewrites commit side by side.

``maintain`` runs ``compact_changelogs``, then ``optimize``, then ``vacuum``: what the
maintenance DAG's tasks do one by one.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from lakestate.checkpoint.progress import table_writers
from lakestate.io import delta_commits
from lakestate.ops.compaction import CompactionResult, compact
from lakestate.ops.table_lock import table_lock, tables_locked
from lakestate.warehouse import Warehouse

__all__ = [
    "DEFAULT_RETENTION",
    "MIN_RETENTION",
    "Optimized",
    "Vacuumed",
    "app_tables",
    "compact_changelogs",
    "maintain",
    "optimize",
    "retention_hours",
    "vacuum",
]

#: How long VACUUM keeps removed files by default: time travel over the last 7 days.
DEFAULT_RETENTION = timedelta(days=7)
#: The shortest retention VACUUM accepts.
MIN_RETENTION = timedelta(hours=1)


@dataclass(frozen=True)
class Optimized:
    """What OPTIMIZE did to one table: its active files before and after."""

    path: str
    files_before: int
    files_after: int


@dataclass(frozen=True)
class Vacuumed:
    """What VACUUM did to one table: the files it deleted (relative to the table)."""

    path: str
    deleted: tuple[str, ...]


def app_tables(warehouse: Warehouse, app: str) -> list[str]:
    """The tables of ``app`` that maintenance looks after, in a fixed order: its changelog
    tables, its progress table, then the topics its progress rows say it wrote. Only tables
    that exist; none before the app's first run."""
    tables = [t.path for t in warehouse.list_state_tables(app)]
    progress = warehouse.progress_path(app)
    if not delta_commits.table_exists(progress):
        return tables
    tables.append(progress)
    topics = warehouse.topics_dir().rstrip("/") + "/"
    for path in sorted(table_writers(warehouse, app)):
        if path.startswith(topics) and delta_commits.table_exists(path):
            tables.append(path)
    return tables


def compact_changelogs(
    warehouse: Warehouse, app: str, *, say: Callable[[str], None] = print
) -> CompactionResult:
    """``lakestate.ops.compaction.compact`` of every changelog of ``app``, holding their
    maintenance locks; returns its ``CompactionResult`` (of no task before the app's first
    run)."""
    paths = [t.path for t in warehouse.list_state_tables(app)]
    if not paths:
        return CompactionResult(app, ())
    with tables_locked(paths):
        return compact(warehouse, app, say=say)


def optimize(
    warehouse: Warehouse, app: str, *, say: Callable[[str], None] = print
) -> list[Optimized]:
    """Compact the small files of every table of ``app`` (``app_tables``); the data, the
    txn versions and the topics' end offsets are unchanged. A table with nothing to compact
    gets no commit."""
    done = []
    for path in app_tables(warehouse, app):
        with table_lock(path):
            table = delta_commits.open_table(path)
            before = len(table.file_uris())
            metrics = table.optimize.compact()
        after = before - metrics["numFilesRemoved"] + metrics["numFilesAdded"]
        done.append(Optimized(path, before, after))
        if after != before:
            say(f"optimize {path}: {before} -> {after} files")
    return done


def retention_hours(retention: timedelta) -> int:
    """``retention`` in whole hours, rounded up; ``ValueError`` below ``MIN_RETENTION``."""
    if retention < MIN_RETENTION:
        raise ValueError(
            f"VACUUM retention must be at least {MIN_RETENTION} (files younger than that may "
            f"belong to a batch being read or committed), got {retention}"
        )
    return math.ceil(retention / timedelta(hours=1))


def vacuum(
    warehouse: Warehouse,
    app: str,
    retention: timedelta = DEFAULT_RETENTION,
    *,
    say: Callable[[str], None] = print,
) -> list[Vacuumed]:
    """Delete the files of ``app``'s tables that no version of the last ``retention`` needs
    (see the module docstring); versions that were current within ``retention`` stay
    readable."""
    hours = retention_hours(retention)
    done = []
    for path in app_tables(warehouse, app):
        deleted = delta_commits.open_table(path).vacuum(
            retention_hours=hours,
            dry_run=False,
            enforce_retention_duration=False,
            full=True,
        )
        done.append(Vacuumed(path, tuple(sorted(deleted))))
        if deleted:
            say(f"vacuum {path}: deleted {len(deleted)} files older than {hours}h")
    return done


def maintain(
    warehouse: Warehouse,
    app: str,
    retention: timedelta = DEFAULT_RETENTION,
    *,
    say: Callable[[str], None] = print,
) -> tuple[list[Optimized], list[Vacuumed]]:
    """``compact_changelogs``, then ``optimize``, then ``vacuum`` of ``app``'s tables."""
    retention_hours(retention)  # refuse a bad retention before changing anything
    compact_changelogs(warehouse, app, say=say)
    return optimize(warehouse, app, say=say), vacuum(warehouse, app, retention, say=say)
