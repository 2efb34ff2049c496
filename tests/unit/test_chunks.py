"""Chunks (Task.process_chunk): a chain of processors taking many records at once gives
exactly what processing them one by one gives — output (texts included), state (the local
store's every entry, indexes too), metrics and stream time — however the records are cut
into chunks; a chunk with a failing record applies nothing, and one by one the same record
raises the same error."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lakestate import Branched, JoinWindows, Materialized, Named, StreamsBuilder
from lakestate.errors import ProcessingException
from lakestate.processors.task import Task
from lakestate.records import Record
from lakestate.state.base import TopicPartition
from lakestate.state.memory import in_memory_store
from lakestate.testing.driver import TestRecord, TopologyTestDriver

SETTINGS = settings(max_examples=60, deadline=None, database=None)
INTERVAL = timedelta(milliseconds=10)


def _count(b: StreamsBuilder) -> None:
    (
        b.stream("in")
        .filter(lambda k, v: v is None or v["n"] % 5 != 0)
        .map_values(lambda v: v)
        .group_by_key()
        .count(Materialized.as_("store"))
        .to_stream()
        .to("out")
    )


def _aggregate_lists(b: StreamsBuilder) -> None:
    # The aggregator mutates its aggregate in place: a chunk must hand it a fresh copy,
    # as the store does.
    def append(key, value, agg):
        agg.append(value["n"])
        return agg[-3:]

    (
        b.stream("in")
        .group_by_key()
        .aggregate(list, append, Materialized.as_("store"))
        .to_stream()
        .to("out")
    )


def _reduce_floats(b: StreamsBuilder) -> None:
    (
        b.stream("in")
        .filter_not(lambda k, v: v is None)
        .map_values(lambda v: v["n"] * 0.5)
        .group_by_key()
        .reduce(lambda agg, v: agg + v, Materialized.as_("store"))
        .to_stream()
        .to("out")
    )


def _rekeyed(b: StreamsBuilder) -> None:
    (
        b.stream("in")
        .select_key(lambda k, v: None if v is None else v["n"] % 3)
        .map(lambda k, v: (k, [k, v]))
        .to("out")
    )


def _dedup_by_key(b: StreamsBuilder) -> None:
    b.stream("in").deduplicate_by_key(INTERVAL).to("out")


def _dedup_by_key_value(b: StreamsBuilder) -> None:
    b.stream("in").deduplicate_by_key_value(
        lambda k, v: None if v is None else v["n"] % 4, INTERVAL
    ).to("out")


def _halves(v):
    """One or two values for a record (none for a null value)."""
    return [] if v is None else [v, {"n": v["n"] // 2}][: 1 + v["n"] % 2]


def _split_merge(b: StreamsBuilder) -> None:
    # Branches merged back, one branch also written to the merged stream's topic, and an
    # aggregation after the merge: the merge and the shared topic need one-by-one order.
    branches = (
        b.stream("in")
        .flat_map_values(lambda v: [None] if v is None else _halves(v))
        .split(Named.as_("b-"))
        .branch(lambda k, v: v is None, Branched.as_("none"))
        .branch(lambda k, v: v["n"] % 2 == 0, Branched.as_("even"))
        .default_branch()
    )
    even = branches["b-even"].map_values(lambda v: {"n": v["n"] * 10})
    merged = even.merge(branches["b-0"]).merge(branches["b-none"])
    merged.to("out")
    branches["b-even"].to("out")
    merged.group_by_key().count(Materialized.as_("store")).to_stream().to("counts")


def _fan_out_merge(b: StreamsBuilder) -> None:
    # One stream fanned out to a filter, a flat map and itself, merged three ways.
    s = b.stream("in")
    doubled = s.flat_map(lambda k, v: [(k, v), (None, v)] if v is None or v["n"] < 9 else [])
    s.filter(lambda k, v: k is not None).merge(doubled).merge(s).to("out")
    s.to("side")


def _dedup_merge(b: StreamsBuilder) -> None:
    # Two records of one input meet a deduplication (same offset: a replay to it) on the
    # way to a merge, so they get positions of their own: same offset, same stream time.
    s = b.stream("in")
    s.flat_map_values(lambda v: [v, v]).deduplicate_by_key(INTERVAL).merge(s).to("out")


def _branch_aggregates(b: StreamsBuilder) -> None:
    # Each branch its own store: one plan, two stores.
    branches = (
        b.stream("in")
        .split()
        .branch(lambda k, v: v is not None and v["n"] % 3 == 0)
        .default_branch(Branched.with_function(lambda s: s.map_values(lambda v: v)))
    )
    for i, branch in enumerate(branches.values()):
        branch.group_by_key().count(Materialized.as_(f"store-{i}")).to_stream().to("out")


def _branches_merged(b: StreamsBuilder) -> None:
    # Straight from the split to the merge: each record in one branch, merged by position.
    branches = (
        b.stream("in")
        .split()
        .branch(lambda k, v: k == "a")
        .branch(lambda k, v: v is None)
        .default_branch()
    )
    first, second, rest = branches.values()
    first.map_values(lambda v: v and {"n": v["n"] * 10}).merge(rest).merge(second).to("out")


def _branches_one_topic(b: StreamsBuilder) -> None:
    # Two branches written to one topic by two sinks: the output is put back in order.
    branches = b.stream("in").split().branch(lambda k, v: k in ("a", 7)).default_branch()
    for branch in branches.values():
        branch.filter(lambda k, v: v is None or v["n"] != 3).to("out")


TOPOLOGIES = {
    "branches-merged": _branches_merged,
    "branches-one-topic": _branches_one_topic,
    "split-merge": _split_merge,
    "fan-out-merge": _fan_out_merge,
    "dedup-merge": _dedup_merge,
    "branch-aggregates": _branch_aggregates,
    "count": _count,
    "aggregate-lists": _aggregate_lists,
    "reduce-floats": _reduce_floats,
    "rekeyed": _rekeyed,
    "dedup-by-key": _dedup_by_key,
    "dedup-by-key-value": _dedup_by_key_value,
}

KEYS = st.one_of(st.none(), st.sampled_from(["a", "b", "c", 7]))
VALUES = st.one_of(st.none(), st.builds(lambda n: {"n": n}, st.integers(0, 20)))
RECORDS = st.lists(st.tuples(KEYS, VALUES, st.integers(0, 60)), max_size=50)
# Long chunks as often as short ones: what a chunk decides before its stores are written
# matters most when many records share one.
CUTS = st.lists(st.one_of(st.integers(1, 5), st.integers(20, 50)), min_size=1, max_size=10)


def _task(name: str) -> Task:
    b = StreamsBuilder()
    TOPOLOGIES[name](b)
    topology = b.build()
    assert len(topology.subtopologies) == 1
    task = Task(topology, 0, 0, in_memory_store("0_0"), {}, "app")
    assert task.can_process_chunks("in"), name
    return task


def _output(task: Task) -> dict[str, list]:
    """The task's output per topic, in order (order across topics is no one's to see: the
    engine writes each topic on its own, the driver reads each on its own)."""
    out: dict[str, list] = {}
    for o in task.pending_output_text():
        out.setdefault(o.topic, []).append((o.key_text, o.value_text, o.record.timestamp))
    return out


def _state(task: Task) -> dict:
    """Every committed entry of the task's store, by namespace."""
    store = task.store
    return {
        ns: list(store.iterate(ns, None, None, False))
        for ns in [*task.subtopology.stores, "__meta__", "__offsets__"]
    }


