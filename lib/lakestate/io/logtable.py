"""Log tables: the embedded stand-in for Kafka topics, one Delta table per topic.

Schema (``LOG_SCHEMA``)::

    partition int, offset long, timestamp long, key string, value string, headers string

partitioned (Delta) by ``partition``. ``key`` and ``value`` hold the canonical JSON text of
the Python key and value (``lakestate.io.partitioner.canonical_json``); a ``None`` key or
value (a tombstone) is SQL NULL. ``headers`` is the JSON text of a ``dict`` with str keys, or
NULL. ``timestamp`` is epoch milliseconds. Offsets are dense per partition and start at 0:
partition p holds offsets 0 .. end-1 with no gaps.

The partition count is fixed when the topic is created and kept in the table property
``lakestate.partitions``. Log tables are plain Delta (no deletion vectors, no Change Data
Feed), so that any Delta reader and writer can use them: the engine appends through delta-rs.

``append_records`` writes: it reads each partition's end offset, numbers the new
records on from there and writes them in one Delta commit. Appends to one topic are
serialized within a process (a lock per table) and, on a local warehouse, across processes
(``fcntl`` lock on ``topics/.<topic>.lock``). With ``txn_app_id``/``txn_version`` the commit
carries Delta's ``txn`` action (DataFrameWriter options ``txnAppId``/``txnVersion``), so an
append replayed with a version already committed for that app id is skipped by Delta.
Writers that number records themselves (the engine's sinks) do so under ``append_lock``.

End offsets are ``max(offset) + 1`` per partition, so records are never deleted from a log
table (a partition emptied by a delete would number from 0 again). Every append records the
end offsets it leaves in its commit's metadata (Delta ``commitInfo.userMetadata``, JSON under
``ENDS_METADATA_KEY``), so that on a local warehouse they are read from the newest commit
file (past commits that change no data, e.g. OPTIMIZE) instead of by a Spark job that scans
the whole topic; a commit by another writer that changed data falls back to the scan. The
partition count and the end offsets are also cached in-process, each entry checked against
the Delta log's files before use (the table version; the identity of its first commit).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache, reduce
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import pyarrow as pa

from lakestate.io import delta_commits, delta_log
from lakestate.io.partitioner import canonical_json, partition_for
from lakestate.state.serde import loads
from lakestate.warehouse import Warehouse

# pyspark is imported where a function needs it, so that what reads without Spark (the
# read-only commands, the in-process transport) does not import it.
if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = [
    "ENDS_METADATA_KEY",
    "LOG_SCHEMA",  # noqa: F822 (module __getattr__ builds it on first use)
    "PARTITIONS_PROPERTY",
    "AppendResult",
    "LogRecord",
    "append_lock",
    "append_records",
    "collect_records",
    "create_topic",
    "decode_json",
    "end_offsets",
    "ends_metadata",
    "iter_records",
    "partitions",
    "read_partitions_arrow",
    "read_range",
    "read_topic",
    "table_properties",
    "topic_exists",
    "validate_records",
]

PARTITIONS_PROPERTY = "lakestate.partitions"
#: The key, in an append's commit metadata (JSON), of the end offsets the append leaves.
ENDS_METADATA_KEY = "lakestate.end_offsets"
# Commit files read back, at most, to find the newest recorded end offsets.
_ENDS_LOOKBACK = 100


@cache
def _log_schema() -> Any:
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

    return StructType(
        [
            StructField("partition", IntegerType(), nullable=False),
            StructField("offset", LongType(), nullable=False),
            StructField("timestamp", LongType(), nullable=False),
            StructField("key", StringType(), nullable=True),
            StructField("value", StringType(), nullable=True),
            StructField("headers", StringType(), nullable=True),
        ]
    )


def __getattr__(name: str) -> Any:
    # LOG_SCHEMA, the Spark schema of a log table, is built on first use (it needs pyspark).
    if name == "LOG_SCHEMA":
        return _log_schema()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: The same columns as Arrow, for writers that append through delta-rs (the engine).
LOG_ARROW_SCHEMA = pa.schema(
    [
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("timestamp", pa.int64(), nullable=False),
        pa.field("key", pa.string()),
        pa.field("value", pa.string()),
        pa.field("headers", pa.string()),
    ]
)

# Plain Delta: no deletion vectors or Change Data Feed, so that any Delta reader and writer
# (delta-rs included: the engine appends through it) can use the table.
_TABLE_PROPERTIES = {
    "delta.enableChangeDataFeed": "false",
    "delta.enableDeletionVectors": "false",
}
_RECORD_FIELDS = ("key", "value", "timestamp", "partition", "headers")
_MAX_LONG = (1 << 63) - 1
_MAX_ERRORS_REPORTED = 10


class LogRecord(NamedTuple):
    """One record of a log table, key/value/headers decoded to Python values."""

    partition: int
    offset: int
    timestamp: int
    key: Any
    value: Any
    headers: dict[str, Any] | None = None


@dataclass(frozen=True)
class AppendResult:
    """What ``append_records`` did.

    ``ranges``: per partition written, the offsets the new records got, ``(start, end)``
    with end exclusive. ``skipped``: the write carried a txn version Delta had already
    committed for its app id, so nothing was written. ``version``: the table version after
    the call.
    """

    topic: str
    ranges: dict[int, tuple[int, int]] = field(default_factory=dict)
    skipped: bool = False
    version: int | None = None

    @property
    def counts(self) -> dict[int, int]:
        """Records appended per partition."""
        return {p: end - start for p, (start, end) in self.ranges.items()}

    @property
    def total(self) -> int:
        return sum(self.counts.values())


# -- topics -------------------------------------------------------------------------------


def _path(warehouse: Warehouse, topic: str) -> str:
    return warehouse.topic_path(topic)


def topic_exists(spark: SparkSession, warehouse: Warehouse, topic: str) -> bool:
    """Whether topic ``topic`` has a log table."""
    path = _path(warehouse, topic)
    if warehouse.is_local and not (Path(path.removeprefix("file://")) / "_delta_log").is_dir():
        return False
    return delta_commits.table_exists(path)


def create_topic(
    warehouse: Warehouse,
    topic: str,
    partitions: int,
    *,
    exist_ok: bool = True,
) -> str:
    """Create topic ``topic`` with ``partitions`` partitions; returns its table path.

    If the topic exists with the same partition count this is a no-op (``exist_ok``, the
    default) or a ``ValueError``; with another count it is always a ``ValueError``: the
    partition count of a topic never changes (keys would move between partitions).
    """
    if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
        raise ValueError(f"topic {topic!r}: partitions must be an int >= 1, got {partitions!r}")
    path = _path(warehouse, topic)
    # Under the topic's lock: two processes creating it at once (two runs of disjoint tasks
    # of an app, both creating its sinks) would see each other's half-written table.
    with append_lock(warehouse, topic):
        return _create_topic(warehouse, topic, partitions, path, exist_ok)


def _create_topic(
    warehouse: Warehouse, topic: str, partitions: int, path: str, exist_ok: bool
) -> str:
    if topic_exists(None, warehouse, topic):
        existing = _read_partitions(None, warehouse, topic)
        if existing != partitions:
            raise ValueError(
                f"topic {topic!r} already exists with {existing} partitions, not {partitions}"
            )
        if not exist_ok:
            raise ValueError(f"topic {topic!r} already exists")
        return path
    try:
        # One commit holds the schema and the partition count (a custom table property,
        # which delta-rs accepts with raise_if_key_not_exists=False): no JVM needed.
        delta_commits.create_log_table(
            path,
            LOG_ARROW_SCHEMA,
            description=f"lakestate log table of topic {topic}",
            configuration={PARTITIONS_PROPERTY: str(partitions), **_TABLE_PROPERTIES},
        )
    except Exception:
        if not topic_exists(None, warehouse, topic):
            raise
        # Lost a creation race to another writer: fine if it made the same topic.
        created = _read_partitions(None, warehouse, topic)
        if created != partitions or not exist_ok:
            raise ValueError(
                f"topic {topic!r} already exists with {created} partitions"
                + (f", not {partitions}" if created != partitions else "")
            ) from None
    return path


def table_properties(spark: SparkSession, path: str) -> dict[str, str]:
    """The table properties of the Delta table at ``path`` (metadata only: no data scan,
    unlike ``DeltaTable.detail()``, which also sizes every file)."""
    quoted = path.replace("`", "``")
    return {
        row.key: row.value for row in spark.sql(f"SHOW TBLPROPERTIES delta.`{quoted}`").collect()
    }


def _read_partitions(spark: SparkSession | None, warehouse: Warehouse, topic: str) -> int:
    path = _path(warehouse, topic)
    raw = delta_commits.open_table(path).metadata().configuration.get(PARTITIONS_PROPERTY)
    if raw is None:
        raise ValueError(f"{path} is not a lakestate log table (no {PARTITIONS_PROPERTY})")
    return int(raw)


# In-process caches, local warehouses only, each entry checked against the files of the
# Delta log before use (so a table written by another process, or dropped and re-created,
# is never served stale):
#  - the partition count, keyed by the identity of the table's first commit file
#    (a re-created table has a new one);
#  - the end offsets, keyed by the table version they were read at.
_Identity = tuple[int, int, int, int]
_partitions_cache: dict[str, tuple[_Identity, int]] = {}
_ends_cache: dict[str, tuple[tuple[_Identity, int], dict[int, int]]] = {}
_cache_guard = threading.Lock()


def _local_log(warehouse: Warehouse, path: str) -> Path | None:
    return delta_log.local_log(path) if warehouse.is_local else None


def _first_commit_identity(log: Path) -> _Identity | None:
    """Identifies one table at a path: its first commit file (stat, and a checksum of its
    content, which holds the table's id). None if there is none."""
    first = log / f"{0:020d}.json"
    try:
        st = os.stat(first)
        content = first.read_bytes()
    except OSError:  # no table, or its first commit was cleaned up after a checkpoint
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size, zlib.crc32(content))


