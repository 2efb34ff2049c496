"""lakestate's twin of each topology kind (kstreams/.../Topologies.java builds Kafka's).

``BUILDERS`` maps a kind to the function building its topology with lakestate's DSL, the
same functions as the Java side: reduce sums (a null as 0); aggregate starts from "0" and appends
"+value"; a session merger joins two aggregates as "one&two". A kind (or option) lakestate
cannot build yet raises NotImplementedError naming it, so its tests skip instead of fail.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import lakestate as ls
from scenario import (
    INPUT_TOPIC,
    OTHER_TOPIC,
    OUTPUT_TOPIC,
    TABLE_TOPIC,
    AggregateParams,
    Buffer,
    BytesForeignKeyJoinParams,
    BytesStoreParams,
    BytesStreamJoinParams,
    CogroupParams,
    ForeignKeyJoinParams,
    GroupedSerdesParams,
    Params,
    ProcessorParams,
    SerdeFlowParams,
    SessionWindowedParams,
    SlidingWindowedParams,
    StatelessParams,
    StreamStreamJoinParams,
    StreamTableJoinParams,
    Suppress,
    TableTableJoinParams,
    TimeWindowedParams,
)


# Windowed aggregations pass null values on (unwindowed ones drop them): as in Java, sum
# counts a null as 0 and append writes it as "null".
def _sum(agg: int | None, value: int | None) -> int:
    return (agg or 0) + (value or 0)


def _init() -> str:
    return "0"


def _append(_key: Any, value: Any, agg: str) -> str:
    return f"{agg}+{'null' if value is None else value}"


def _merge(_key: Any, one: str, two: str) -> str:
    return f"{one}&{two}"


def _ms(millis: int) -> timedelta:
    return timedelta(milliseconds=millis)


def _require(name: str, kind: str) -> Any:
    """``lakestate.<name>``, or NotImplementedError while lakestate lacks it."""
    if not hasattr(ls, name):
        raise NotImplementedError(f"lakestate does not build {kind} yet (no lakestate.{name})")
    return getattr(ls, name)


def _grouped(builder: ls.StreamsBuilder) -> ls.KGroupedStream:
    return builder.stream(INPUT_TOPIC).group_by_key()


def _aggregated(
    grouped: Any, aggregation: str, session: bool = False, retention: int | None = None
) -> ls.KTable:
    """count / reduce / aggregate of a grouped (or windowed) stream; a window store kept
    ``retention`` ms when given. The store's serdes as the Kafka side gives them: String
    keys, a count's Long, an aggregate's String (a reduce's value serde, the input's, is
    not known here: Json)."""
    strings = ls.Serdes.String()
    values = {"count": ls.Serdes.Long(), "aggregate": strings}.get(aggregation)
    m = ls.Materialized.with_(strings, values)
    if retention is not None:
        m = m.with_retention(_ms(retention))
    if aggregation == "count":
        return grouped.count(m)
    if aggregation == "reduce":
        return grouped.reduce(_sum, m)
    if aggregation == "aggregate":
        if session:
            return grouped.aggregate(_init, _append, _merge, m)
        return grouped.aggregate(_init, _append, m)
    raise ValueError(f"unknown aggregation {aggregation!r}")


def _suppressed(table: ls.KTable, suppress: Suppress | None) -> ls.KTable:
    if suppress is None:
        return table
    kind = f"suppress(until {suppress.until})"
    suppressed_cls = _require("Suppressed", kind)
    buffer = _buffer_config(suppress.buffer, kind)
    if suppress.until == "window_closes":
        return table.suppress(suppressed_cls.until_window_closes(buffer))
    assert suppress.time_limit is not None, "until time_limit needs a time_limit"
    return table.suppress(suppressed_cls.until_time_limit(_ms(suppress.time_limit), buffer))


def _buffer_config(buffer: Buffer, kind: str) -> Any:
    config_cls = _require("BufferConfig", kind)
    if buffer.unbounded:
        return config_cls.unbounded()
    if buffer.max_records is not None:
        config = config_cls.max_records(buffer.max_records)
        if buffer.max_bytes is not None:
            config = config.with_max_bytes(buffer.max_bytes)
    else:
        config = config_cls.max_bytes(buffer.max_bytes)
    if buffer.when_full == "emit_early":
        return config.emit_early_when_full()
    if buffer.when_full == "shut_down":
        return config.shut_down_when_full()
    return config.spill_to_disk_when_full()


# -- the kinds -----------------------------------------------------------------------------


def aggregate(params: AggregateParams) -> ls.Topology:
    builder = ls.StreamsBuilder()
    table = _aggregated(_grouped(builder), params.aggregation)
    _suppressed(table, params.suppress).to_stream().to(OUTPUT_TOPIC)
    return builder.build()


def _regroup(key: str | None, _value: Any) -> str | None:
    return None if key is None else "c" if key == "c" else "ab"


def grouped_serdes(params: GroupedSerdesParams) -> ls.Topology:
    builder = ls.StreamsBuilder()
    values = ls.Serdes.Long() if params.values == "long" else ls.Serdes.String()
    grouped = builder.stream(INPUT_TOPIC).group_by(
        _regroup, ls.Grouped.with_("regrouped", ls.Serdes.String(), values)
    )
    store = ls.Materialized.as_("grouped-store")  # the serdes: Kafka's defaults
    if params.aggregation == "count":
        table = grouped.count(store)
    elif params.aggregation == "reduce":
        table = grouped.reduce(_sum, store)
    else:
        table = grouped.aggregate(_init, _append, store.with_value_serde(ls.Serdes.String()))
    table.to_stream().to(OUTPUT_TOPIC)
    return builder.build()


def bytes_store(params: BytesStoreParams) -> ls.Topology:
    builder = ls.StreamsBuilder()
    grouped = (
        builder.stream(INPUT_TOPIC)
        .map(
            lambda k, v: (
                None if k is None else k.encode(),
                None if v is None else b"\xff\x00" + str(v).encode(),
            )
        )
        .group_by_key(ls.Grouped.with_(ls.Serdes.Bytes(), ls.Serdes.Bytes()))
    )
    store = ls.Materialized.as_("bytes-store")  # the serdes: Kafka's defaults
    if params.window is not None:
        windowed = grouped.windowed_by(ls.TimeWindows.of_size_with_no_grace(_ms(params.window)))
        final = ls.Suppressed.until_window_closes(ls.BufferConfig.unbounded())
        if params.aggregation == "count":
            table = windowed.count(store).suppress(final).map_values(str)
        else:
            reduced = windowed.reduce(lambda agg, v: (agg + v)[-6:], store)
            table = reduced.suppress(final).map_values(bytes.hex)
        table.to_stream().map(lambda w, v: (f"{w.key.hex()}@{w.window.start}", v)).to(OUTPUT_TOPIC)
        return builder.build()
    if params.aggregation == "count":
        table = grouped.count(store).map_values(str)
    else:
        table = grouped.reduce(lambda agg, v: (agg + v)[-6:], store).map_values(bytes.hex)
    table.to_stream().map(lambda k, v: (k.hex(), v)).to(OUTPUT_TOPIC)
    return builder.build()


def _serde_of(name: str) -> ls.Serde:
    return ls.Serdes.Long() if name == "long" else ls.Serdes.String()


def serde_flow(params: SerdeFlowParams) -> ls.Topology:
    builder = ls.StreamsBuilder()
    value_serde = _serde_of(params.values)
    stream = builder.stream(INPUT_TOPIC, ls.Consumed.with_(ls.Serdes.String(), value_serde))
    if params.step == "filter":
        stream = stream.filter(lambda k, v: True)
    else:  # Java's String.valueOf of a Long or a String
        stream = stream.map_values(lambda v: None if v is None else str(v))
    if params.repartition is not None:
        serde = _serde_of(params.repartition)
        stream = stream.repartition(
            ls.Repartitioned.with_(ls.Serdes.String(), serde).with_name("rp")
        )
    if params.join is not None:
        other = builder.stream(TABLE_TOPIC, ls.Consumed.with_(ls.Serdes.String(), value_serde))
        joined = ls.StreamJoined.with_(ls.Serdes.String(), _serde_of(params.join), value_serde)
        windows = ls.JoinWindows.of_time_difference_without_grace(_ms(3))
        stream = stream.join(other, _joined, windows, joined)
    if params.window is None:
        produced = (
            None
            if params.produced is None
            else ls.Produced.with_value_serde(_serde_of(params.produced))
        )
        stream.group_by_key().count().to_stream().to(OUTPUT_TOPIC, produced)
        return builder.build()
    if params.window == "session":
        windows: Any = ls.SessionWindows.of_inactivity_gap_with_no_grace(_ms(5))
    else:
        windows = ls.TimeWindows.of_size_with_no_grace(_ms(5))
    counts = stream.group_by_key().windowed_by(windows).count()
    if params.suppressed:
        counts = counts.suppress(ls.Suppressed.until_window_closes(ls.BufferConfig.unbounded()))
    counts.to_stream().to(OUTPUT_TOPIC)
    return builder.build()


def time_windowed_aggregate(params: TimeWindowedParams) -> ls.Topology:
    windows_cls = _require("TimeWindows", params.kind)
    if params.grace is None:
        windows = windows_cls.of_size_with_no_grace(_ms(params.size))
    else:
        windows = windows_cls.of_size_and_grace(_ms(params.size), _ms(params.grace))
    if params.advance is not None:
        windows = windows.advance_by(_ms(params.advance))
    builder = ls.StreamsBuilder()
    grouped = _grouped(builder).windowed_by(windows)
    table = _aggregated(grouped, params.aggregation, retention=params.retention)
    _suppressed(table, params.suppress).to_stream().to(OUTPUT_TOPIC)
    return builder.build()


def session_windowed_aggregate(params: SessionWindowedParams) -> ls.Topology:
    windows_cls = _require("SessionWindows", params.kind)
    if params.grace is None:
        windows = windows_cls.of_inactivity_gap_with_no_grace(_ms(params.gap))
    else:
        windows = windows_cls.of_inactivity_gap_and_grace(_ms(params.gap), _ms(params.grace))
    builder = ls.StreamsBuilder()
    grouped = _grouped(builder).windowed_by(windows)
    table = _aggregated(grouped, params.aggregation, session=True, retention=params.retention)
    _suppressed(table, params.suppress).to_stream().to(OUTPUT_TOPIC)
    return builder.build()


def sliding_windowed_aggregate(params: SlidingWindowedParams) -> ls.Topology:
    windows_cls = _require("SlidingWindows", params.kind)
    difference = _ms(params.time_difference)
    if params.grace is None:
        windows = windows_cls.of_time_difference_with_no_grace(difference)
    else:
        windows = windows_cls.of_time_difference_and_grace(difference, _ms(params.grace))
    builder = ls.StreamsBuilder()
    table = _aggregated(_grouped(builder).windowed_by(windows), params.aggregation)
    _suppressed(table, params.suppress).to_stream().to(OUTPUT_TOPIC)
    return builder.build()


def _joined(left: Any, right: Any) -> str:
    return f"{'null' if left is None else left}|{'null' if right is None else right}"


def _table(builder: ls.StreamsBuilder, topic: str, store: str, retention: int | None) -> ls.KTable:
    if retention is None:
        return builder.table(topic, ls.Materialized.as_(store))
    return builder.table(topic, ls.Materialized.as_versioned(store, _ms(retention)))


def stream_table_join(params: StreamTableJoinParams) -> ls.Topology:
    builder = ls.StreamsBuilder()
    table = _table(builder, TABLE_TOPIC, "table-store", params.history_retention)
    stream = builder.stream(INPUT_TOPIC)
    # As the Kafka side: Joined's String key serde types the repartition topic of a rekey.
    typed = ls.Joined.with_(ls.Serdes.String(), None, None)
    if params.rekey:
        stream = stream.select_key(lambda k, v: k)
    if params.join == "inner":
        joined = stream.join(table, _joined, typed)
    elif params.join == "left":
        joined = stream.left_join(table, _joined, typed)
    else:
        raise ValueError(f"a stream-table join is inner or left, not {params.join!r}")
    joined.to(OUTPUT_TOPIC)
    return builder.build()


def table_table_join(params: TableTableJoinParams) -> ls.Topology:
    builder = ls.StreamsBuilder()
    left = _table(builder, INPUT_TOPIC, "left-store", params.left_retention)
    right = _table(builder, TABLE_TOPIC, "right-store", params.right_retention)
    join = {"inner": left.join, "left": left.left_join, "outer": left.outer_join}[params.join]
    # Only a value serde, as the Kafka side: the store's key serde is the left table's.
    strings = ls.Serdes.String()
    materialized = (
        ls.Materialized.as_("joined").with_value_serde(strings) if params.materialized else None
    )
    join(right, _joined, materialized=materialized).to_stream().to(OUTPUT_TOPIC)
    return builder.build()


# -- stateless operators (StatelessParams has the functions in words) ----------------------


def _num(value: int | str) -> int:
    return value if isinstance(value, int) else int(value[1:])


def _plus(value: int | str, n: int) -> int | str:
    return value + n if isinstance(value, int) else f"v{_num(value) + n}"


def _flat_mapped(key: str | None, value: Any) -> list[tuple[Any, Any]]:
    if value is None:
        return [(key, None)]
    other = "z" if key is None else (None if key == "a" else key + "1")
    return [(key, value), (other, value)][: len(str(value)) % 3]


def _flat_mapped_values(value: Any) -> list[Any]:
    if value is None:
        return [None, None]
    return [] if _num(value) % 2 == 0 else [value, _plus(value, 1)]


def _split(stream: ls.KStream, i: int) -> ls.KStream:
    named, branched = _require("Named", "split"), _require("Branched", "split")
    branches = (
        stream.split(named.as_(f"s{i}-"))
        .branch(lambda k, v: v is not None and _num(v) > 5, branched.as_("big"))
        .branch(lambda k, v: v is None)
        .default_branch()
    )
    big = branches[f"s{i}-big"].map_values(lambda v: _plus(v, 10))
    rest = branches[f"s{i}-0"].filter(lambda k, v: _num(v) % 3 != 0)
    merged = big.merge(branches[f"s{i}-2"]).merge(rest)
    return merged.merge(stream.filter(lambda k, v: k == "a"))


def _split_no_default(stream: ls.KStream, i: int) -> ls.KStream:
    named, branched = _require("Named", "split"), _require("Branched", "split")
    branches = (
        stream.split(named.as_(f"n{i}-"))
        .branch(lambda k, v: v is not None and _num(v) % 2 == 0, branched.as_("even"))
        .branch(
            lambda k, v: k is None,
            branched.with_function(lambda s: s.map_values(lambda v: v), "nokey"),
        )
        .no_default_branch()
    )
    return branches[f"n{i}-even"].merge(branches[f"n{i}-nokey"])


def stateless(params: StatelessParams) -> ls.Topology:
    builder = ls.StreamsBuilder()
    stream = builder.stream(INPUT_TOPIC)
    for i, op in enumerate(params.ops):
        if op == "flat_map":
            stream = stream.flat_map(_flat_mapped)
        elif op == "flat_map_values":
            stream = stream.flat_map_values(_flat_mapped_values)
        elif op == "split":
            stream = _split(stream, i)
        elif op == "split_no_default":
            stream = _split_no_default(stream, i)
        elif op == "repartition":
            stream = stream.repartition()
        elif op == "merge_other":
            stream = stream.merge(builder.stream(OTHER_TOPIC))
        else:
            raise ValueError(f"unknown stateless op {op!r}")
    if params.count:
        stream.group_by_key().count().to_stream().to(OUTPUT_TOPIC)
    else:
        stream.to(OUTPUT_TOPIC)
    return builder.build()


def stream_stream_join(params: StreamStreamJoinParams) -> ls.Topology:
    windows_cls = _require("JoinWindows", params.kind)
    if params.grace is None:
        windows = windows_cls.of_time_difference_without_grace(_ms(params.diff))
    else:
        windows = windows_cls.of_time_difference_and_grace(_ms(params.diff), _ms(params.grace))
    if params.before is not None:
        windows = windows.before(_ms(params.before))
    if params.after is not None:
        windows = windows.after(_ms(params.after))
    builder = ls.StreamsBuilder()
    left, right = builder.stream(INPUT_TOPIC), builder.stream(TABLE_TOPIC)
    join = {"inner": left.join, "left": left.left_join, "outer": left.outer_join}[params.join]
    join(right, _joined, windows).to(OUTPUT_TOPIC)
    return builder.build()


def _shown(value: Any) -> str:
    """A key or value as the bytes_stream_join kind writes it (Java's ``shown``)."""
    return value.hex() if isinstance(value, bytes) else _java_text(value)


def _java_text(value: Any) -> str:
    return "null" if value is None else str(value)


def _bytes_side(
    builder: ls.StreamsBuilder, topic: str, bytes_values: bool, bytes_keys: bool
) -> ls.KStream:
    side = builder.stream(topic)
    if bytes_values:
        side = side.map_values(lambda v: None if v is None else b"\xff\x00" + str(v).encode())
    if bytes_keys:
        side = side.select_key(lambda k, v: None if k is None else k.encode())
    return side


def bytes_stream_join(params: BytesStreamJoinParams) -> ls.Topology:
    builder = ls.StreamsBuilder()
    left = _bytes_side(builder, INPUT_TOPIC, params.sides != "right", params.keys)
    right = _bytes_side(builder, TABLE_TOPIC, params.sides != "left", params.keys)
    diff = _ms(params.diff)
    if params.grace is None:
        windows = ls.JoinWindows.of_time_difference_without_grace(diff)
    else:
        windows = ls.JoinWindows.of_time_difference_and_grace(diff, _ms(params.grace))
    b = ls.Serdes.Bytes()
    # The input's value serde is not known here (Json): the Kafka side's is the scenario's.
    joined = ls.StreamJoined.with_(
        b if params.keys else ls.Serdes.String(),
        None if params.sides == "right" else b,
        None if params.sides == "left" else b,
    )
    join = {"inner": left.join, "left": left.left_join, "outer": left.outer_join}[params.join]
    result = join(right, lambda v, o: f"{_shown(v)}|{_shown(o)}", windows, joined)
    result.map(lambda k, v: (_shown(k), v)).to(OUTPUT_TOPIC)
    return builder.build()


def _appender(sign: str) -> Callable[[Any, Any, str], str]:
    return lambda _key, value, agg: f"{agg}{sign}{'null' if value is None else value}"


def _cogroup_windows(params: CogroupParams) -> Any:
    size, grace = _ms(params.size), None if params.grace is None else _ms(params.grace)
    if params.windows in ("tumbling", "hopping"):
        windows_cls = _require("TimeWindows", params.kind)
        if grace is None:
            windows = windows_cls.of_size_with_no_grace(size)
        else:
            windows = windows_cls.of_size_and_grace(size, grace)
        if params.advance is not None:
            windows = windows.advance_by(_ms(params.advance))
        return windows
    if params.windows == "sliding":
        windows_cls = _require("SlidingWindows", params.kind)
        if grace is None:
            return windows_cls.of_time_difference_with_no_grace(size)
        return windows_cls.of_time_difference_and_grace(size, grace)
    windows_cls = _require("SessionWindows", params.kind)
    if grace is None:
        return windows_cls.of_inactivity_gap_with_no_grace(size)
    return windows_cls.of_inactivity_gap_and_grace(size, grace)


def cogroup(params: CogroupParams) -> ls.Topology:
    builder = ls.StreamsBuilder()
    cogrouped = _grouped(builder).cogroup(_appender("+"))
    cogrouped = cogrouped.cogroup(builder.stream(TABLE_TOPIC).group_by_key(), _appender("-"))
    strings = ls.Serdes.String()
    if params.repartition:
        grouped = None
        if params.serdes is not None:
            grouped = ls.Grouped.with_("cg", strings, _serde_of(params.serdes))
        other = builder.stream(OTHER_TOPIC).select_key(lambda k, v: k).group_by_key(grouped)
        cogrouped = cogrouped.cogroup(other, _appender("*"))
    store = None if params.serdes is None else ls.Materialized.with_(strings, strings)
    if params.windows == "none":
        table = cogrouped.aggregate(_init, store)
    elif params.windows == "session":
        table = cogrouped.windowed_by(_cogroup_windows(params)).aggregate(_init, _merge, store)
    else:
        table = cogrouped.windowed_by(_cogroup_windows(params)).aggregate(_init, store)
    table.to_stream().to(OUTPUT_TOPIC)
    return builder.build()


def _foreign_key(value: int | str) -> str | None:
    n = _num(value) % 4
    return None if n == 3 else "abc"[n]


def fk_join(params: ForeignKeyJoinParams) -> ls.Topology:
    builder = ls.StreamsBuilder()
    left = _table(builder, INPUT_TOPIC, "left-store", None)
    right = _table(builder, TABLE_TOPIC, "right-store", None)
    join = {"inner": left.join, "left": left.left_join}[params.join]
    strings = ls.Serdes.String()  # as the Kafka side: a value serde only
    materialized = (
        ls.Materialized.as_("joined").with_value_serde(strings) if params.materialized else None
    )
    join(right, _foreign_key, _joined, materialized=materialized).to_stream().to(OUTPUT_TOPIC)
    return builder.build()


HEX_FOREIGN_KEYS = ("", "00", "0000", "ff", "ff00", None)


def _keyed_table(builder: ls.StreamsBuilder, topic: str, as_bytes: bool, values: ls.Serde) -> Any:
    """bytes_fk_join's table of ``topic``: keyed by its keys' hex parsed (Bytes) or by them."""
    strings = ls.Serdes.String()
    if not as_bytes:
        return builder.table(topic, ls.Consumed.with_(strings, values))
    keyed = builder.stream(topic, ls.Consumed.with_(strings, values)).map(
        lambda k, v: (None if k is None else bytes.fromhex(k), v)
    )
    return keyed.to_table(ls.Materialized.with_(ls.Serdes.Bytes(), values))


def bytes_fk_join(params: BytesForeignKeyJoinParams) -> ls.Topology:
    builder = ls.StreamsBuilder()
    values = _serde_of(params.values)
    other_bytes = params.keys != "this"
    left = _keyed_table(builder, INPUT_TOPIC, params.keys != "other", values)
    right = _keyed_table(builder, TABLE_TOPIC, other_bytes, values)

    def foreign_key(value: int | str) -> bytes | str | None:
        hex_key = HEX_FOREIGN_KEYS[_num(value) % len(HEX_FOREIGN_KEYS)]
        return bytes.fromhex(hex_key) if other_bytes and hex_key is not None else hex_key

    join = {"inner": left.join, "left": left.left_join}[params.join]
    materialized = (
        ls.Materialized.as_("joined").with_value_serde(ls.Serdes.String())
        if params.materialized
        else None
    )
    result = join(right, foreign_key, _joined, materialized=materialized)
    result.to_stream().map(lambda k, v: (k.hex() if isinstance(k, bytes) else k, v)).to(
        OUTPUT_TOPIC, ls.Produced.with_(ls.Serdes.String(), ls.Serdes.String())
    )
    return builder.build()


class _CountStore:
    """How ``_Counter`` holds a count in store "counts", by ``ProcessorParams.store`` (its
    Java twin: Topologies.CountStore)."""

    def __init__(self, kind: str) -> None:
        self.bytes = kind == "bytes"
        serdes = ls.Serdes
        self.key_serde = serdes.Bytes() if self.bytes else serdes.String()
        self.value_serde = {"bytes": serdes.Bytes(), "string": serdes.String()}.get(
            kind, serdes.Long()
        )

    def key(self, key: str) -> Any:
        return key.encode() if self.bytes else key

    def key_back(self, key: Any) -> str:
        return key.decode() if self.bytes else key

    def value(self, count: int) -> Any:
        return str(count).encode() if self.bytes else count

    def value_back(self, value: Any) -> int:
        if value is None:
            return 0
        return int(value.decode()) if self.bytes else value


class _Counter:
    """The fixed processor of ``ProcessorParams`` (its Java twin: Topologies.Counter)."""

    def __init__(self, interval: int, counts: _CountStore) -> None:
        self.interval = interval
        self.counts = counts

    def init(self, context: Any) -> None:
        self.context = context
        self.store = context.get_state_store("counts")
        punctuation = _require("PunctuationType", ProcessorParams.kind).STREAM_TIME
        context.schedule(_ms(self.interval), punctuation, self.flush)

    def process(self, record: Any) -> None:
        if record.key is None:
            return
        counts, key = self.counts, self.counts.key(record.key)
        count = counts.value_back(self.store.get(key)) + 1
        self.store.put(key, counts.value(count))
        self.context.forward(record.with_value(count))

    def flush(self, stream_time: int) -> None:
        counts = self.counts
        for key, count in list(self.store.all()):
            self.context.forward(
                ls.Record(counts.key_back(key), -counts.value_back(count), stream_time)
            )
            self.store.delete(key)

    def close(self) -> None:
        pass


def processor(params: ProcessorParams) -> ls.Topology:
    stores = _require("Stores", params.kind)
    counts = _CountStore(params.store)
    builder = ls.StreamsBuilder()
    supplier = stores.persistent_key_value_store("counts")
    builder.add_state_store(
        stores.key_value_store_builder(supplier, counts.key_serde, counts.value_serde)
    )
    stream = builder.stream(INPUT_TOPIC)
    process = stream.process_values if params.fixed_key else stream.process
    process(lambda: _Counter(params.interval, counts), "counts").to(OUTPUT_TOPIC)
    return builder.build()


BUILDERS: dict[str, Callable[[Any], ls.Topology]] = {
    ProcessorParams.kind: processor,
    StatelessParams.kind: stateless,
    AggregateParams.kind: aggregate,
    GroupedSerdesParams.kind: grouped_serdes,
    BytesStoreParams.kind: bytes_store,
    SerdeFlowParams.kind: serde_flow,
    TimeWindowedParams.kind: time_windowed_aggregate,
    SessionWindowedParams.kind: session_windowed_aggregate,
    SlidingWindowedParams.kind: sliding_windowed_aggregate,
    StreamTableJoinParams.kind: stream_table_join,
    TableTableJoinParams.kind: table_table_join,
    StreamStreamJoinParams.kind: stream_stream_join,
    BytesStreamJoinParams.kind: bytes_stream_join,
    CogroupParams.kind: cogroup,
    ForeignKeyJoinParams.kind: fk_join,
    BytesForeignKeyJoinParams.kind: bytes_fk_join,
}


def build(params: Params) -> ls.Topology:
    builder = BUILDERS.get(params.kind)
    if builder is None:
        raise NotImplementedError(f"lakestate_kinds has no builder for {params.kind!r}")
    return builder(params)