def _one_by_one(name: str, records: list[Record]) -> tuple:
    task = _task(name)
    for offset, record in enumerate(records):
        task.process("in", offset, record)
    out = _output(task)
    metrics, stream_time = task.metrics.document(), task.stream_time
    task.commit({TopicPartition("in", 0): len(records)})
    return out, _state(task), metrics, stream_time


def _in_chunks(name: str, records: list[Record], cuts: list[int]) -> tuple:
    task = _task(name)
    position, n = 0, 0
    while position < len(records):
        size = cuts[n % len(cuts)]
        n += 1
        part = records[position : position + size]
        assert task.process_chunk("in", list(range(position, position + len(part))), part)
        position += len(part)
    out = _output(task)
    metrics, stream_time = task.metrics.document(), task.stream_time
    task.commit({TopicPartition("in", 0): len(records)})
    return out, _state(task), metrics, stream_time


@pytest.mark.parametrize("name", sorted(TOPOLOGIES))
@SETTINGS
@given(rows=RECORDS, cuts=CUTS)
def test_chunks_give_what_one_by_one_gives(name, rows, cuts):
    records = [Record(k, v, ts) for k, v, ts in rows]
    assert _in_chunks(name, records, cuts) == _one_by_one(name, records)


def _join(kind: str) -> StreamsBuilder:
    b = StreamsBuilder()
    materialized = (
        Materialized.as_versioned("table", timedelta(milliseconds=20))
        if kind.startswith("versioned")
        else Materialized.as_("table")
    )
    table = b.table("tbl", materialized=materialized)
    stream = b.stream("in")
    joined = (
        stream.left_join(table, lambda v, t: [v, t])
        if kind.endswith("left")
        else stream.join(table, lambda v, t: [v, t])
    )
    joined.to("out")
    return b