def partitions(spark: SparkSession, warehouse: Warehouse, topic: str) -> int:
    """The partition count of topic ``topic`` (``ValueError`` if it does not exist)."""
    path = _path(warehouse, topic)
    log = _local_log(warehouse, path)
    identity = _first_commit_identity(log) if log is not None else None
    if identity is not None:
        with _cache_guard:
            cached = _partitions_cache.get(path)
        if cached is not None and cached[0] == identity:
            return cached[1]
    if not topic_exists(spark, warehouse, topic):
        raise ValueError(f"topic {topic!r} does not exist in {warehouse.root}")
    n = _read_partitions(spark, warehouse, topic)
    if identity is not None:
        with _cache_guard:
            _partitions_cache[path] = (identity, n)
    return n


def _local_version(log: Path) -> int | None:
    """The latest version of a local table, from its commit files' names. No Spark job."""
    found = delta_log.versions(log)
    return found[0] if found else None


def table_version(spark: SparkSession, warehouse: Warehouse, path: str) -> int:
    """The latest version of the Delta table at ``path`` (on a local warehouse, from the
    log's file names: no Spark job)."""
    log = _local_log(warehouse, path)
    version = _local_version(log) if log is not None else None
    if version is not None:
        return version
    from delta.tables import DeltaTable

    return DeltaTable.forPath(spark, path).history(1).select("version").first()[0]


