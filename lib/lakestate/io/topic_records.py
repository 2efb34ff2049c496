"""A topic's records, whatever stores the topic: their columns, the records producers give,
and what an append did.

Every topic kind (``io/topics.py``) reads and writes records in ``RECORD_SCHEMA``::

    partition int, offset long, timestamp long, key string, value string, headers string

``key`` and ``value`` hold the canonical JSON text of the Python key and value
(``lakestate.io.partitioner.canonical_json``); a ``None`` key or value (a tombstone) is
NULL. ``headers`` is the JSON text of a ``dict`` with str keys, or NULL. ``timestamp`` is
epoch milliseconds. Offsets are dense per partition and start at 0.

A producer's record is a dict ``{"key", "value"[, "timestamp"][, "partition"][,
"headers"]}`` or a tuple ``(key, value[, timestamp[, partition[, headers]]])``;
``normalize_records`` checks and encodes them, naming every bad one.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

import pyarrow as pa

from lakestate.errors import SerializationException
from lakestate.io.partitioner import canonical_json, partition_of_key
from lakestate.serdes import Serde
from lakestate.state.serde import loads

__all__ = [
    "RECORD_SCHEMA",
    "AppendResult",
    "Ranges",
    "TopicDescription",
    "TopicRecord",
    "check_ranges",
    "check_txn",
    "decode_json",
    "normalize_records",
    "records_of",
    "validate_records",
]

#: The columns of a topic's records, as every topic kind reads and writes them.
RECORD_SCHEMA = pa.schema(
    [
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("timestamp", pa.int64(), nullable=False),
        pa.field("key", pa.string()),
        pa.field("value", pa.string()),
        pa.field("headers", pa.string()),
    ]
)

#: Offset ranges to read: partition -> (start, end), start inclusive, end exclusive.
Ranges = Mapping[int, tuple[int, int]]

_RECORD_FIELDS = ("key", "value", "timestamp", "partition", "headers")
_MAX_LONG = (1 << 63) - 1
_MAX_ERRORS_REPORTED = 10


class TopicRecord(NamedTuple):
    """One record of a topic, key/value/headers decoded to Python values."""

    partition: int
    offset: int
    timestamp: int
    key: Any
    value: Any
    headers: dict[str, Any] | None = None


@dataclass(frozen=True)
class AppendResult:
    """What an append did.

    ``ranges``: per partition written, the offsets the new records got, ``(start, end)``
    with end exclusive. ``skipped``: the write carried a txn version the topic had already
    committed for its app id, so nothing was written. ``version``: the topic's table
    version after the call (None for a kind without versions).
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


@dataclass(frozen=True)
class TopicDescription:
    """A topic as ``describe`` finds it: its kind, where it lives, its partition count and
    end offsets (its record count is their sum: offsets are dense from 0)."""

    name: str
    kind: str
    location: str
    partitions: int
    end_offsets: dict[int, int]

    @property
    def records(self) -> int:
        return sum(self.end_offsets.values())


def check_txn(txn_app_id: str | None, txn_version: int | None) -> tuple[str, int] | None:
    """An idempotent append's txn, ``(app id, version)``, checked (both or neither, the
    version an int >= 0); None for neither."""
    if (txn_app_id is None) != (txn_version is None):
        raise ValueError("txn_app_id and txn_version must be given together")
    if txn_app_id is None or txn_version is None:
        return None
    if isinstance(txn_version, bool) or not isinstance(txn_version, int) or txn_version < 0:
        raise ValueError(f"txn_version must be an int >= 0, got {txn_version!r}")
    return txn_app_id, txn_version


def decode_json(text: str | None) -> Any:
    """The Python value of a key/value/headers column (NULL → None)."""
    return None if text is None else loads(text)


def records_of(rows: pa.Table) -> Iterator[TopicRecord]:
    """The rows of an Arrow table in ``RECORD_SCHEMA``'s columns as ``TopicRecord``s, in
    order."""
    for r in rows.to_pylist():
        yield TopicRecord(
            r["partition"],
            r["offset"],
            r["timestamp"],
            decode_json(r["key"]),
            decode_json(r["value"]),
            decode_json(r["headers"]),
        )


def check_ranges(topic: str, ranges: Ranges) -> dict[int, tuple[int, int]]:
    """``ranges`` checked (ints >= 0, start <= end), as a dict; ``ValueError`` naming the
    topic and the bad range otherwise."""
    checked = {}
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
        checked[p] = (start, end)
    return checked


# -- producers' records -------------------------------------------------------------------


class _Invalid(Exception):
    """One record's problem; collected into the ValueError normalize_records raises."""


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


def _partition(value: Any, key: Any, num_partitions: int, key_serde: Serde | None) -> int:
    if value is None:
        try:
            return partition_of_key(key, key_serde, num_partitions)
        except SerializationException as e:
            raise _Invalid(f"key: {e}") from None
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


def _encode(
    record: Any, num_partitions: int, key_serde: Serde | None = None
) -> tuple[int, int, str | None, str | None, str | None]:
    f = _fields(record)
    key_text = _json_text("key", f["key"])
    value_text = _json_text("value", f["value"])
    headers = f.get("headers")
    if headers is not None and not isinstance(headers, Mapping):
        raise _Invalid(f"headers must be a JSON object (dict) or null, got {headers!r}")
    headers_text = _json_text("headers", dict(headers) if headers is not None else None)
    ts = _timestamp(f.get("timestamp"))
    p = _partition(f.get("partition"), f["key"], num_partitions, key_serde)
    return p, ts, key_text, value_text, headers_text


def normalize_records(
    records: Sequence[Any],
    num_partitions: int,
    labels: Sequence[str] | None = None,
    key_serde: Serde | None = None,
) -> list[tuple[int, int, str | None, str | None, str | None]]:
    """(partition, timestamp, key, value, headers) per record, key/value/headers as JSON
    text, for a topic of ``num_partitions`` partitions (timestamp: default now; partition:
    default ``partitioner.partition_of_key(key, key_serde, num_partitions)``: murmur2 of the
    key's bytes under the topic's key serde, its JSON text for Json). ``ValueError`` naming every
    invalid record (``labels[i]``, default ``record i``) and what is wrong otherwise."""
    if labels is not None and len(labels) != len(records):
        raise ValueError(f"got {len(labels)} labels for {len(records)} records")
    out = []
    errors: list[str] = []
    for i, record in enumerate(records):
        try:
            out.append(_encode(record, num_partitions, key_serde))
        except _Invalid as e:
            errors.append(f"{labels[i] if labels is not None else f'record {i}'}: {e}")
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
    """Check ``records`` as an append to a topic of ``num_partitions`` partitions does,
    writing nothing; ``ValueError`` naming each invalid record otherwise."""
    normalize_records(records, num_partitions, labels)
