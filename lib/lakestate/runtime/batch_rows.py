"""The rows of a batch, in and out of its tasks, the same for every transport.

In: a task's input rows (``INPUT_SCHEMA``): which task (sub-topology, partition), which of
its inputs (``input_index``: the topic's place among the sub-topology's inputs, or
``GLOBAL_INPUT`` for a global table's topic) and the topic's record (``io/topic_records.RECORD_SCHEMA``).

Out: one table for every kind of row a task returns (``out_fields``): ``out`` (a record
for a sink or repartition topic; ``pseq`` numbers it within its topic partition),
``state`` (a changed store entry; its typed columns in the struct column
``changelog.struct_column(kind)``) and ``task`` (the task's ``TaskOutcome``, typed in the
struct column ``outcome``: ``runtime/outcome.py``). Columns a kind does not use are null.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
from lakestate.app import App
from lakestate.checkpoint import changelog
from lakestate.checkpoint.layout import kafka_topic_names
from lakestate.errors import SerializationException, StreamsException
from lakestate.io.kafka.cluster import KafkaCluster
from lakestate.io.partitioner import partitions_of_keys, partitions_of_texts
from lakestate.io.topic_records import RECORD_SCHEMA
from lakestate.processors.output import Output, OutputBlock
from lakestate.runtime.outcome import OUTCOME_TYPE
from lakestate.serdes import JsonSerde, Serde, base_key_serde
from lakestate.state.constants import RESERVED_NAMESPACES
from lakestate.state.registry import view_class
from lakestate.topology.graph import SINK, internal_topic_name

#: ``input_index`` of a global table's topic's rows.
GLOBAL_INPUT = -1

#: A task's input rows: which task and input, then the topic's record (``RECORD_SCHEMA``,
#: the columns every topic kind reads).
INPUT_SCHEMA = pa.schema(
    [
        pa.field("sub", pa.int32()),
        pa.field("task", pa.int32()),
        pa.field("input_index", pa.int32()),
        pa.field("topic", pa.string()),
        *RECORD_SCHEMA,
    ]
)
INPUT_COLUMNS = tuple(INPUT_SCHEMA.names)
#: The input columns that are the topic's record, as a topic's reader reads them.
RECORD_COLUMNS = tuple(RECORD_SCHEMA.names)

#: The ``task`` rows' column (null in the other rows).
OUTCOME_COLUMN = "outcome"
OUT_FIELDS = (
    ("kind", pa.string()),
    ("sub", pa.int32()),
    ("task", pa.int32()),
    ("seq", pa.int64()),
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("pseq", pa.int64()),
    ("timestamp", pa.int64()),
    ("key", pa.string()),
    ("value", pa.string()),
    ("headers", pa.string()),
    ("store", pa.string()),
    ("raw_key", pa.binary()),
    ("raw_value", pa.binary()),
    (OUTCOME_COLUMN, OUTCOME_TYPE),
)


def store_kinds(app: App) -> tuple[str, ...]:
    """The kinds of the app's stores, sorted: they decide the out rows' struct columns."""
    return tuple(sorted({store.kind for store in app.topology.stores.values()}))


def out_fields(kinds: tuple[str, ...] | list[str]) -> tuple[tuple[str, pa.DataType], ...]:
    """The out rows' columns for an app whose stores are of ``kinds``."""
    typed = []
    for kind in kinds:
        try:
            fields = changelog.typed_fields(kind)
        except ValueError as exc:
            raise StreamsException(str(exc)) from None
        typed.append((changelog.struct_column(kind), pa.struct(fields)))
    return OUT_FIELDS + tuple(typed)


def out_arrow_schema(kinds: tuple[str, ...] | list[str]) -> pa.Schema:
    """``out_fields(kinds)`` as an Arrow schema."""
    return pa.schema([pa.field(name, type_) for name, type_ in out_fields(kinds)])


class Rows:
    """The rows a task returns, gathered by kind as column lists, built into one Arrow
    table (columns a kind does not use are null)."""

    def __init__(self, fields: tuple[tuple[str, pa.DataType], ...] = OUT_FIELDS) -> None:
        self.fields = fields
        self.schema = pa.schema([pa.field(name, type_) for name, type_ in fields])
        self.parts: list[tuple[int, dict[str, Any]]] = []

    def add(self, n: int, **columns: Any) -> None:
        """``n`` rows: each column a list, numpy array or Arrow array of ``n`` values, or
        one value for all of them."""
        if n:
            self.parts.append((n, columns))

    def table(self) -> pa.Table:
        tables = []
        for n, columns in self.parts:
            arrays = []
            for name, type_ in self.fields:
                values = columns.get(name)
                if values is None:
                    arrays.append(pa.nulls(n, type_))
                elif isinstance(values, (list, np.ndarray)):
                    arrays.append(pa.array(values, type_))
                elif isinstance(values, pa.Array):
                    arrays.append(values.cast(type_))
                else:
                    scalar = values if isinstance(values, pa.Scalar) else pa.scalar(values, type_)
                    arrays.append(pa.repeat(scalar, n))
            tables.append(pa.Table.from_arrays(arrays, schema=self.schema))
        if not tables:
            return self.schema.empty_table()
        return pa.concat_tables(tables)