# -- offsets and reads --------------------------------------------------------------------


def _end_offsets(
    spark: SparkSession, warehouse: Warehouse, path: str, num_partitions: int
) -> tuple[dict[int, int], int | None]:
    """The end offsets, and the table version they are the end offsets of (None when not
    known: remote warehouse, or the table changed while they were read)."""
    log = _local_log(warehouse, path)
    identity = _first_commit_identity(log) if log is not None else None
    seen = _local_version(log) if log is not None and identity is not None else None
    if seen is not None:
        with _cache_guard:
            cached = _ends_cache.get(path)
        if cached is not None and cached[0] == (identity, seen):
            return dict(cached[1]), seen
    ends = _recorded_ends(log, seen, num_partitions) if seen is not None else None
    if ends is None:
        ends = _scan_end_offsets(spark, path, num_partitions)
    if seen is not None and _local_version(log) == seen:
        _remember_ends(path, identity, seen, ends)
        return ends, seen
    return ends, None


def _scan_end_offsets(spark: SparkSession | None, path: str, num_partitions: int) -> dict[int, int]:
    """End offsets by a scan of the table's two number columns (delta-rs and Arrow, no
    Spark job): ``max(offset) + 1`` per partition."""
    ends = dict.fromkeys(range(num_partitions), 0)
    columns = delta_commits.open_table(path).to_pyarrow_table(columns=["partition", "offset"])
    if columns.num_rows:
        found = columns.group_by("partition").aggregate([("offset", "max")])
        for p, last in zip(
            found.column("partition").to_pylist(),
            found.column("offset_max").to_pylist(),
            strict=True,
        ):
            ends[p] = last + 1
    return ends


