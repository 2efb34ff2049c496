"""Delta commits through delta-rs: appends that carry per-task transaction ids and metadata.

The engine's writes are small appends from the driver, where a Spark write would first
rebuild the table's snapshot with a Spark job; delta-rs commits them in milliseconds, and,
unlike Spark's writer, one commit can carry a Delta ``txn`` action per task
(``app_transactions``). That is what makes a batch's identity per task: a table holds
batch ``b`` of task ``t`` when its ``txn`` version for ``txn_app_id(app, t)`` is ``b`` or
more, and two writers committing the same task's txn at once conflict (delta-rs fails the
second with "Concurrent transaction"), whatever else they write.

Commit metadata goes to ``commitInfo.userMetadata`` (JSON), where Spark's ``DESCRIBE
HISTORY`` shows it and ``io/delta_log`` reads it back.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.fs as pafs
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError, TableNotFoundError
from deltalake.schema import Schema
from deltalake.transaction import AddAction, create_table_with_add_actions

from lakestate import object_store
from lakestate.errors import TaskMigratedException
from lakestate.io import delta_log, txn_ids, txn_log
from lakestate.task_id import TaskId

if TYPE_CHECKING:
    # pyarrow.dataset imports pandas (~0.3 s at start-up): only deltalake's read paths need it.
    import pyarrow.dataset as ds

__all__ = [
    "TABLE_PROPERTIES",
    "ConcurrentCommit",
    "append",
    "append_files",
    "create_table",
    "create_with_files",
    "open_table",
    "release",
    "table_exists",
    "txn_app_id",
    "txn_version",
    "txn_versions",
]


#: The table properties of every table lakestate creates. A checkpoint every 10 commits (Spark's
#: default; delta-rs's is 100): opening a table replays the commit files since its last
#: checkpoint, one request each on an object store, and a scheduled app adds a commit to its
#: tables every run, so with 100 a run's start grew by ~8 ms a commit per table (moto).
TABLE_PROPERTIES: Mapping[str, str] = {"delta.checkpointInterval": "10"}


class ConcurrentCommit(TaskMigratedException):
    """Delta's conflict check failed a commit: a commit since its snapshot carried one of
    its txn ids (or otherwise conflicted with it). Nothing of it was committed."""


def txn_app_id(app: str, task: TaskId) -> str:
    """The Delta ``txn`` app id of ``task`` of ``app`` in every table the app writes."""
    return txn_ids.batch(app, task)


def _uri(path: str) -> str:
    return path.removeprefix("file://")


def table_exists(path: str) -> bool:
    """Whether a Delta table is at ``path``: on S3 one listing of its log (opening it would
    read its checkpoint and newest commits too, a dozen requests), elsewhere an open."""
    if object_store.is_s3(path):
        return delta_log.has_remote_log(path)
    try:
        DeltaTable(_uri(path))
    except TableNotFoundError:
        return False
    return True


class _Table(DeltaTable):
    """A ``DeltaTable`` whose pyarrow reads of a local table go through Arrow's own file
    system. deltalake's default is a file-system handler written in Python: Arrow's I/O
    threads then hold Python buffers, and one freed just as the interpreter exits (the
    last read's clean-up, late on a busy machine) takes the GIL during finalization and
    aborts the process with "terminate called without an active exception" (exit -6
    after a run that succeeded; apache/arrow#34314)."""

    def to_pyarrow_dataset(self, *args: Any, **kwargs: Any) -> ds.Dataset:
        root = self.table_uri.removeprefix("file://")
        # Paths that need percent-decoding (a space in a folder or a partition value) are
        # left to deltalake's handler, which decodes them.
        plain = "://" not in root and not any("%" in uri for uri in self.file_uris())
        if not kwargs.get("filesystem") and plain:
            kwargs["filesystem"] = pafs.SubTreeFileSystem(root, pafs.LocalFileSystem())
        return super().to_pyarrow_dataset(*args, **kwargs)


# Snapshots handed back with ``release``, by table URI, on S3 only (see ``open_table``).
_released: dict[str, DeltaTable] = {}
_released_guard = threading.Lock()


def open_table(path: str, version: int | None = None) -> DeltaTable:
    """The table's newest snapshot (or ``version``'s). On S3 the newest is a snapshot a
    caller of this process handed back (``release``) brought up to date, when there is
    one: a listing and the commits since, where opening the table anew reads its
    ``_last_checkpoint``, its checkpoint (about ten ranged reads) and its newest commits,
    and a run opens its progress table, changelogs and topics several times. The
    snapshot is the caller's alone until it hands it back."""
    uri = _uri(path)
    if version is None and object_store.is_s3(uri):
        with _released_guard:
            kept = _released.pop(uri, None)
        if kept is not None and _brought_up_to_date(kept):
            return kept
    table = _Table(uri, version=version)
    table._lakestate_uri = uri  # type: ignore[attr-defined]
    return table


def _brought_up_to_date(table: DeltaTable) -> bool:
    try:
        table.update_incremental()
    except Exception:  # noqa: BLE001 - e.g. the table was removed: open it anew, which says so
        return False
    return True


def release(table: DeltaTable) -> None:
    """Hand back a snapshot from ``open_table`` that the caller no longer uses (nor keeps)
    for a later ``open_table`` of the table in this process to update and reuse (on S3)."""
    uri = getattr(table, "_lakestate_uri", None)
    if uri is not None and object_store.is_s3(uri):
        with _released_guard:
            _released[uri] = table


def missing_files(table: DeltaTable) -> list[str]:
    """The data files of the snapshot ``table`` that are gone from its store (removed by a
    VACUUM after the snapshot's time), on a local disk or a bucket."""
    uris = table.file_uris()
    remote = [u for u in uris if object_store.is_s3(u)]
    local = [u for u in uris if not object_store.is_s3(u)]
    gone = [u for u in local if not os.path.exists(u.removeprefix("file://"))]
    if remote:
        infos = object_store.filesystem().get_file_info(
            [object_store.bucket_key(u) for u in remote]
        )
        gone += [u for u, i in zip(remote, infos, strict=True) if i.type == pafs.FileType.NotFound]
    return gone


def create_table(
    path: str, schema: pa.Schema, partition_by: list[str], name: str, description: str
) -> None:
    """Create the table unless it exists (a lost creation race is fine)."""
    if table_exists(path):
        return
    try:
        DeltaTable.create(
            _uri(path),
            schema,
            mode="ignore",
            partition_by=partition_by or None,
            name=name,
            description=description,
            configuration=dict(TABLE_PROPERTIES),
        )
    except Exception:
        if not table_exists(path):
            raise


def create_log_table(
    path: str, schema: pa.Schema, description: str, configuration: Mapping[str, str]
) -> None:
    """Create a topic's log table, partitioned by ``partition``, with ``configuration`` as
    its table properties (custom keys included) in its first commit. Raises if the table
    exists (the caller holds the topic's lock and checks for a lost race)."""
    DeltaTable.create(
        _uri(path),
        schema,
        mode="error",
        partition_by=["partition"],
        description=description,
        configuration={**TABLE_PROPERTIES, **configuration},
        raise_if_key_not_exists=False,
    )


def txn_versions(table: DeltaTable, app: str, tasks: list[TaskId]) -> dict[TaskId, int]:
    """The batch each task's txn says ``table`` holds (0: none)."""
    return {t: txn_version(table, txn_app_id(app, t)) for t in tasks}


def txn_version(table: DeltaTable, app_id: str) -> int:
    """The version of ``app_id``'s txn in the snapshot ``table`` (0: none). On S3 every txn
    of the snapshot is read in one pass and kept (``io/txn_log``): delta-rs replays the log
    from the checkpoint over HTTP at every lookup."""
    txns = txn_log.txns_at(table)
    if txns is None:
        return table.transaction_version(app_id) or 0
    return txns.get(app_id, 0)


def append(
    table: DeltaTable | str,
    data: pa.Table,
    app: str,
    batches: Mapping[TaskId, int],
    metadata: Mapping[str, Any],
    extra_txns: Mapping[str, int] | None = None,
    **options: Any,
) -> int:
    """Append ``data`` (possibly no rows) in one commit with a ``txn`` per task (version:
    the task's batch), ``extra_txns`` (app id -> version) and ``metadata``; returns the new
    table version. A concurrent commit of one of the same txn ids raises
    ConcurrentCommit, a TaskMigratedException (nothing is committed). ``table``: a path
    creates the table if missing (with ``TABLE_PROPERTIES``); ``options``: more of
    ``write_deltalake``'s (``schema_mode``, ``partition_by``)."""
    properties = _properties(app, batches, metadata, extra_txns)
    try:
        if isinstance(table, str):
            # Used only if the append creates the table (no metadata action otherwise).
            options = {"configuration": TABLE_PROPERTIES, **options}
        target = _uri(table) if isinstance(table, str) else table
        write_deltalake(target, data, mode="append", commit_properties=properties, **options)
    except CommitFailedError as exc:
        _raise_if_concurrent(exc, table, batches)
        raise
    if isinstance(table, str):
        return open_table(table).version()
    # delta-rs leaves the snapshot at the version it committed: a commit another writer
    # makes just after is not ours (an update first would take its version, and a caller
    # would pair that version with its own commit's end offsets).
    return table.version()


def append_files(
    table: DeltaTable,
    files: Sequence[AddAction],
    app: str,
    batches: Mapping[TaskId, int],
    metadata: Mapping[str, Any],
    extra_txns: Mapping[str, int] | None = None,
) -> int:
    """``append``'s commit for data files already written into the table's location
    (``io/table_files``): one commit adding ``files``, with the same txns and metadata;
    returns the new table version. ConcurrentCommit as ``append``'s."""
    properties = _properties(app, batches, metadata, extra_txns)
    partition_by = table.metadata().partition_columns
    before = table.version()
    try:
        table.create_write_transaction(
            list(files),
            "append",
            table.schema(),
            partition_by=partition_by or None,
            commit_properties=properties,
        )
    except CommitFailedError as exc:
        _raise_if_concurrent(exc, table, batches)
        raise
    table.update_incremental()
    return _own_version(table, before, properties)


def _own_version(table: DeltaTable, before: int, properties: CommitProperties) -> int:
    """The version of the commit with ``properties`` made on the snapshot of ``before``
    (``table``: updated since). delta-rs leaves a ``create_write_transaction``'s snapshot
    where it was, and other writers may have committed since, before or after it: the
    commit is the one since ``before`` that carries its txns (read only when it is not the
    one commit since)."""
    newest = table.version()
    txns = {(t.app_id, t.version) for t in properties.app_transactions or []}
    if newest == before + 1 or not txns:
        return newest
    for version in range(before + 1, newest + 1):
        commit = delta_log.commit_of(_uri_of(table), version)
        if commit is not None and txns <= set(commit.txns):
            return version
    return newest


def _uri_of(table: DeltaTable) -> str:
    return getattr(table, "_lakestate_uri", None) or table.table_uri


def create_with_files(
    path: str,
    schema: pa.Schema,
    files: Sequence[AddAction],
    partition_by: Sequence[str],
    app: str,
    batches: Mapping[TaskId, int],
    metadata: Mapping[str, Any],
) -> int:
    """Create the table at ``path`` with ``schema``, partitioned by ``partition_by``, in one
    commit adding ``files`` with ``append``'s txns and metadata (the first append of a table
    whose files were written elsewhere); returns its version (0). ConcurrentCommit when
    another writer created the table first."""
    properties = _properties(app, batches, metadata, None)
    try:
        create_table_with_add_actions(
            _uri(path),
            Schema.from_arrow(schema),
            list(files),
            mode="error",
            partition_by=list(partition_by) or None,
            configuration=dict(TABLE_PROPERTIES),
            commit_properties=properties,
        )
    except Exception as exc:
        if table_exists(path):
            raise ConcurrentCommit(f"{path}: another writer created the table first") from exc
        raise
    return 0


def _properties(
    app: str,
    batches: Mapping[TaskId, int],
    metadata: Mapping[str, Any],
    extra_txns: Mapping[str, int] | None,
) -> CommitProperties:
    """A commit's txns (a task's version: its batch) and metadata."""
    txns = [Transaction(txn_app_id(app, t), b) for t, b in sorted(batches.items())]
    txns += [Transaction(i, v) for i, v in sorted((extra_txns or {}).items())]
    return CommitProperties(
        custom_metadata={"userMetadata": json.dumps(dict(metadata), sort_keys=True)},
        app_transactions=txns,
    )


def _raise_if_concurrent(
    exc: CommitFailedError, table: DeltaTable | str, batches: Mapping[TaskId, int]
) -> None:
    """ConcurrentCommit for ``exc`` when Delta's conflict check raised it."""
    if "oncurrent" in str(exc):
        where = table if isinstance(table, str) else table.table_uri
        raise ConcurrentCommit(
            f"{where}: another writer committed at the same time for "
            f"{', '.join(str(t) for t in sorted(batches)) or 'the same table'}: {exc}"
        ) from exc