def _join_run(kind: str, runs: list, cuts: list[int] | None) -> tuple:
    """Runs of table updates (one by one) and stream records (in chunks cut by ``cuts``,
    or one by one when None) through one task: its output, state, metrics, stream time."""
    task = Task(_join(kind).build(), 0, 0, in_memory_store("0_0"), {}, "app")
    assert task.can_process_chunks("in")
    offsets = {"tbl": 0, "in": 0}
    n = 0
    for topic, rows in runs:
        records = [Record(k, v, ts) for k, v, ts in rows]
        first = offsets[topic]
        offsets[topic] += len(records)
        if topic == "tbl" or cuts is None:
            for i, record in enumerate(records):
                task.process(topic, first + i, record)
            continue
        position = 0
        while position < len(records):
            size = cuts[n % len(cuts)]
            n += 1
            part = records[position : position + size]
            at = list(range(first + position, first + position + len(part)))
            assert task.process_chunk(topic, at, part)
            position += len(part)
    out = _output(task)
    metrics, stream_time = task.metrics.document(), task.stream_time
    task.commit({TopicPartition(t, 0): o for t, o in offsets.items()})
    return out, _state(task), metrics, stream_time


JOIN_KEYS = st.one_of(st.none(), st.sampled_from(["a", "b", "c"]))
JOIN_RUNS = st.lists(
    st.tuples(
        st.sampled_from(["tbl", "in"]),
        st.lists(
            st.tuples(JOIN_KEYS, st.none() | st.integers(0, 9), st.integers(0, 60)), max_size=20
        ),
    ),
    max_size=6,
)


@pytest.mark.parametrize("kind", ["versioned-left", "versioned-inner", "plain-left", "plain-inner"])
@SETTINGS
@given(runs=JOIN_RUNS, cuts=CUTS)
def test_a_stream_table_join_in_chunks_gives_what_one_by_one_gives(kind, runs, cuts):
    # The table's input sits beside the stream's chain: the stream's records are chunked,
    # each looking the table up (as of its time when versioned) as it would one by one.
    assert _join_run(kind, runs, cuts) == _join_run(kind, runs, None)


def _stream_join(how: str) -> StreamsBuilder:
    b = StreamsBuilder()
    left, right = b.stream("left"), b.stream("right")
    join = {"inner": left.join, "left": left.left_join, "outer": left.outer_join}[how]
    # Asymmetric windows with a grace: records fall inside, at and beyond every bound.
    windows = JoinWindows.of_time_difference_and_grace(
        timedelta(milliseconds=5), timedelta(milliseconds=3)
    ).after(timedelta(milliseconds=8))
    join(right, lambda v, o: [v, o], windows).to("out")
    return b