def key_serdes_of(app: App) -> dict[str, Serde]:
    """Per topic ``app`` writes (real names) whose records' partitions are taken of their
    keys' bytes under a key serde other than Json (a windowed one's inner): that serde
    (``partitioner.partitions_of_keys``). Kafka Streams partitions every topic it writes by
    the key's serialized bytes: an app on a Kafka cluster does so for its Kafka sinks and
    for its internal topics (repartition topics, a foreign-key join's subscription and
    response topics; Kafka's own, kept in the warehouse here), which must be co-partitioned
    with its Kafka sources. Topics not named hash the key's JSON text, the bytes a log table
    holds: every topic of an app on log tables, and Delta sources and sinks."""
    topology = app.topology
    kafka = kafka_topic_names(app)
    on_kafka = KafkaCluster.from_config(app.config) is not None
    found = {}
    for node in topology.nodes.values():
        if node.kind != SINK:
            continue
        for topic in node.topics:
            if node.internal_topic and on_kafka:
                name, serde = internal_topic_name(app.name, topic), node.serdes.key
            elif topic in kafka:
                name, serde = topic, topology.serdes_of(topic).key
            else:
                continue
            if type(base_key_serde(serde)) is not JsonSerde:
                found[name] = serde
    return found


def output_rows(
    rows: Rows,
    output: list[Output | OutputBlock],
    sub: int,
    partition: int,
    topic_partitions: dict[str, int],
    key_serdes: Mapping[str, Serde] | None = None,
) -> dict[str, dict[int, int]]:
    """Add the task's output records (``topic_partitions``: each output topic's partition
    count); returns their count per topic and partition. A record goes to Kafka's default
    partitioner of its key's bytes under its topic's key serde (``key_serdes``, from
    ``key_serdes_of``; a topic not there: Json, the key's JSON text). A block of output
    (``OutputBlock``) of a Json topic goes in as columns, partitioned once per distinct key."""
    counts: dict[str, dict[int, int]] = {}
    seq = 0
    run: list[Output] = []  # records since the last block
    for entry in output:
        if type(entry) is not OutputBlock:
            run.append(entry)  # type: ignore[arg-type]
        elif key_serdes and entry.topic in key_serdes:
            run.extend(entry.outputs())
        else:
            task = (sub, partition)
            seq = _record_rows(rows, run, seq, counts, task, topic_partitions, key_serdes)
            run = []
            seq = _block_rows(rows, entry, seq, counts, task, topic_partitions)
    _record_rows(rows, run, seq, counts, (sub, partition), topic_partitions, key_serdes)
    return counts


def _record_rows(
    rows: Rows,
    output: list[Output],
    seq: int,
    counts: dict[str, dict[int, int]],
    task: tuple[int, int],
    topic_partitions: dict[str, int],
    key_serdes: Mapping[str, Serde] | None,
) -> int:
    """Add ``output``'s rows, numbered from ``seq`` (``counts``: the next ``pseq`` per
    topic and partition, updated); returns the next ``seq``."""
    topics = [o.topic for o in output]
    targets = [0] * len(output)
    by_topic: dict[str, list[int]] = {}
    for i, topic in enumerate(topics):
        rows_of = by_topic.get(topic)
        if rows_of is None:
            rows_of = by_topic[topic] = []
        rows_of.append(i)
    for topic, rows_of in by_topic.items():
        found = partitions_of_keys(
            [output[i].partition_text for i in rows_of],
            key_serdes.get(topic) if key_serdes else None,
            topic_partitions[topic],
        )
        for i, target in zip(rows_of, found, strict=True):
            targets[i] = target
    pseqs = []
    for topic, target in zip(topics, targets, strict=True):
        per_topic = counts.get(topic)
        if per_topic is None:
            per_topic = counts[topic] = {}
        pseq = per_topic.get(target, 0)
        per_topic[target] = pseq + 1
        pseqs.append(pseq)
    rows.add(
        len(output),
        kind="out",
        sub=task[0],
        task=task[1],
        seq=list(range(seq, seq + len(output))),
        topic=topics,
        partition=targets,
        pseq=pseqs,
        timestamp=[o.record.timestamp for o in output],
        key=[o.key_text for o in output],
        value=[o.value_text for o in output],
        headers=[o.headers_text for o in output],
    )
    return seq + len(output)


