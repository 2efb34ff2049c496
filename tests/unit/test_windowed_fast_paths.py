"""The fast paths of windowed final results (issue 28): a tumbling-window aggregation's
chunk loop (processors/tumbling_chunk.py) and an unbounded suppress buffer's chunk loop
(processors/suppress_chunk.py) give, record for record, what the general paths give: the
windowed aggregation's general loop, and the suppress node taking its records one by one.
Output (texts and timestamps), every store entry, metrics and stream time are compared
over out-of-order and late records, null keys, several grace periods and aggregators,
chunks of any size, and restarts (the task closed after a commit and opened again on its
store)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from lakestate import BufferConfig, Materialized, StreamsBuilder, Suppressed, TimeWindows
from lakestate.processors import windowed_aggregate
from lakestate.processors.suppress import Suppress
from lakestate.processors.task import Task
from lakestate.records import Record
from lakestate.state.base import TopicPartition
from lakestate.state.memory import in_memory_store

SETTINGS = settings(max_examples=80, deadline=None, database=None)


def ms(n: int) -> timedelta:
    return timedelta(milliseconds=n)


def _count(grouped):
    return grouped.count(Materialized.as_("windows"))


def _reduce(grouped):
    return grouped.reduce(lambda a, v: a + v, Materialized.as_("windows"))


def _aggregate_deleting(grouped):
    # An aggregate of None deletes the window: the next record starts it again.
    return grouped.aggregate(
        lambda: 0, lambda k, v, a: None if a + v >= 7 else a + v, Materialized.as_("windows")
    )


AGGREGATIONS = {"count": _count, "reduce": _reduce, "aggregate-deleting": _aggregate_deleting}


def _topology(aggregation: str, grace: int, final: bool):
    b = StreamsBuilder()
    grouped = (
        b.stream("in")
        .map_values(lambda v: None if v is None else v["n"])
        .filter(lambda k, v: v is not None or aggregation == "count")
        .group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(ms(10), ms(grace)))
    )
    table = AGGREGATIONS[aggregation](grouped)
    if final:
        table = table.suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
    table.to_stream().to("out")
    return b.build()


def _play(topology, records: list[Record], cuts: list[int], restarts: set[int]) -> list:
    """``records`` in chunks cut as ``cuts`` says (a cut of 1: one by one); after the
    records before each position in ``restarts`` the task commits, closes and opens again
    on its store. Per task: its output, metrics and stream time; then every store entry."""
    store = in_memory_store("0_0")
    ends = sorted({p for p in restarts if 0 < p < len(records)} | {len(records)})
    played, position = [], 0
    for end in ends:
        task = Task(topology, 0, 0, store, {}, "app")
        n = 0
        while position < end:
            part = records[position : min(end, position + cuts[n % len(cuts)])]
            if len(part) == 1:
                task.process("in", position, part[0])
            else:
                offsets = list(range(position, position + len(part)))
                assert task.process_chunk("in", offsets, part)
            position += len(part)
            n += 1
        out = [(o.key_text, o.value_text, o.record.timestamp) for o in task.pending_output_text()]
        task.commit({TopicPartition("in", 0): position})
        played.append((out, task.metrics.document(), task.stream_time))
        task.close()
    names = [*topology.subtopologies[0].stores, "__meta__", "__offsets__"]
    played.append({ns: list(store.iterate(ns, None, None, False)) for ns in names})
    return played


KEYS = st.one_of(st.none(), st.sampled_from(["a", "b", "c", 7, ("t", 1)]))
VALUES = st.one_of(st.none(), st.builds(lambda n: {"n": n}, st.integers(0, 4)))
# Mostly rising timestamps with jumps back: out of order within the grace, and late.
RECORDS = st.lists(st.tuples(KEYS, VALUES, st.integers(0, 60)), max_size=80).map(
    lambda rows: [Record(k, v, ts + i) for i, (k, v, ts) in enumerate(rows)]
)
CUTS = st.lists(st.one_of(st.integers(1, 4), st.integers(10, 80)), min_size=1, max_size=8)
RESTARTS = st.sets(st.integers(1, 79), max_size=3)


@pytest.mark.parametrize("aggregation", sorted(AGGREGATIONS))
@pytest.mark.parametrize("final", [True, False], ids=["final", "updates"])
@SETTINGS
@given(records=RECORDS, cuts=CUTS, restarts=RESTARTS, grace=st.sampled_from([0, 3, 15]))
# Stream time reaching a window's end + grace exactly: the window closes (its final result
# leaves the buffer) and a record for it is late.
@example(
    records=[Record("a", {"n": 1}, 0), Record("b", {"n": 1}, 13), Record("a", {"n": 2}, 5)],
    cuts=[3],
    restarts=set(),
    grace=3,
)
def test_fast_paths_give_what_the_general_paths_give(
    aggregation, final, records, cuts, restarts, grace
):
    topology = _topology(aggregation, grace, final)
    fast = _play(topology, records, cuts, restarts)
    with pytest.MonkeyPatch.context() as m:
        # The general paths: the windowed aggregation's general loop (a chunk of one
        # record each), suppress one by one (Suppress.process).
        m.setattr(windowed_aggregate, "tumbling_chunk_applies", lambda node: False)
        general = _play(topology, records, [1], restarts)
    assert fast == general


def test_the_fast_paths_are_taken():
    """The benchmark's shape takes both loops (a guard for the test above)."""
    topology = _topology("count", 5, True)
    task = Task(topology, 0, 0, in_memory_store("0_0"), {}, "app")
    nodes = [n for n in task._processors.values()]  # noqa: SLF001
    windowed = [n for n in nodes if isinstance(n, windowed_aggregate.TimeWindowedAggregate)]
    suppress = [n for n in nodes if isinstance(n, Suppress)]
    assert windowed and windowed[0]._tumbling  # noqa: SLF001
    assert suppress and suppress[0].chunked and suppress[0].max_records is None


SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(-(2**70), 2**70), st.text()
)


@given(
    buffer_time=st.integers(-(2**63), 2**63 - 1),
    ts=st.integers(-(2**63), 2**63 - 1),
    value=SCALARS,
    prior=SCALARS,
    headers=st.one_of(st.none(), st.just({"h": "x"})),
)
def test_a_buffer_entry_is_formatted_as_encode_value_writes_it(
    buffer_time, ts, value, prior, headers
):
    from lakestate.state.serde import encode_value
    from lakestate.state.suppression_stage import _entry_bytes

    expected = encode_value([buffer_time, ts, value, prior, headers])
    assert _entry_bytes(buffer_time, ts, value, prior, headers) == expected