def _recorded_ends(log: Path, version: int, num_partitions: int) -> dict[int, int] | None:
    """The end offsets at ``version`` from the commit files alone: those the newest append
    recorded (``ENDS_METADATA_KEY``) if no later commit changed data, zeros if no commit
    ever did. None when the files cannot tell (a commit by another writer that changed
    data, a commit file cleaned up, more than ``_ENDS_LOOKBACK`` commits to read)."""
    for v in range(version, max(-1, version - _ENDS_LOOKBACK), -1):
        commit = delta_log.read_commit(log, v)
        if commit is None:
            return None
        recorded = commit.metadata_value(ENDS_METADATA_KEY)
        if isinstance(recorded, dict):
            return {p: int(recorded.get(str(p), 0)) for p in range(num_partitions)}
        if commit.changes_data:
            return None
    return dict.fromkeys(range(num_partitions), 0) if version < _ENDS_LOOKBACK else None


def ends_metadata(ends: Mapping[int, int]) -> str:
    """The commit metadata that records ``ends`` (partition -> end offset after the commit):
    for writers that append to a log table with Spark themselves, as DataFrameWriter option
    ``userMetadata``, so that readers need not scan the table for its end offsets."""
    return json.dumps({ENDS_METADATA_KEY: {str(p): n for p, n in sorted(ends.items())}})


def _remember_ends(
    path: str, identity: _Identity | None, version: int, ends: dict[int, int]
) -> None:
    if identity is not None:
        with _cache_guard:
            _ends_cache[path] = ((identity, version), dict(ends))


def end_offsets_of(warehouse: Warehouse, topic: str, num_partitions: int) -> dict[int, int]:
    """``end_offsets`` of a topic with ``num_partitions`` partitions (known to the caller),
    read without Spark."""
    return _end_offsets(None, warehouse, _path(warehouse, topic), num_partitions)[0]


def remember_ends(warehouse: Warehouse, topic: str, version: int, ends: Mapping[int, int]) -> None:
    """Note the end offsets an append of the caller's left at table ``version``."""
    path = _path(warehouse, topic)
    log = _local_log(warehouse, path)
    identity = _first_commit_identity(log) if log is not None else None
    _remember_ends(path, identity, version, dict(ends))


def end_offsets(spark: SparkSession, warehouse: Warehouse, topic: str) -> dict[int, int]:
    """The next offset of every partition (0 for an empty partition): Kafka's end offsets."""
    n = partitions(spark, warehouse, topic)
    return _end_offsets(spark, warehouse, _path(warehouse, topic), n)[0]


def read_topic(
    spark: SparkSession,
    warehouse: Warehouse,
    topic: str,
    partitions: Iterable[int] | None = None,
) -> DataFrame:
    """All records of ``topic`` (of ``partitions`` only, when given), ordered by partition
    and offset; columns as in ``LOG_SCHEMA``."""
    from pyspark.sql import functions as F

    df = spark.read.format("delta").load(_path(warehouse, topic))
    if partitions is not None:
        df = df.where(F.col("partition").isin(sorted(set(partitions))))
    return df.orderBy("partition", "offset")