def _stream_join_run(how: str, runs: list, cuts: list[int] | None) -> tuple:
    """Runs of either side's records through one task, each run in chunks cut by ``cuts``
    (one by one when None): its output, state, metrics and stream time."""
    task = Task(_stream_join(how).build(), 0, 0, in_memory_store("0_0"), {}, "app")
    assert task.can_process_chunks("left") and task.can_process_chunks("right")
    offsets = {"left": 0, "right": 0}
    n = 0
    for topic, rows in runs:
        records = [Record(k, v, ts) for k, v, ts in rows]
        first = offsets[topic]
        offsets[topic] += len(records)
        position = 0
        while position < len(records):
            size = 1 if cuts is None else cuts[n % len(cuts)]
            n += 1
            part = records[position : position + size]
            at = list(range(first + position, first + position + len(part)))
            if cuts is None:
                task.process(topic, at[0], part[0])
            else:
                assert task.process_chunk(topic, at, part)
            position += len(part)
    out = _output(task)
    metrics, stream_time = task.metrics.document(), task.stream_time
    task.commit({TopicPartition(t, 0): o for t, o in offsets.items()})
    return out, _state(task), metrics, stream_time


STREAM_JOIN_RUNS = st.lists(
    st.tuples(
        st.sampled_from(["left", "right"]),
        st.lists(
            st.tuples(JOIN_KEYS, st.none() | st.integers(0, 9), st.integers(0, 80)), max_size=20
        ),
    ),
    max_size=8,
)


@pytest.mark.parametrize("how", ["inner", "left", "outer"])
@SETTINGS
@given(runs=STREAM_JOIN_RUNS, cuts=CUTS)
def test_a_stream_stream_join_in_chunks_gives_what_one_by_one_gives(how, runs, cuts):
    # Each side's chunk probes the other side's buffer (the probe side) and, for left and
    # outer joins, emits the waiting records whose window closed, as one by one would.
    assert _stream_join_run(how, runs, cuts) == _stream_join_run(how, runs, None)


def test_an_entry_expired_within_a_chunk_is_not_a_duplicate():
    # a@0 is purged once b@15 moves stream time to 15 (cutoff 5); the late a@3 then finds no
    # duplicate and is forwarded (not stored).
    records = [Record("a", {"n": 1}, 0), Record("b", {"n": 1}, 15), Record("a", {"n": 1}, 3)]
    chunked = _in_chunks("dedup-by-key", records, [3])
    assert chunked == _one_by_one("dedup-by-key", records)
    assert [ts for _, _, ts in chunked[0]["out"]] == [0, 15, 3]


def test_a_chunk_of_one_record_per_record_matches_the_seed_dedup_example():
    # KIP-655's by-key example: interval 10; A@0 forwarded, A@5 dropped, A@11 (|11-0| > 10)
    # forwarded, B@12 forwarded, A@20 dropped (|20-11| <= 10).
    records = [Record("A", {"n": 1}, 0), Record("A", {"n": 2}, 5), Record("A", {"n": 3}, 11)]
    records += [Record("B", {"n": 4}, 12), Record("A", {"n": 5}, 20)]
    out, _, metrics, _ = _in_chunks("dedup-by-key", records, [5])
    assert [(k, v) for k, v, _ in out["out"]] == [
        ('"A"', '{"n":1}'),
        ('"A"', '{"n":3}'),
        ('"B"', '{"n":4}'),
    ]
    dedup = next(iter(metrics["nodes"].values()))
    assert dedup["dedup-duplicates-dropped"] == 2


