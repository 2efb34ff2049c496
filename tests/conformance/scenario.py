"""The conformance scenario format: what a scenario is and what playing it gives.

A scenario names a topology kind with its params and lists input records; an ``Outcome``
is the output topic's records in one normalised form, whichever side played it. The JSON
the Kafka runner reads is ``Scenario.to_json()``; it answers in ``Outcome``'s fields.

Every kind reads topic "in" (string keys; values by ``value_serde``) and writes topic
"out". The functions are fixed on both sides (see kstreams/.../Topologies.java): reduce sums
longs; aggregate starts from "0" and appends "+value"; a session merger joins two aggregates
as "one&two". Time and session windowed aggregations pass null values on (unwindowed and
sliding ones drop them), so sum takes a null as 0 and append writes it as "null".
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, Literal

INPUT_TOPIC = "in"
OUTPUT_TOPIC = "out"

Aggregation = Literal["count", "reduce", "aggregate"]


@dataclass(frozen=True)
class Input:
    """One record piped into ``topic``: ``key``/``value`` may be None; ``ts`` epoch ms."""

    key: str | None
    value: int | str | None
    ts: int
    topic: str = INPUT_TOPIC


@dataclass(frozen=True)
class Buffer:
    """A suppression buffer (Kafka's ``BufferConfig``): no limit at all is ``unbounded()``.
    ``spill_to_disk`` is lakestate's own: Kafka has no such mode (see ``for_kafka``)."""

    max_records: int | None = None
    max_bytes: int | None = None
    when_full: Literal["emit_early", "shut_down", "spill_to_disk"] = "emit_early"

    @property
    def unbounded(self) -> bool:
        return self.max_records is None and self.max_bytes is None


@dataclass(frozen=True)
class Suppress:
    """``Suppressed.untilWindowCloses(buffer)`` or ``untilTimeLimit(time_limit ms, buffer)``."""

    until: Literal["window_closes", "time_limit"]
    time_limit: int | None = None
    buffer: Buffer = field(default_factory=Buffer)


@dataclass(frozen=True)
class AggregateParams:
    """``groupByKey()`` then the aggregation (and suppress, if any)."""

    kind: ClassVar[str] = "aggregate"
    aggregation: Aggregation
    suppress: Suppress | None = None


@dataclass(frozen=True)
class GroupedSerdesParams:
    """``groupBy(regroup, Grouped.with("regrouped", String, values))`` ("a" and "b" become
    "ab", "c" stays, null stays null) then the aggregation into store "grouped-store" named
    with ``Materialized.as`` and no key serde (Kafka's defaults: the Grouped key serde, a
    count's Long, a reduce's Grouped value serde; an aggregate's String given). ``values``:
    the Grouped value serde, the scenario's ``value_serde`` (the input topic's)."""

    kind: ClassVar[str] = "grouped_serdes"
    aggregation: Aggregation
    values: Literal["long", "string"] = "long"


@dataclass(frozen=True)
class BytesStoreParams:
    """A store with Bytes serdes (issue 26): ``stream("in")`` mapped to bytes (the key's
    UTF-8; the value's text's UTF-8 after 0xff 0x00, never UTF-8 text), then
    ``groupByKey(Grouped.with(Bytes, Bytes))`` into store "bytes-store" named with
    ``Materialized.as`` and no serde (Kafka's defaults: Bytes keys, a count's Long, a
    reduce's Bytes); a reduce keeps the last 6 bytes of agg + value. "out" gets the key's
    and value's lower-case hex (a count's decimal text) as Strings.

    With ``window`` (ms): the grouped stream is ``windowedBy(TimeWindows.ofSizeWithNoGrace
    (window))`` and the table ``suppress(untilWindowCloses(unbounded()))`` before the
    ``mapValues`` (the buffer takes the table's serdes: a windowed Bytes key, a count's
    Long or a reduce's Bytes); "out"'s key is the inner key's hex, "@", the window start."""

    kind: ClassVar[str] = "bytes_store"
    aggregation: Literal["count", "reduce"]
    window: int | None = None


@dataclass(frozen=True)
class SerdeFlowParams:
    """Serdes carried forward, as Kafka's KStreamImpl: ``stream("in", Consumed.with(String,
    values))``, then ``step``: "filter" (keeps both serdes) or "to_string" (``mapValues`` to the
    value's text, forgetting the value serde); ``repartition``: ``repartition(Repartitioned
    .with(String, that serde).withName("rp"))``; ``join``: a join with ``stream("table")``
    under ``StreamJoined.with(String, that serde, values)`` (3 ms, no grace; joiner
    "left|right"); then ``groupByKey().count()`` to "out" with no Grouped, Materialized or
    Produced serdes (Kafka takes the carried ones; the runner sets no default serdes). A
    serde that does not fit the values fails the run at the topic or store. ``values``: the
    Consumed value serde, the scenario's ``value_serde``."""

    kind: ClassVar[str] = "serde_flow"
    step: Literal["filter", "to_string"]
    repartition: Literal["long", "string"] | None = None
    join: Literal["long", "string"] | None = None
    values: Literal["long", "string"] = "long"  # the scenario's value_serde
    # The count per window instead (5 ms, no grace): the window store takes the carried key
    # serde and Long, the table a windowed serde of it and Long, ``suppressed``
    # (``untilWindowCloses(unbounded())``) keeps them, and to("out") is given no serde.
    window: Literal["tumbling", "session"] | None = None
    suppressed: bool = False
    # Unwindowed only: to("out", Produced.valueSerde(that serde)), which wins over the
    # carried Long (so "string" fails the run at the sink).
    produced: Literal["long", "string"] | None = None


@dataclass(frozen=True)
class TimeWindowedParams:
    """``windowedBy(TimeWindows.ofSizeWithNoGrace(size))`` (grace None) or
    ``ofSizeAndGrace(size, grace)``; ``.advanceBy(advance)`` when advance is set (hopping);
    the store ``Materialized...withRetention(retention)`` when retention is set."""

    kind: ClassVar[str] = "time_windowed_aggregate"
    aggregation: Aggregation
    size: int
    grace: int | None = None
    advance: int | None = None
    suppress: Suppress | None = None
    retention: int | None = None


@dataclass(frozen=True)
class SessionWindowedParams:
    """``windowedBy(SessionWindows.ofInactivityGapWithNoGrace(gap))`` (grace None) or
    ``ofInactivityGapAndGrace(gap, grace)``; the store ``Materialized...withRetention(retention)``
    when retention is set (a session still retained is merged by a later record)."""

    kind: ClassVar[str] = "session_windowed_aggregate"
    aggregation: Aggregation
    gap: int
    grace: int | None = None
    suppress: Suppress | None = None
    retention: int | None = None


@dataclass(frozen=True)
class SlidingWindowedParams:
    """``windowedBy(SlidingWindows.ofTimeDifferenceWithNoGrace(time_difference))`` (grace
    None) or ``ofTimeDifferenceAndGrace(time_difference, grace)`` (KIP-450). A window is
    ``[start, start + time_difference]``, its end inclusive; null values are dropped."""

    kind: ClassVar[str] = "sliding_windowed_aggregate"
    aggregation: Aggregation
    time_difference: int
    grace: int | None = None
    suppress: Suppress | None = None


# Joins read a second topic: the table side of a stream-table join, the right side of a
# table-table join. Their joiner writes "left|right", a null as "null" (Java's concatenation).
TABLE_TOPIC = "table"

JoinType = Literal["inner", "left", "outer"]


@dataclass(frozen=True)
class StreamTableJoinParams:
    """``stream("in").join/leftJoin(table("table"), joiner)``; the table is materialized
    as a versioned store keeping ``history_retention`` ms (KIP-914: read as of each stream
    record's time) when set, else as a plain key-value store. ``rekey``: the stream first
    through ``selectKey`` (the identity), so the join reads it through a repartition topic
    typed by ``Joined.with(String, ...)``."""

    kind: ClassVar[str] = "stream_table_join"
    join: JoinType
    history_retention: int | None = None
    rekey: bool = False


@dataclass(frozen=True)
class TableTableJoinParams:
    """``table("in").join/leftJoin/outerJoin(table("table"), joiner)``, the result's updates
    to "out"; each side versioned with its retention when set (KIP-914: out-of-order
    updates of a versioned side give no result); the result materialized or not."""

    kind: ClassVar[str] = "table_table_join"
    join: JoinType
    left_retention: int | None = None
    right_retention: int | None = None
    materialized: bool = False


# The second input of a merge (op "merge_other").
OTHER_TOPIC = "other"


@dataclass(frozen=True)
class StatelessParams:
    """``stream("in")`` through ``ops`` in turn, then ``to("out")``, or with ``count``
    ``groupByKey().count()`` to "out". The ops (the same fixed functions on both sides;
    ``num`` of a value is the long, or the number after a string's "v"):
    - "flat_map": a null value gives (key, null); else ``len(text(value)) % 3`` records,
      the first keyed as the input, the second by "z" (null key), null ("a"), or key + "1";
    - "flat_map_values": a null value gives two nulls; an even ``num`` none; an odd one
      the value and the value plus 1;
    - "split": ``split(Named.as("s<i>-"))``, branches "big" (``num`` > 5: its value plus
      10), the second (null values), the default (``num % 3 != 0`` kept), merged back in
      that order, then merged with the records keyed "a" (a fan-out and a merge);
    - "split_no_default": branches "even" (non-null even ``num``) and "nokey" (null key,
      ``Branched.withFunction`` of ``mapValues``), merged: the others are dropped;
    - "repartition": ``repartition()``;
    - "merge_other": merged with ``stream("other")``.
    """

    kind: ClassVar[str] = "stateless"
    ops: tuple[str, ...]
    count: bool = False


@dataclass(frozen=True)
class StreamStreamJoinParams:
    """``stream("in").join/leftJoin/outerJoin(stream("table"), joiner, windows)`` with
    ``JoinWindows.ofTimeDifferenceAndGrace(diff, grace)`` (``ofTimeDifferenceWithNoGrace``
    when grace is None), then ``.before(before)`` and ``.after(after)`` when set."""

    kind: ClassVar[str] = "stream_stream_join"
    join: JoinType
    diff: int
    grace: int | None = None
    before: int | None = None
    after: int | None = None


@dataclass(frozen=True)
class BytesStreamJoinParams:
    """A stream-stream join with Bytes (issue 26): ``stream("in")`` with ``stream("table")``,
    a side in ``sides`` ("left", "right", "both") with its values mapped to bytes (0xff 0x00,
    then the value's text's UTF-8; a null stays null); with ``keys``, both sides' keys to
    their UTF-8 bytes by ``selectKey`` (both through repartition topics). ``StreamJoined
    .with(key: Bytes or String, each side's value: Bytes or the input's)``, windows
    ``ofTimeDifferenceAndGrace(diff, grace)`` (no grace when None). "out" gets the key (its
    hex when bytes; a null as "null") and "left|right", bytes as hex, a null as "null"."""

    kind: ClassVar[str] = "bytes_stream_join"
    join: JoinType
    diff: int
    grace: int | None
    sides: Literal["left", "right", "both"]
    keys: bool = False


@dataclass(frozen=True)
class CogroupParams:
    """``stream("in").groupByKey().cogroup(+)`` with ``stream("table")`` (aggregator ``-``)
    and, with ``repartition``, ``stream("other").selectKey(identity)`` (``*``, so through a
    repartition topic), then ``aggregate("0")``, or per window first: ``windows`` "tumbling"
    (``size``), "hopping" (``size``, ``advance``), "sliding" (``size`` the time difference)
    or "session" (``size`` the gap; merger "&"); ``grace`` None is no grace (KIP-150).
    Each aggregator appends its sign and the value ("null" for a null)."""

    kind: ClassVar[str] = "cogroup"
    windows: Literal["none", "tumbling", "hopping", "sliding", "session"] = "none"
    size: int = 0
    grace: int | None = None
    advance: int | None = None
    repartition: bool = False
    # Serdes as CogroupedKStreamImpl passes them: the repartitioned input grouped with
    # ``Grouped.with("cg", String, serdes)`` (a value serde that does not fit fails the run
    # at its repartition topic), the store ``Materialized.with(String, String)``, and
    # to("out") given no serde (the table's are taken: its store's, the key's windowed).
    serdes: Literal["long", "string"] | None = None


@dataclass(frozen=True)
class ForeignKeyJoinParams:
    """``table("in").join/leftJoin(table("table"), foreignKeyExtractor, joiner)`` (KIP-213),
    the result materialized or not, its updates to "out". The extractor maps a value whose
    ``num`` (see StatelessParams) is n to "a", "b", "c" for n mod 4 = 0, 1, 2, and to null
    for 3; the joiner writes "left|right"."""

    kind: ClassVar[str] = "fk_join"
    join: JoinType
    materialized: bool = False


@dataclass(frozen=True)
class BytesForeignKeyJoinParams:
    """A foreign-key join of tables keyed by Bytes (issue 26), ``keys`` saying which: "both",
    "this" (table "in") or "other" (table "table"). A side keyed by Bytes is
    ``stream(topic).map(key: bytes.fromhex(key)).toTable(Materialized.with(Bytes, values))``
    (through a repartition topic, as toTable after a key change; the scenario's keys are hex:
    "", "00", "0000", "ff", "ff00": empty, NUL, not UTF-8, prefixes of each other), a side
    keyed by String ``table(topic)``. The foreign key of a value whose ``num`` is n is
    ("", "00", "0000", "ff", "ff00", null)[n mod 6], as bytes when the other table is keyed
    by Bytes; the joiner writes "left|right"; "out"'s key is the primary key's hex (Bytes)
    or the key itself (String). ``values``: the scenario's value_serde (the tables')."""

    kind: ClassVar[str] = "bytes_fk_join"
    join: JoinType
    keys: Literal["both", "this", "other"] = "both"
    materialized: bool = False
    values: Literal["long", "string"] = "long"


@dataclass(frozen=True)
class ProcessorParams:
    """The Processor API: ``stream("in").process(counter, "counts")`` (``processValues``
    with ``fixed_key``), the same processor in Python and Java: a per-key running count in
    a key-value store "counts", forwarding (key, count) at the record's timestamp for each
    record with a key, and a stream-time punctuator every ``interval`` ms forwarding
    (key, -count) at the punctuation's stream time for each key in key order, then clearing
    the store. ``store``: the store's serdes (``Stores.key_value_store_builder(supplier,
    key_serde, value_serde)``): "long" String keys and Long counts; "bytes" Bytes keys (the
    key's UTF-8) and Bytes counts (their decimal text), so the punctuator's key order is
    unsigned byte order; "string" a String value serde, which no count fits (the first put
    of a keyed record fails)."""

    kind: ClassVar[str] = "processor"
    interval: int
    fixed_key: bool = False
    store: Literal["long", "bytes", "string"] = "long"


Params = (
    ProcessorParams
    | StatelessParams
    | AggregateParams
    | GroupedSerdesParams
    | BytesStoreParams
    | SerdeFlowParams
    | TimeWindowedParams
    | SessionWindowedParams
    | SlidingWindowedParams
    | StreamTableJoinParams
    | TableTableJoinParams
    | StreamStreamJoinParams
    | BytesStreamJoinParams
    | CogroupParams
    | ForeignKeyJoinParams
    | BytesForeignKeyJoinParams
)


@dataclass(frozen=True)
class Scenario:
    name: str
    params: Params
    inputs: tuple[Input, ...]
    value_serde: Literal["long", "string"] = "long"

    @property
    def kind(self) -> str:
        return self.params.kind

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "params": asdict(self.params),
            "value_serde": self.value_serde,
            "inputs": [asdict(i) for i in self.inputs],
        }


@dataclass(frozen=True)
class OutRecord:
    """One record of the output topic. ``window_*`` are None for unwindowed keys; a session
    window's end is its last record's timestamp (inclusive), as in Kafka. ``input`` is the
    index of the input record whose processing output it."""

    key: Any
    window_start: int | None
    window_end: int | None
    value: Any
    ts: int
    input: int


@dataclass(frozen=True)
class Outcome:
    """What a scenario gave: the output records in order, the records dropped (null key or
    value, or too late for their window), and the error that stopped it, if one did."""

    records: tuple[OutRecord, ...]
    dropped_records: int | None
    error: str | None = None