def read_range(
    spark: SparkSession,
    warehouse: Warehouse,
    topic: str,
    ranges: Mapping[int, tuple[int, int]],
    ordered: bool = True,
) -> DataFrame:
    """Records with ``start <= offset < end`` of each partition in ``ranges``
    (``{partition: (start, end)}``), ordered by partition and offset; columns as in
    ``LOG_SCHEMA`` (key/value/headers as JSON text: see ``collect_records``).
    ``ordered=False``: in no particular order, for a reader that orders them itself (a
    global sort costs a sampling job and a shuffle)."""
    from pyspark.sql import functions as F

    conditions: list[Column] = []
    for p, bounds in sorted(ranges.items()):
        try:
            start, end = bounds
        except (TypeError, ValueError):
            raise ValueError(
                f"read_range {topic!r}: partition {p}: expected (start, end), got {bounds!r}"
            ) from None
        for name, v in (("partition", p), ("start", start), ("end", end)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(
                    f"read_range {topic!r}: {name} must be an int >= 0, got {v!r} (partition {p!r})"
                )
        if start > end:
            raise ValueError(f"read_range {topic!r}: partition {p}: start {start} > end {end}")
        if start < end:
            conditions.append(
                (F.col("partition") == p)
                & (F.col("offset") >= F.lit(start))
                & (F.col("offset") < F.lit(end))
            )
    df = spark.read.format("delta").load(_path(warehouse, topic))
    condition = reduce(lambda a, b: a | b, conditions) if conditions else F.lit(False)
    df = df.where(condition)
    return df.orderBy("partition", "offset") if ordered else df


def read_partitions_arrow(
    warehouse: Warehouse,
    topic: str,
    partitions: Iterable[int] | None = None,
    limit: int | None = None,
) -> Iterator[pa.Table]:
    """The records of ``topic`` as Arrow tables (``LOG_ARROW_SCHEMA``'s columns), one per
    partition in partition order (of ``partitions`` only, when given), each in offset
    order, at most ``limit`` records in all; read by delta-rs, no Spark. Offsets being
    dense from 0, a partition's first n records are those below offset n, so a limit
    reads no more than it returns (and files the Parquet statistics rule out)."""
    import pyarrow.dataset as ds

    dataset = delta_commits.open_table(_path(warehouse, topic)).to_pyarrow_dataset()
    n = _read_partitions(None, warehouse, topic)
    remaining = limit
    for p in sorted(set(range(n) if partitions is None else partitions)):
        if remaining is not None and remaining <= 0:
            return
        condition = ds.field("partition") == p
        if remaining is not None:
            condition = condition & (ds.field("offset") < remaining)
        rows = dataset.to_table(filter=condition).sort_by("offset")
        if remaining is not None:
            rows = rows.slice(0, remaining)
            remaining -= rows.num_rows
        yield rows.select(LOG_ARROW_SCHEMA.names)


def decode_json(text: str | None) -> Any:
    """The Python value of a key/value/headers column (NULL → None)."""
    return None if text is None else loads(text)


def iter_records(df: DataFrame) -> Iterator[LogRecord]:
    """The rows of a log-table DataFrame as ``LogRecord``s, in the DataFrame's order,
    fetched one Spark partition at a time."""
    for row in df.toLocalIterator():
        yield _to_record(row)


def collect_records(df: DataFrame) -> list[LogRecord]:
    """The rows of a log-table DataFrame as a list of ``LogRecord``s, in order."""
    return [_to_record(row) for row in df.collect()]


def _to_record(row: Any) -> LogRecord:
    return LogRecord(
        partition=row["partition"],
        offset=row["offset"],
        timestamp=row["timestamp"],
        key=decode_json(row["key"]),
        value=decode_json(row["value"]),
        headers=decode_json(row["headers"]),
    )


# -- appends ------------------------------------------------------------------------------


class _Invalid(Exception):
    """One record's problem; collected into the ValueError append_records raises."""


def _now_ms() -> int:
    return int(datetime.now().timestamp() * 1000)


def _json_text(what: str, value: Any) -> str | None:
    if value is None:
        return None
    _check_json(value, what)
    try:
        text = canonical_json(value)
    except (TypeError, ValueError) as e:
        raise _Invalid(f"{what} is not JSON-serializable: {e}") from None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        # JSON's \ud800-\udfff escapes decode to lone surrogates unless paired.
        raise _Invalid(
            f"{what} holds a lone surrogate {e.object[e.start]!r}, which is not Unicode text: "
            "a \\ud800-\\udfff escape must be one of a pair"
        ) from None
    return text


def _check_json(value: Any, path: str) -> None:
    """Reject what json.dumps would silently change: non-str dict keys."""
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise _Invalid(
                    f"{path} is not JSON-serializable: dict key {k!r} is "
                    f"{type(k).__name__}, not str"
                )
            _check_json(v, f"{path}[{k!r}]")
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            _check_json(v, f"{path}[{i}]")


def _timestamp(value: Any) -> int:
    if value is None:
        return _now_ms()
    if isinstance(value, datetime):  # naive: local time, as datetime.timestamp() reads it
        value = int(value.timestamp() * 1000)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Invalid(f"timestamp must be epoch milliseconds (an int), got {value!r}")
    if value < 0:
        raise _Invalid(f"timestamp must not be negative, got {value}")
    if value > _MAX_LONG:
        raise _Invalid(f"timestamp {value} does not fit in 64 bits")
    return value


def _partition(value: Any, key: Any, num_partitions: int) -> int:
    if value is None:
        return partition_for(key, num_partitions)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Invalid(f"partition must be an int, got {value!r}")
    if not 0 <= value < num_partitions:
        raise _Invalid(
            f"partition {value} is out of range: the topic has {num_partitions} "
            f"partition{'s' if num_partitions != 1 else ''} (0..{num_partitions - 1})"
        )
    return value


def _fields(record: Any) -> dict[str, Any]:
    if isinstance(record, Mapping):
        unknown = sorted(set(record) - set(_RECORD_FIELDS), key=str)
        if unknown:
            raise _Invalid(
                f"unknown field{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} "
                f"(a record has {', '.join(_RECORD_FIELDS)})"
            )
        for required in ("key", "value"):
            if required not in record:
                raise _Invalid(f"missing {required!r} field (use null for a {required} of None)")
        return dict(record)
    if isinstance(record, tuple | list):
        if not 2 <= len(record) <= len(_RECORD_FIELDS):
            raise _Invalid(
                "a record tuple is (key, value[, timestamp[, partition[, headers]]]), "
                f"got {len(record)} element{'s' if len(record) != 1 else ''}"
            )
        return dict(zip(_RECORD_FIELDS, record, strict=False))
    raise _Invalid(
        f"a record is a dict or a (key, value, timestamp, partition) tuple, "
        f"got {type(record).__name__}"
    )


def _normalize(
    records: Sequence[Any], num_partitions: int, labels: Sequence[str] | None
) -> list[tuple[int, int, str | None, str | None, str | None]]:
    """(partition, timestamp, key, value, headers) per record, all validated; ValueError
    listing the invalid records otherwise."""
    out: list[tuple[int, int, str | None, str | None, str | None]] = []
    errors: list[str] = []
    for i, record in enumerate(records):
        try:
            f = _fields(record)
            key_text = _json_text("key", f["key"])
            value_text = _json_text("value", f["value"])
            headers = f.get("headers")
            if headers is not None and not isinstance(headers, Mapping):
                raise _Invalid(f"headers must be a JSON object (dict) or null, got {headers!r}")
            headers_text = _json_text("headers", dict(headers) if headers is not None else None)
            ts = _timestamp(f.get("timestamp"))
            p = _partition(f.get("partition"), f["key"], num_partitions)
        except _Invalid as e:
            label = labels[i] if labels is not None else f"record {i}"
            errors.append(f"{label}: {e}")
            continue
        out.append((p, ts, key_text, value_text, headers_text))
    if errors:
        shown = errors[:_MAX_ERRORS_REPORTED]
        more = len(errors) - len(shown)
        raise ValueError(
            f"{len(errors)} invalid record{'s' if len(errors) != 1 else ''}, nothing written:\n  "
            + "\n  ".join(shown)
            + (f"\n  ... and {more} more" if more else "")
        )
    return out


def validate_records(
    records: Sequence[Any], num_partitions: int, labels: Sequence[str] | None = None
) -> None:
    """Check ``records`` as ``append_records`` does for a topic of ``num_partitions``
    partitions, without Spark; ``ValueError`` naming each invalid record otherwise."""
    if labels is not None and len(labels) != len(records):
        raise ValueError(f"got {len(labels)} labels for {len(records)} records")
    _normalize(records, num_partitions, labels)


_process_locks: dict[str, threading.RLock] = {}
_process_locks_guard = threading.Lock()
_held = threading.local()  # per thread: {path: depth} of append_lock holds


@contextlib.contextmanager
def append_lock(warehouse: Warehouse, topic: str) -> Iterator[None]:
    """Hold the append lock of ``topic``: appends are serialized while held (their offsets
    are read, then written). Reentrant within a thread; across processes on a local
    warehouse through ``fcntl.flock`` on ``topics/.<topic>.lock``. Writers that number
    records themselves (sinks) read ``end_offsets`` and write under this lock."""
    path = _path(warehouse, topic)
    with _process_locks_guard:
        lock = _process_locks.setdefault(path, threading.RLock())
    with lock:
        depth: dict[str, int] = getattr(_held, "depth", None) or {}
        _held.depth = depth
        if depth.get(path, 0) > 0 or not warehouse.is_local:
            depth[path] = depth.get(path, 0) + 1
            try:
                yield
            finally:
                depth[path] -= 1
            return
        import fcntl

        lock_file = Path(path.removeprefix("file://")).parent / f".{topic}.lock"
        lock_file.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o644)
        depth[path] = 1
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            depth[path] = 0
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def append_records(
    spark: SparkSession,
    warehouse: Warehouse,
    topic: str,
    records: Sequence[Mapping[str, Any] | tuple[Any, ...]],
    *,
    txn_app_id: str | None = None,
    txn_version: int | None = None,
    labels: Sequence[str] | None = None,
) -> AppendResult:
    """Append ``records`` to ``topic`` in one Delta commit; returns what was written.

    A record is a dict ``{"key", "value"[, "timestamp"][, "partition"][, "headers"]}`` (key
    and value required, ``None`` allowed) or a tuple ``(key, value[, timestamp[, partition[,
    headers]]])``. Timestamp: epoch ms (or a datetime), default now. Partition: default
    ``partition_for(key, partitions)``. Each partition's records get dense offsets from its
    current end offset, in the order given.

    Every record is validated first; if any is invalid a ``ValueError`` names each bad one
    (``labels[i]``, default ``record i``) and what is wrong, and nothing is written.

    ``txn_app_id``/``txn_version`` (both or neither) make the append idempotent: Delta skips
    it if a version >= ``txn_version`` was already committed for ``txn_app_id`` on this
    table (``AppendResult.skipped``).
    """
    if (txn_app_id is None) != (txn_version is None):
        raise ValueError("txn_app_id and txn_version must be given together")
    if txn_version is not None and (
        isinstance(txn_version, bool) or not isinstance(txn_version, int) or txn_version < 0
    ):
        raise ValueError(f"txn_version must be an int >= 0, got {txn_version!r}")
    if labels is not None and len(labels) != len(records):
        raise ValueError(f"got {len(labels)} labels for {len(records)} records")
    path = _path(warehouse, topic)
    n = partitions(spark, warehouse, topic)
    rows = _normalize(records, n, labels)
    # Written by delta-rs, like the engine's sink appends: producing starts no JVM.
    with append_lock(warehouse, topic):
        table = delta_commits.open_table(path)
        if txn_app_id is not None and (table.transaction_version(txn_app_id) or -1) >= txn_version:
            return AppendResult(topic, {}, skipped=True, version=table.version())
        if not rows:
            return AppendResult(topic, {}, skipped=False, version=table.version())
        ends, _ = _end_offsets(spark, warehouse, path, n)
        next_offset = dict(ends)
        columns: dict[str, list[Any]] = {name: [] for name in LOG_ARROW_SCHEMA.names}
        for p, ts, key_text, value_text, headers_text in rows:
            columns["partition"].append(p)
            columns["offset"].append(next_offset[p])
            next_offset[p] += 1
            columns["timestamp"].append(ts)
            columns["key"].append(key_text)
            columns["value"].append(value_text)
            columns["headers"].append(headers_text)
        metadata = {ENDS_METADATA_KEY: {str(p): e for p, e in sorted(next_offset.items())}}
        txns = {txn_app_id: txn_version} if txn_app_id is not None else None
        version = delta_commits.append(
            table, _arrow_table(columns), "", {}, metadata, extra_txns=txns
        )
        remember_ends(warehouse, topic, version, next_offset)
    return AppendResult(
        topic,
        {p: (ends[p], next_offset[p]) for p in sorted(ends) if next_offset[p] > ends[p]},
        skipped=False,
        version=version,
    )