def test_a_failing_record_leaves_the_chunk_unapplied_and_fails_one_by_one():
    b = StreamsBuilder()
    (
        b.stream("in")
        .map_values(lambda v: 10 // v)
        .group_by_key()
        .count(Materialized.as_("store"))
        .to_stream()
        .to("out")
    )
    task = Task(b.build(), 0, 0, in_memory_store("0_0"), {}, "app")
    good = [Record("a", 1, 1), Record("b", 2, 2)]
    assert task.process_chunk("in", [0, 1], good)
    before = (list(task.pending_output_text()), task.metrics.document(), task.stream_time)
    staged = list(task.transaction.changes())
    bad = [Record("a", 5, 3), Record("c", 0, 9), Record("d", 1, 4)]
    assert not task.process_chunk("in", [2, 3, 4], bad)
    assert (list(task.pending_output_text()), task.metrics.document(), task.stream_time) == before
    assert list(task.transaction.changes()) == staged
    task.process("in", 2, bad[0])
    with pytest.raises(ProcessingException, match=r"offset 3.*ZeroDivisionError"):
        task.process("in", 3, bad[1])


def test_an_aggregate_the_store_cannot_hold_fails_the_chunk():
    b = StreamsBuilder()
    b.stream("in").group_by_key().reduce(
        lambda agg, v: agg * v, Materialized.as_("s")
    ).to_stream().to("o")
    task = Task(b.build(), 0, 0, in_memory_store("0_0"), {}, "app")
    # inf * 0 is nan, which JSON cannot hold; the next record makes it finite again, so
    # only a check at every record (as the store's put does) catches it.
    records = [Record("a", 1e308, 1), Record("a", 1e308, 2), Record("a", 0, 3), Record("b", 1, 4)]
    assert not task.process_chunk("in", [0, 1, 2, 3], records)
    assert list(task.transaction.changes()) == []


def test_branching_topologies_are_chunked_but_peek_foreach_and_shared_stores_are_not():
    b = StreamsBuilder()
    s = b.stream("in")
    s.to("x")
    s.to("y")
    assert Task(b.build(), 0, 0, in_memory_store("0_0"), {}, "app").can_process_chunks("in")
    b = StreamsBuilder()
    b.stream("in").peek(print).to("x")
    assert not Task(b.build(), 0, 0, in_memory_store("0_0"), {}, "app").can_process_chunks("in")
    b = StreamsBuilder()
    b.stream("in").foreach(print)
    assert not Task(b.build(), 0, 0, in_memory_store("0_0"), {}, "app").can_process_chunks("in")
    # A table written and joined from one topic: the join would read what the table
    # source has not written yet in a chunk, so the topic goes record by record.
    b = StreamsBuilder()
    s = b.stream("in")
    s.join(s.to_table(Materialized.as_("t")), lambda v, t: [v, t]).to("out")
    task = Task(b.build(), 0, 0, in_memory_store("0_0"), {}, "app")
    assert not task.can_process_chunks("in")
    task.process("in", 0, Record("a", 1, 1))
    assert [o.value_text for o in task.pending_output_text()] == ["[1,1]"]


@SETTINGS
@given(rows=RECORDS)
def test_driver_record_lists_equal_records_piped_one_by_one(rows):
    b = StreamsBuilder()
    _count(b)
    topology = b.build()
    with TopologyTestDriver(topology) as one, TopologyTestDriver(topology) as listed:
        for k, v, ts in rows:
            one.create_input_topic("in").pipe_input(k, v, ts)
        listed.create_input_topic("in").pipe_record_list(TestRecord(k, v, ts) for k, v, ts in rows)
        assert (
            listed.create_output_topic("out").read_records_to_list()
            == one.create_output_topic("out").read_records_to_list()
        )
        assert listed.metrics() == one.metrics()
        assert list(listed.get_key_value_store("store").all()) == list(
            one.get_key_value_store("store").all()
        )


def test_driver_record_list_with_a_failing_record_keeps_the_records_before_it():
    b = StreamsBuilder()
    b.stream("in").map_values(lambda v: 10 // v).to("out")
    with TopologyTestDriver(b.build()) as d:
        records = [TestRecord("a", 1, 1), TestRecord("b", 0, 2), TestRecord("c", 2, 3)]
        with pytest.raises(ProcessingException, match="ZeroDivisionError"):
            d.create_input_topic("in").pipe_record_list(records)
        assert d.create_output_topic("out").read_values_to_list() == [10]
