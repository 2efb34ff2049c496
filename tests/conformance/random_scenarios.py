"""Random scenarios, seeded so that a failure replays: out-of-order timestamps, null keys
and values, and timestamps placed on the boundaries where Kafka's behaviour turns.

Windows and grace periods are a few milliseconds, so random timestamps cross boundaries
often; on top of that, a third of the records are put exactly on one: a window's end + grace
- 1 and end + grace (the last stream time at which the window is open, the first at which
it is closed), a window's last millisecond, a window end + grace at the current stream time
(a record just in time or just too late), a session gap's edge (merge or not), a sliding
window's edges (a record time difference d from another, or d + 1; its left or right
window closing; the early records' window [0, d]), and a suppression time limit's edge.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace

from scenario import (
    INPUT_TOPIC,
    OTHER_TOPIC,
    TABLE_TOPIC,
    AggregateParams,
    Aggregation,
    Buffer,
    BytesForeignKeyJoinParams,
    BytesStoreParams,
    BytesStreamJoinParams,
    CogroupParams,
    ForeignKeyJoinParams,
    GroupedSerdesParams,
    Input,
    Params,
    ProcessorParams,
    Scenario,
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

KEYS = ("a", "b", "c")
AGGREGATIONS: tuple[Aggregation, ...] = ("count", "reduce", "aggregate")

Boundaries = Callable[[int, list[int]], list[int]]  # (stream time, recent ts) -> candidates


def _key(rng: random.Random) -> str | None:
    return None if rng.random() < 0.08 else rng.choice(KEYS)


def _value(rng: random.Random, serde: str) -> int | str | None:
    if rng.random() < 0.08:
        return None
    number = rng.randint(-3, 9)
    return number if serde == "long" else f"v{number}"


def inputs(rng: random.Random, n: int, boundaries: Boundaries, spread: int) -> list[Input]:
    """``n`` records: a random walk of timestamps (up to ``spread`` ms back or forth from
    the stream time), a third of them on a boundary ``boundaries`` gives instead."""
    records: list[Input] = []
    stream_time = rng.randint(0, 2 * spread)
    for _ in range(n):
        recent = [r.ts for r in records[-4:]]
        candidates = [t for t in boundaries(stream_time, recent) if t >= 0] if recent else []
        if candidates and rng.random() < 0.35:
            ts = rng.choice(candidates)
            # A boundary means something for the key it was computed from: reuse it mostly.
            key = records[-1].key if rng.random() < 0.7 else _key(rng)
        else:
            ts = max(0, stream_time + rng.randint(-spread, spread))
            key = _key(rng)
        records.append(Input(key, None, ts))
        stream_time = max(stream_time, ts)
    return records


def _with_values(rng: random.Random, records: list[Input], serde: str) -> tuple[Input, ...]:
    return tuple(Input(r.key, _value(rng, serde), r.ts, r.topic) for r in records)


def time_window_boundaries(size: int, grace: int, advance: int) -> Boundaries:
    def candidates(stream_time: int, recent: list[int]) -> list[int]:
        out = []
        for ts in recent:
            # The windows holding ts start at multiples of advance in (ts - size, ts].
            first = max(0, (ts - size) // advance + 1)
            for start in range(first * advance, ts + 1, advance):
                end = start + size
                out += [end + grace - 1, end + grace, end - 1]
        # A window whose end + grace is the stream time (closed) or one past it (open).
        for target in (stream_time - grace, stream_time - grace + 1):
            end = ((target - size) // advance) * advance + size
            out += [end - 1, end - size]
        return out

    return candidates


def session_boundaries(gap: int, grace: int) -> Boundaries:
    def candidates(stream_time: int, recent: list[int]) -> list[int]:
        out = [t + d for t in recent for d in (gap, gap + 1, -gap, -gap - 1)]
        for d in (-1, 0, 1):
            out += [stream_time - grace + d, stream_time - grace - gap + d]
        return out

    return candidates


def sliding_boundaries(difference: int, grace: int) -> Boundaries:
    """Sliding windows of time difference d: a record d or d + 1 from a recent one (in its
    left or right window, or just out), the same time or one apart; a record whose left
    window (or a recent record's left or right window) closes at the stream time or one
    later; the early records' window [0, d] and its edge."""

    def candidates(stream_time: int, recent: list[int]) -> list[int]:
        d = difference
        out = [t + s for t in recent for s in (0, 1, -1, d, d + 1, -d, -d - 1, 2 * d + 1)]
        close = stream_time - grace
        out += [close - d - 1, close - d, close - d + 1]  # its own left window's end
        # a recent record's left window [t - d, t] or right window [t + 1, t + 1 + d]
        # closes when stream time reaches its end + grace + 1
        out += [t + grace + e for t in recent for e in (0, 1, d + 1, d + 2)]
        out += [d - 1, d, d + 1]
        return out

    return candidates


def time_limit_boundaries(limit: int, inner: Boundaries) -> Boundaries:
    def candidates(stream_time: int, recent: list[int]) -> list[int]:
        return inner(stream_time, recent) + [t + limit + d for t in recent for d in (-1, 0)]

    return candidates


def no_boundaries(stream_time: int, recent: list[int]) -> list[int]:
    return list(recent)  # equal timestamps: ties keep the first aggregate's timestamp


# -- scenario groups -----------------------------------------------------------------------


def _serde(rng: random.Random, aggregation: str) -> str:
    # reduce sums longs; count and aggregate take strings too.
    return "long" if aggregation == "reduce" or rng.random() < 0.6 else "string"


def _scenario(
    rng: random.Random, name: str, params: Params, boundaries: Boundaries, spread: int
) -> Scenario:
    serde = _serde(rng, params.aggregation)
    records = inputs(rng, rng.randint(8, 40), boundaries, spread)
    return Scenario(name, params, _with_values(rng, records, serde), serde)


def _time_windows(
    rng: random.Random, aggregation: Aggregation, hopping: bool, suppress: Suppress | None = None
) -> tuple[TimeWindowedParams, Boundaries]:
    size = rng.choice((3, 5, 10))
    grace = rng.choice((None, 0, 1, 4))
    advance = rng.choice([a for a in (1, 2, size // 2) if 0 < a < size]) if hopping else None
    # Sometimes a store kept longer than Kafka's default (size + grace): output unchanged.
    retention = rng.choice((None, None, size + (grace or 0) + rng.choice((0, 3, 20))))
    params = TimeWindowedParams(aggregation, size, grace, advance, suppress, retention)
    return params, time_window_boundaries(size, grace or 0, advance or size)


def _session_windows(
    rng: random.Random, aggregation: Aggregation, suppress: Suppress | None = None
) -> tuple[SessionWindowedParams, Boundaries]:
    gap = rng.choice((2, 3, 5))
    grace = rng.choice((None, 0, 1, 4))
    # Sometimes a store kept longer than gap + grace: a later record then merges a closed
    # session still retained, as in Kafka.
    retention = rng.choice((None, None, gap + (grace or 0) + rng.choice((0, 2, 10))))
    return SessionWindowedParams(aggregation, gap, grace, suppress, retention), session_boundaries(
        gap, grace or 0
    )


def _sliding_windows(
    rng: random.Random, aggregation: Aggregation, suppress: Suppress | None = None
) -> tuple[SlidingWindowedParams, Boundaries]:
    difference = rng.choice((1, 2, 3, 5, 10))
    grace = rng.choice((None, 0, 1, 4))
    return SlidingWindowedParams(aggregation, difference, grace, suppress), sliding_boundaries(
        difference, grace or 0
    )


def unwindowed(seed: int, aggregation: Aggregation, count: int) -> list[Scenario]:
    rng = random.Random(f"{seed}/aggregate/{aggregation}")
    return [
        _scenario(
            rng, f"aggregate-{aggregation}-{i}", AggregateParams(aggregation), no_boundaries, 5
        )
        for i in range(count)
    ]


def grouped_serdes(seed: int, aggregation: Aggregation, count: int) -> list[Scenario]:
    """``groupBy`` with Grouped serdes into a store with Kafka's default store serdes; the
    Grouped value serde is the scenario's value serde."""
    rng = random.Random(f"{seed}/grouped_serdes/{aggregation}")
    scenarios = []
    for i in range(count):
        serde = _serde(rng, aggregation)
        records = inputs(rng, rng.randint(8, 40), no_boundaries, 5)
        params = GroupedSerdesParams(aggregation, serde)
        name = f"grouped_serdes-{aggregation}-{i}"
        scenarios.append(Scenario(name, params, _with_values(rng, records, serde), serde))
    return scenarios


def bytes_stores(seed: int, aggregation: Aggregation, count: int) -> list[Scenario]:
    """A count or reduce into a store with Bytes serdes; the keys also empty and not ASCII
    (their UTF-8 bytes are the store's keys)."""
    rng = random.Random(f"{seed}/bytes_store/{aggregation}")
    scenarios = []
    for i in range(count):
        serde = _serde(rng, "count")
        records = inputs(rng, rng.randint(8, 40), no_boundaries, 5)
        records = [
            replace(r, key=rng.choice(["", "\u00e9"])) if rng.random() < 0.2 else r for r in records
        ]
        params = BytesStoreParams(aggregation)
        name = f"bytes_store-{aggregation}-{i}"
        scenarios.append(Scenario(name, params, _with_values(rng, records, serde), serde))
    return scenarios


def bytes_stores_suppressed(seed: int, aggregation: Aggregation, count: int) -> list[Scenario]:
    """A windowed count or reduce into a store with Bytes serdes, suppressed until its
    windows close (the buffer holds a windowed Bytes key and a Long or Bytes value)."""
    rng = random.Random(f"{seed}/bytes_store_suppressed/{aggregation}")
    scenarios = []
    for i in range(count):
        serde = _serde(rng, "count")
        size = rng.choice([3, 5, 10])
        boundaries = time_window_boundaries(size, 0, size)
        records = inputs(rng, rng.randint(8, 40), boundaries, 6)
        records = [
            replace(r, key=rng.choice(["", "\u00e9"])) if rng.random() < 0.2 else r for r in records
        ]
        params = BytesStoreParams(aggregation, window=size)
        name = f"bytes_store-suppressed-{aggregation}-{i}"
        scenarios.append(Scenario(name, params, _with_values(rng, records, serde), serde))
    return scenarios


def serde_flows(seed: int, count: int) -> list[Scenario]:
    """Serdes carried from Consumed through a filter or a ``mapValues`` to text, into a
    repartition topic and a stream-stream join with serdes that fit or do not (a record that
    does not fit fails the run: at the topic, or at the buffer store after the join looked
    for partners, as Kafka's KStreamJoinWindow forwards before it puts), then a count with
    no serdes given (issue 26). Some inputs go to "table", the join's other side."""
    rng = random.Random(f"{seed}/serde_flow")
    scenarios = []
    for i in range(count):
        serde = rng.choice(("long", "string"))
        step = rng.choice(("filter", "to_string"))
        repartition = rng.choice((None, "long", "string"))
        join = rng.choice((None, None, "long", "string"))
        # The window and suppress from an rng of their own: the older params stay as they were.
        extra = random.Random(f"{seed}/serde_flow/window/{i}")
        window = extra.choice((None, None, "tumbling", "session"))
        suppressed = window is not None and extra.random() < 0.5
        # An explicit Produced value serde, where no join may leave the count without input.
        produced = None
        if window is None and join is None:
            produced = extra.choice((None, "long", "string"))
        params = SerdeFlowParams(step, repartition, join, serde, window, suppressed, produced)
        records = inputs(rng, rng.randint(8, 30), join_window_boundaries(3, 3, 0), 5)
        records = [
            replace(r, topic=TABLE_TOPIC if join and rng.random() < 0.5 else r.topic)
            for r in records
        ]
        scenarios.append(
            Scenario(f"serde_flow-{i}", params, _with_values(rng, records, serde), serde)
        )
    return scenarios


def windowed(seed: int, shape: str, aggregation: Aggregation, count: int) -> list[Scenario]:
    """``shape``: "tumbling", "hopping", "sliding" or "session"."""
    rng = random.Random(f"{seed}/{shape}/{aggregation}")
    scenarios = []
    for i in range(count):
        if shape == "session":
            params, boundaries = _session_windows(rng, aggregation)
        elif shape == "sliding":
            params, boundaries = _sliding_windows(rng, aggregation)
        else:
            params, boundaries = _time_windows(rng, aggregation, shape == "hopping")
        scenarios.append(_scenario(rng, f"{shape}-{aggregation}-{i}", params, boundaries, 6))
    return scenarios


def _buffer(rng: random.Random, max_bytes: bool, strict: bool) -> Buffer:
    """A random buffer config: unbounded, or bounded by records (or by bytes, with
    ``max_bytes``); strict ones never emit early (what until_window_closes takes)."""
    when_full = "shut_down" if strict else rng.choice(("emit_early", "emit_early", "shut_down"))
    if max_bytes:
        # Kafka counts a buffered record as its serialized key, value and prior value plus
        # its record context, some 40 bytes here: these limits hold one to a few records.
        return Buffer(max_bytes=rng.choice((60, 150, 300)), when_full=when_full)
    if rng.random() < 0.4:
        return Buffer()
    return Buffer(max_records=rng.randint(1, 4), when_full=when_full)


def suppressed(
    seed: int, group: str, until: str, shapes: tuple[str, ...], count: int, max_bytes: bool = False
) -> list[Scenario]:
    """Suppressed tables, ``until`` "window_closes" or "time_limit", over aggregations of
    the ``shapes`` ("tumbling", "hopping", "sliding", "session", "unwindowed"); buffers bounded by
    bytes only with ``max_bytes``. Scenarios are named ``{group}-{i}``."""
    rng = random.Random(f"{seed}/{group}")
    scenarios = []
    for i in range(count):
        aggregation = rng.choice(AGGREGATIONS)
        if until == "window_closes":
            buffer = Buffer() if rng.random() < 0.6 else _buffer(rng, max_bytes, strict=True)
            suppress = Suppress("window_closes", None, buffer)
        else:
            buffer = _buffer(rng, max_bytes, strict=False)
            suppress = Suppress("time_limit", rng.choice((0, 1, 3, 8)), buffer)
        shape = rng.choice(shapes)
        if shape == "unwindowed":
            params, boundaries = AggregateParams(aggregation, suppress), no_boundaries
        elif shape == "session":
            params, boundaries = _session_windows(rng, aggregation, suppress)
        elif shape == "sliding":
            params, boundaries = _sliding_windows(rng, aggregation, suppress)
        else:
            params, boundaries = _time_windows(rng, aggregation, shape == "hopping", suppress)
        if suppress.time_limit is not None:
            boundaries = time_limit_boundaries(suppress.time_limit, boundaries)
        scenarios.append(_scenario(rng, f"{group}-{i}", params, boundaries, 6))
    return scenarios


def spilling(seed: int, count: int) -> list[Scenario]:
    """Suppression buffers that spill to disk when full: lakestate only (Kafka plays them
    unbounded; see harness.for_kafka)."""
    rng = random.Random(f"{seed}/spill")
    scenarios = []
    for i in range(count):
        aggregation = rng.choice(AGGREGATIONS)
        buffer = Buffer(max_records=rng.randint(1, 3), when_full="spill_to_disk")
        if rng.random() < 0.5:
            suppress = Suppress("window_closes", None, buffer)
        else:
            suppress = Suppress("time_limit", rng.choice((1, 3)), buffer)
        params, boundaries = _time_windows(rng, aggregation, rng.random() < 0.5, suppress)
        scenarios.append(_scenario(rng, f"spill-{i}", params, boundaries, 6))
    return scenarios


# -- joins -----------------------------------------------------------------------------------


def retention_boundaries(retentions: tuple[int, ...]) -> Boundaries:
    """Timestamps at the edge of a versioned store's history retention (stream time - R,
    one either side: a put or lookup just within or just beyond it), and equal timestamps."""

    def candidates(stream_time: int, recent: list[int]) -> list[int]:
        out = list(recent)
        for retention in retentions:
            out += [stream_time - retention + d for d in (-1, 0, 1)]
        return out

    return candidates


def _join_scenario(
    rng: random.Random, name: str, params: Params, retentions: tuple[int, ...]
) -> Scenario:
    """Records on both topics ("in" and "table"), out of order, with null keys and values;
    the table side gets the first records more often, so that joins find rows."""
    serde = "long" if rng.random() < 0.5 else "string"
    records = inputs(rng, rng.randint(8, 40), retention_boundaries(retentions), 6)
    topics = [
        INPUT_TOPIC if rng.random() < 0.5 - 0.3 * (i < 4) else TABLE_TOPIC
        for i in range(len(records))
    ]
    records = [replace(r, topic=t) for r, t in zip(records, topics, strict=True)]
    return Scenario(name, params, _with_values(rng, records, serde), serde)


def _retention(rng: random.Random, versioned: bool) -> int | None:
    return rng.choice((1, 3, 8, 50)) if versioned else None


def stream_table_joins(
    seed: int, versioned: bool, count: int, rekey: bool = False
) -> list[Scenario]:
    """Stream-table joins, inner and left, with a versioned table or a plain one; with
    ``rekey``, the stream re-keyed first (through the join's typed repartition topic)."""
    group = f"join-stream_table-{'versioned' if versioned else 'unversioned'}"
    group += "-rekeyed" if rekey else ""
    rng = random.Random(f"{seed}/{group}")
    scenarios = []
    for i in range(count):
        how, retention = rng.choice(("inner", "left")), _retention(rng, versioned)
        params = StreamTableJoinParams(how, retention, rekey)
        retentions = () if params.history_retention is None else (params.history_retention,)
        scenarios.append(_join_scenario(rng, f"{group}-{i}", params, retentions))
    return scenarios


def table_table_joins(seed: int, versioned: bool, count: int) -> list[Scenario]:
    """Table-table joins, inner, left and outer; with ``versioned``, one side or both
    versioned (mixed versioning is KIP-914's case too)."""
    group = f"join-table_table-{'versioned' if versioned else 'unversioned'}"
    rng = random.Random(f"{seed}/{group}")
    scenarios = []
    for i in range(count):
        sides = (
            rng.choice(((True, False), (False, True), (True, True)))
            if versioned
            else (False, False)
        )
        params = TableTableJoinParams(
            rng.choice(("inner", "left", "outer")),
            _retention(rng, sides[0]),
            _retention(rng, sides[1]),
            rng.random() < 0.3,
        )
        retentions = tuple(r for r in (params.left_retention, params.right_retention) if r)
        scenarios.append(_join_scenario(rng, f"{group}-{i}", params, retentions))
    return scenarios


# -- stateless operators ---------------------------------------------------------------------

STATELESS_OPS = ("flat_map", "flat_map_values", "split", "split_no_default", "repartition")


def _repartition_topics(ops: tuple[str, ...], count: bool) -> int:
    """How many repartition topics the ops (and a count) make."""
    keyed_changed = False
    topics = 0
    for op in ops:
        if op == "repartition":
            topics, keyed_changed = topics + 1, False
        elif op == "flat_map":
            keyed_changed = True
    return topics + (count and keyed_changed)


def _stateless_ops(rng: random.Random) -> tuple[tuple[str, ...], bool]:
    """Random ops with at most one repartition topic: with two, the order in which Kafka's
    driver takes records of equal timestamps from two internal topics is its heap's."""
    while True:
        ops = [rng.choice(STATELESS_OPS) for _ in range(rng.randint(1, 4))]
        if rng.random() < 0.3:
            ops.insert(rng.randint(0, len(ops)), "merge_other")
        count = rng.random() < 0.5
        if _repartition_topics(tuple(ops), count) <= 1:
            return tuple(ops), count


def stateless(seed: int, count: int) -> list[Scenario]:
    """Chains of flat maps, splits, merges and repartitions, with a count or not, over
    records with null keys and values (on a second topic too, for "merge_other")."""
    rng = random.Random(f"{seed}/stateless")
    scenarios = []
    for i in range(count):
        ops, counted = _stateless_ops(rng)
        serde = "long" if rng.random() < 0.5 else "string"
        records = inputs(rng, rng.randint(8, 40), no_boundaries, 5)
        if "merge_other" in ops:
            records = [replace(r, topic=OTHER_TOPIC) if rng.random() < 0.4 else r for r in records]
        params = StatelessParams(ops, counted)
        scenarios.append(
            Scenario(f"stateless-{i}", params, _with_values(rng, records, serde), serde)
        )
    return scenarios


def join_window_boundaries(before: int, after: int, grace: int) -> Boundaries:
    """Where a stream-stream join turns: a recent record's window edges on either side
    (joins or not), the stream times at which its window closes (emitted without a partner
    or still waiting), the buffers' retention behind stream time, and stream time itself
    (an in-order record, which looks for closed windows)."""

    def candidates(stream_time: int, recent: list[int]) -> list[int]:
        out = [stream_time, *recent]
        for t in recent:
            for edge in (before, after):
                out += [t - edge - 1, t - edge, t + edge, t + edge + 1]
            for look in (after, before):
                out += [t + look + grace, t + look + grace + 1]
        retention = before + after + grace
        out += [stream_time - retention + d for d in (-1, 0, 1)]
        out += [stream_time - look - grace + d for look in (before, after) for d in (-1, 0)]
        return out

    return candidates


def stream_stream_joins(seed: int, how: str, count: int) -> list[Scenario]:
    """Stream-stream joins (``how``: inner, left or outer) of "in" with "table", symmetric
    windows or ``before``/``after`` set apart (one may be negative), with or without grace."""
    group = f"join-stream_stream-{how}"
    rng = random.Random(f"{seed}/{group}")
    scenarios = []
    for i in range(count):
        diff = rng.choice((0, 1, 3, 5))
        grace = rng.choice((None, 0, 2, 6))
        before = after = None
        if rng.random() < 0.4:
            before = rng.choice((0, 1, 2, 4, 7))
            after = rng.choice([a for a in (-2, -1, 0, 1, 3, 6) if before + a >= 0])
        params = StreamStreamJoinParams(how, diff, grace, before, after)
        b = diff if before is None else before
        a = diff if after is None else after
        serde = "long" if rng.random() < 0.5 else "string"
        records = inputs(rng, rng.randint(8, 40), join_window_boundaries(b, a, grace or 0), 6)
        topics = [INPUT_TOPIC if rng.random() < 0.5 else TABLE_TOPIC for _ in records]
        records = [replace(r, topic=t) for r, t in zip(records, topics, strict=True)]
        scenarios.append(Scenario(f"{group}-{i}", params, _with_values(rng, records, serde), serde))
    return scenarios


def bytes_stream_joins(seed: int, how: str, count: int) -> list[Scenario]:
    """Stream-stream joins (``how``) whose left, right or both sides' values are bytes
    (Bytes StreamJoined serdes; the other side's values the input's), a third of them
    keyed by bytes too (both sides repartitioned); keys also empty and not ASCII."""
    group = f"bytes_stream_join-{how}"
    rng = random.Random(f"{seed}/{group}")
    scenarios = []
    for i in range(count):
        diff = rng.choice((0, 1, 3, 5))
        grace = rng.choice((None, 0, 2, 6))
        sides = rng.choice(("left", "right", "both"))
        params = BytesStreamJoinParams(how, diff, grace, sides, keys=rng.random() < 1 / 3)
        serde = "long" if rng.random() < 0.5 else "string"
        records = inputs(rng, rng.randint(8, 40), join_window_boundaries(diff, diff, grace or 0), 6)
        records = [
            replace(
                r,
                topic=INPUT_TOPIC if rng.random() < 0.5 else TABLE_TOPIC,
                key=rng.choice(["", "\u00e9"]) if rng.random() < 0.15 else r.key,
            )
            for r in records
        ]
        scenarios.append(Scenario(f"{group}-{i}", params, _with_values(rng, records, serde), serde))
    return scenarios


# -- cogroup (KIP-150) -----------------------------------------------------------------------


def _cogroup_params(rng: random.Random, windows: str) -> tuple[CogroupParams, Boundaries]:
    grace = rng.choice((None, 0, 1, 4))
    repartition = rng.random() < 0.4
    if windows == "none":
        return CogroupParams(repartition=repartition), no_boundaries
    if windows == "session":
        gap = rng.choice((2, 3, 5))
        params = CogroupParams("session", gap, grace, repartition=repartition)
        return params, session_boundaries(gap, grace or 0)
    if windows == "sliding":
        d = rng.choice((1, 2, 3, 5, 10))
        params = CogroupParams("sliding", d, grace, repartition=repartition)
        return params, sliding_boundaries(d, grace or 0)
    size = rng.choice((3, 5, 10))
    advance = None
    if windows == "hopping":
        advance = rng.choice([a for a in (1, 2, size // 2) if 0 < a < size])
    params = CogroupParams(windows, size, grace, advance, repartition)
    return params, time_window_boundaries(size, grace or 0, advance or size)


def cogroups(seed: int, windows: str, count: int) -> list[Scenario]:
    """Cogroups of two streams ("in", "table") or three (and "other", through a
    repartition topic), unwindowed or in ``windows`` ("tumbling", "hopping", "sliding",
    "session"), records spread over the topics at random, on the windows' edges."""
    group = f"cogroup-{windows}"
    rng = random.Random(f"{seed}/{group}")
    scenarios = []
    for i in range(count):
        params, boundaries = _cogroup_params(rng, windows)
        serde = "long" if rng.random() < 0.5 else "string"
        # Serdes from an rng of their own: the older params and inputs stay as they were.
        extra = random.Random(f"{seed}/{group}/serdes/{i}")
        params = replace(params, serdes=extra.choice((None, None, "long", "string")))
        records = inputs(rng, rng.randint(8, 40), boundaries, 6)
        topics = (INPUT_TOPIC, TABLE_TOPIC) + ((OTHER_TOPIC,) if params.repartition else ())
        records = [replace(r, topic=rng.choice(topics)) for r in records]
        scenarios.append(Scenario(f"{group}-{i}", params, _with_values(rng, records, serde), serde))
    return scenarios


# -- foreign-key table joins (KIP-213) -------------------------------------------------------


def fk_joins(seed: int, how: str, count: int) -> list[Scenario]:
    """Foreign-key joins (``how``: inner or left) of table "in" with table "table": values
    name foreign keys (null for some), so rows change their foreign key, lose it, and are
    deleted (null values); foreign rows change and are deleted; null keys on both topics."""
    group = f"join-fk-{how}"
    rng = random.Random(f"{seed}/{group}")
    return [
        _join_scenario(rng, f"{group}-{i}", ForeignKeyJoinParams(how, rng.random() < 0.3), ())
        for i in range(count)
    ]


HEX_KEYS = ("", "00", "0000", "ff", "ff00")


def bytes_fk_joins(seed: int, how: str, count: int) -> list[Scenario]:
    """Foreign-key joins (``how``: inner or left) of tables keyed by Bytes (both, or one of
    them), as fk_joins' (foreign keys changed, lost and deleted, foreign rows changed and
    deleted, null keys and values), every key hex of b"", NUL, 0xff and keys extending
    them, so a foreign key's subscribers sit next to those of keys it prefixes."""
    group = f"join-fk-bytes-{how}"
    rng = random.Random(f"{seed}/{group}")
    scenarios = []
    for i in range(count):
        keys = rng.choice(("both", "both", "this", "other"))
        serde = "long" if rng.random() < 0.5 else "string"
        params = BytesForeignKeyJoinParams(how, keys, rng.random() < 0.3, serde)
        scenario = _join_scenario(rng, f"{group}-{i}", params, ())
        inputs = tuple(
            i if i.key is None else replace(i, key=rng.choice(HEX_KEYS)) for i in scenario.inputs
        )
        inputs = _with_values(rng, list(inputs), serde)
        scenarios.append(replace(scenario, inputs=inputs, value_serde=serde))
    return scenarios


def punctuation_boundaries(interval: int) -> Boundaries:
    """Where a stream-time punctuator turns: the multiples of its interval around stream
    time (fired at, one before, one after) and stream time itself (no advance)."""

    def candidates(stream_time: int, recent: list[int]) -> list[int]:
        out = [stream_time]
        for k in range(stream_time // interval, stream_time // interval + 3):
            out += [k * interval - 1, k * interval, k * interval + 1]
        return out

    return candidates


def processors(seed: int, count: int, store: str = "long") -> list[Scenario]:
    """The Processor API's counter with a punctuator (``process`` or ``process_values``),
    intervals of a few ms, timestamps out of order and jumping several intervals; ``store``
    its store's serdes (``ProcessorParams.store``)."""
    group = "processor" if store == "long" else f"processor-{store}"
    rng = random.Random(f"{seed}/{group}")
    scenarios = []
    for i in range(count):
        interval = rng.choice((1, 2, 3, 5, 10))
        params = ProcessorParams(interval, fixed_key=rng.random() < 0.5, store=store)  # type: ignore[arg-type]
        serde = "long" if rng.random() < 0.5 else "string"
        spread = rng.choice((2, 6, 3 * interval))
        records = inputs(rng, rng.randint(8, 40), punctuation_boundaries(interval), spread)
        scenarios.append(Scenario(f"{group}-{i}", params, _with_values(rng, records, serde), serde))
    return scenarios