def _block_rows(
    rows: Rows,
    block: OutputBlock,
    seq: int,
    counts: dict[str, dict[int, int]],
    task: tuple[int, int],
    topic_partitions: dict[str, int],
) -> int:
    """``_record_rows`` of a block, on its columns: a partition per distinct key text, each
    partition's ``pseq`` numbered on in record order."""
    n, topic = len(block.columns), block.topic
    if n == 0:
        return seq
    per_key = partitions_of_texts(block.key_texts, topic_partitions[topic])
    targets = np.asarray(per_key, np.int64)[block.ids]
    pseqs = np.empty(n, np.int64)
    per_topic = counts.setdefault(topic, {})
    found, firsts = np.unique(targets, return_index=True)
    for p in found[np.argsort(firsts)].tolist():  # in first-use order, as record by record
        mask = targets == p
        start = per_topic.get(p, 0)
        per_topic[p] = start + int(mask.sum())
        pseqs[mask] = np.arange(start, per_topic[p], dtype=np.int64)
    texts = pa.array(block.key_texts, pa.string()).take(pa.array(block.ids))
    values = block.value_texts
    rows.add(
        n,
        kind="out",
        sub=task[0],
        task=task[1],
        seq=np.arange(seq, seq + n, dtype=np.int64),
        topic=topic,
        partition=targets,
        pseq=pseqs,
        timestamp=block.columns.timestamps,
        key=texts,
        # An int64 array's decimal texts: what int.__repr__ gives each value.
        value=pa.array(block.columns.values, pa.int64()).cast(pa.string())
        if values is None
        else values,
    )
    return seq + n


def state_rows(rows: Rows, app: App, columns: list, sub: int, partition: int) -> list[str]:
    """Add the task's changelog rows, one per changed key (a tombstone for a delete; no row
    for a store kind's index-only entries); returns the stores that have rows. ``columns``:
    the writes as (namespace, keys, values) (``Transaction.changes_by_namespace``), their
    ``seq`` their places in ``Transaction.changes``; a kind with ``changelog_columns`` (the
    dedup store) takes its namespace's writes at once, as columns."""
    stores: list[str] = []
    global_stores = {g.store for g in app.topology.global_tables}  # no changelog
    start = 0
    for namespace, keys, values in columns:
        if keys and namespace not in RESERVED_NAMESPACES and namespace not in global_stores:
            if _store_rows(rows, app, namespace, (keys, values), start, (sub, partition)):
                stores.append(namespace)
        start += len(keys)
    return sorted(set(stores))


def _store_rows(
    rows: Rows, app: App, namespace: str, writes: tuple[list, list], start: int, task: tuple
) -> bool:
    """The changelog rows of one store's writes (keys, values), the first at ``seq``
    ``start``; False if none."""
    store = app.topology.stores[namespace]
    kind, key_serde = view_class(store.kind), store.serdes.key
    raw_keys, raw_values = writes
    end = start + len(raw_keys)
    bulk = getattr(kind, "changelog_columns", None)
    columns = None if bulk is None else bulk(raw_keys, raw_values)
    if columns is not None:
        positions, raw_keys, raw_values, typed = columns
        seqs: Any = positions + start
    else:
        seqs, typed = [], []
        kept_keys, kept_values = [], []
        for seq, raw_key, raw_value in zip(range(start, end), raw_keys, raw_values, strict=True):
            if kind.is_index_only(raw_key):
                continue
            seqs.append(seq)
            kept_keys.append(raw_key)
            kept_values.append(raw_value)
            if raw_value is None:
                typed.append(None)
                continue
            try:
                typed.append(kind.changelog_row(raw_key, raw_value, key_serde))
            except SerializationException as exc:
                raise _unwritable(app, namespace, key_serde, exc) from None
        raw_keys, raw_values = kept_keys, kept_values
    if not len(seqs):
        return False
    rows.add(
        len(seqs),
        kind="state",
        sub=task[0],
        task=task[1],
        seq=seqs,
        store=namespace,
        raw_key=raw_keys,
        raw_value=raw_values,
        **{changelog.struct_column(store.kind): typed},
    )
    return True


def _unwritable(app: App, store: str, key_serde: Serde, exc: Exception) -> StreamsException:
    """The error for a store entry its changelog cannot hold (a bytes key in a store whose
    key serde is not Bytes), naming the store's nodes and what to do. Raised while the
    batch's rows are made, before its transaction is staged: nothing is written."""
    nodes = sorted(n.name for n in app.topology.nodes.values() if store in n.stores)
    return StreamsException(
        f"node {', '.join(nodes) or '?'}: store {store!r} (key serde {key_serde.name}) cannot "
        f"write this key to its changelog: {exc}. Give the store Serdes.Bytes() as its key "
        "serde (Grouped.with_(Serdes.Bytes(), ...) or Materialized.with_(Serdes.Bytes(), "
        "...), or StreamJoined.with_key_serde(Serdes.Bytes()) for a stream-stream join's "
        "stores), or turn the key into text first (e.g. select_key(lambda k, v: k.hex())). "
        "The batch failed before anything was written"
    )


__all__ = [
    "GLOBAL_INPUT",
    "INPUT_COLUMNS",
    "INPUT_SCHEMA",
    "RECORD_COLUMNS",
    "OUT_FIELDS",
    "OUTCOME_COLUMN",
    "Rows",
    "out_arrow_schema",
    "key_serdes_of",
    "out_fields",
    "output_rows",
    "state_rows",
    "store_kinds",
]