def append_frame(
    spark: SparkSession,
    warehouse: Warehouse,
    topic: str,
    build: Callable[[Mapping[int, int]], DataFrame],
    counts: Mapping[int, int],
    *,
    txn_app_id: str | None = None,
    txn_version: int | None = None,
) -> AppendResult:
    """Append ``build(ends)`` to ``topic`` in one Delta commit, under the topic's append
    lock: ``ends`` are the current end offsets, and the frame (``LOG_SCHEMA`` columns) must
    hold ``counts[p]`` records of each partition p numbered densely from ``ends[p]``.
    ``txn_app_id``/``txn_version`` as in ``append_records``. The new end offsets are
    remembered, so the next append reads none."""
    path = _path(warehouse, topic)
    n = partitions(spark, warehouse, topic)
    with append_lock(warehouse, topic):
        ends, seen = _end_offsets(spark, warehouse, path, n)
        before = seen
        if before is None and txn_app_id is not None:
            before = table_version(spark, warehouse, path)
        new_ends = {p: ends[p] + counts.get(p, 0) for p in ends}
        writer = (
            build(dict(ends))
            .write.format("delta")
            .mode("append")
            .option("userMetadata", ends_metadata(new_ends))
        )
        if txn_app_id is not None:
            writer = writer.option("txnAppId", txn_app_id).option("txnVersion", txn_version)
        writer.save(path)
        after = table_version(spark, warehouse, path)
        if before is not None and after == before:
            return AppendResult(topic, {}, skipped=True, version=after)
        written = {p: c for p, c in counts.items() if c}
        if seen is not None and after == seen + 1:  # the one commit since `seen` is ours
            log = _local_log(warehouse, path)
            identity = _first_commit_identity(log) if log is not None else None
            _remember_ends(path, identity, after, new_ends)
    return AppendResult(
        topic, {p: (ends[p], new_ends[p]) for p in sorted(written)}, skipped=False, version=after
    )


def _arrow_table(columns: dict[str, list[Any]]) -> Any:
    import pyarrow as pa

    return pa.table(
        {
            "partition": pa.array(columns["partition"], pa.int32()),
            "offset": pa.array(columns["offset"], pa.int64()),
            "timestamp": pa.array(columns["timestamp"], pa.int64()),
            "key": pa.array(columns["key"], pa.string()),
            "value": pa.array(columns["value"], pa.string()),
            "headers": pa.array(columns["headers"], pa.string()),
        }
    )
