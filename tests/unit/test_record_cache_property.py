"""The record cache in a task, against a small model built from the same run without one:
per batch (a commit), a cache large enough forwards each key's last update of the batch,
in order of last update, with the key's old value as it was before the batch (nothing for a
key absent before and after), and evicts nothing; any cache size forwards, per key, a
subsequence of the uncached updates whose old values chain (each the previous forwarded
new value) and which ends, at each commit, with the uncached run's latest; the state is
the uncached run's. Through records one by one (old values seen on a repartition topic)
and through chunks (count, windowed, session count; sliding windows and a filter below an
uncached session count one by one). The task
restarts between some batches (an empty cache over the committed state)."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st
from lakestate import Materialized, SessionWindows, SlidingWindows, StreamsBuilder, TimeWindows
from lakestate.processors.task import Task
from lakestate.records import Record
from lakestate.state.base import TopicPartition
from lakestate.state.memory import in_memory_store

SETTINGS = settings(max_examples=100, deadline=None, database=None)
BIG = 10**7


def _regrouped_sum(b: StreamsBuilder) -> None:
    # Sub-topology 0 ends in a repartition topic carrying the sums' changes {"new", "old"}.
    (
        b.stream("in")
        .group_by_key()
        .aggregate(lambda: 0, lambda k, v, agg: agg + (v or 0), Materialized.as_("store"))
        .group_by(lambda k, v: (k, v))
        .count()
    )


def _regrouped_table(b: StreamsBuilder) -> None:
    # A materialized table source (null values delete), its changes regrouped.
    b.table("in", Materialized.as_("store")).group_by(lambda k, v: (k, v)).count()


def _count(b: StreamsBuilder) -> None:
    b.stream("in").group_by_key().count(Materialized.as_("store")).to_stream().to("out")


def _windowed_count(b: StreamsBuilder) -> None:
    windows = TimeWindows.of_size_with_no_grace(timedelta(milliseconds=4))
    b.stream("in").group_by_key().windowed_by(windows).count().to_stream().to("out")


def _session_count(b: StreamsBuilder) -> None:
    # Merged sessions are forwarded as tombstones of their windowed keys.
    windows = SessionWindows.of_inactivity_gap_with_no_grace(timedelta(milliseconds=2))
    b.stream("in").group_by_key().windowed_by(windows).count().to_stream().to("out")


def _session_filtered(b: StreamsBuilder) -> None:
    # The session store uncached, a materialized filter's cached: its input's session puts
    # carry no old value.
    windows = SessionWindows.of_inactivity_gap_with_no_grace(timedelta(milliseconds=2))
    counts = b.stream("in").group_by_key().windowed_by(windows)
    table = counts.count(Materialized.as_("counts").with_caching_disabled())
    table.filter(lambda k, v: v < 4, Materialized.as_("f")).to_stream().to("out")


def _sliding_count(b: StreamsBuilder) -> None:
    windows = SlidingWindows.of_time_difference_with_no_grace(timedelta(milliseconds=3))
    b.stream("in").group_by_key().windowed_by(windows).count().to_stream().to("out")


TOPOLOGIES = {
    "regrouped_sum": (_regrouped_sum, False),
    "regrouped_table": (_regrouped_table, False),
    "count": (_count, True),
    "windowed_count": (_windowed_count, True),
    "session_count": (_session_count, True),  # session windows take chunks
    "session_filtered": (_session_filtered, False),
    "sliding_count": (_sliding_count, False),
}

batches_st = st.lists(
    st.lists(
        st.tuples(
            st.sampled_from("abcd"), st.one_of(st.none(), st.integers(0, 3)), st.integers(0, 3)
        ),
        max_size=12,
    ),
    min_size=1,
    max_size=4,
)


def _run(
    name: str, batches: list, cache_bytes: int, restarts: frozenset = frozenset()
) -> tuple[list[list[tuple]], Task]:
    """Each batch's output (key, new, old, timestamp) from sub-topology 0, committed per
    batch, the task restarted over its store before each batch numbered in ``restarts``;
    old is None where the output carries new values only."""
    build, chunked = TOPOLOGIES[name]
    b = StreamsBuilder()
    build(b)
    config = {"statestore.cache.max.bytes": cache_bytes} if cache_bytes else {}
    store = in_memory_store("0_0")
    task = Task(b.build(), 0, 0, store, config, "app")
    assert task.can_process_chunks("in") == chunked
    offset, ts, out = 0, 0, []
    for number, batch in enumerate(batches):
        if number in restarts:
            task = Task(b.build(), 0, 0, store, config, "app")
        records = []
        for key, value, step in batch:
            ts += step  # in order, so no windowed record is late
            records.append(Record(key, value, ts))
        offsets = list(range(offset, offset + len(records)))
        if not (chunked and task.process_chunk("in", offsets, records)):
            for i, record in enumerate(records):
                task.process("in", offset + i, record)
        offset += len(records)
        committed = task.commit({TopicPartition("in", 0): offset})
        out.append([_seen(r) for _topic, r in committed])
    return out, task


def _seen(record: Record) -> tuple:
    value = record.value
    if isinstance(value, dict):
        return (record.key, value["new"], value["old"], record.timestamp)
    return (record.key, value, None, record.timestamp)


def _coalesced(updates: list[tuple]) -> list[tuple]:
    """The model: per key its last update with its first old value, in order of last update."""
    first_old: dict = {}
    last: dict = {}
    for key, new, old, ts in updates:
        first_old.setdefault(key, old)
        last.pop(key, None)
        last[key] = (new, ts)
    return [
        (key, new, first_old[key], ts)
        for key, (new, ts) in last.items()
        if new is not None or first_old[key] is not None
    ]


def _table_updates(batches: list) -> list[list[tuple]]:
    """Per batch, the table source's updates (key, new, old, timestamp): a tombstone of an
    absent key too, which the regrouping drops but which is the key's last update."""
    held: dict = {}
    out, ts = [], 0
    for batch in batches:
        updates = []
        for key, value, step in batch:
            ts += step
            updates.append((key, value, held.get(key), ts))
            held[key] = value
        out.append(updates)
    return out


def _with_old_values(batches: list[list[tuple]]) -> list[list[tuple]]:
    last: dict = {}
    out = []
    for batch in batches:
        updates = []
        for key, new, _old, ts in batch:
            updates.append((key, new, last.get(key), ts))
            last[key] = new
        out.append(updates)
    return out


@SETTINGS
@given(
    st.sampled_from(sorted(TOPOLOGIES)),
    batches_st,
    st.sampled_from([1, 40, 90, 150, BIG]),
    st.frozensets(st.integers(1, 3)),
)
def test_the_cache_forwards_the_model_and_keeps_the_uncached_state(
    name, batches, cache_bytes, restarts
):
    uncached, plain = _run(name, batches, 0)
    cached, task = _run(name, batches, cache_bytes, restarts)
    store = "store" if name in ("regrouped_sum", "regrouped_table", "count") else None
    if store is not None:
        keys = {key for batch in batches for key, _, _ in batch}
        view, plain_view = task.store_view(store), plain.store_view(store)
        assert {k: view.get(k) for k in keys} == {k: plain_view.get(k) for k in keys}
    if cache_bytes == BIG:
        if name == "regrouped_table":
            updates = _table_updates(batches)
        elif name.startswith("regrouped"):
            updates = uncached
        else:  # the sink has new values only: an update's old value is the key's last new
            updates = _with_old_values(uncached)
        model = [_coalesced(batch) for batch in updates]
        if not name.startswith("regrouped"):
            model = [[(k, new, None, ts) for k, new, _old, ts in batch] for batch in model]
        assert cached == model
        assert task.cached.cache.evictions == 0
        return
    carries_old = name.startswith("regrouped")
    forwarded: dict = {}
    history: dict = {}
    for got, expected in zip(cached, uncached, strict=True):
        for key, new, _old, _ts in expected:
            history.setdefault(key, []).append(new)
        for key, new, old, _ts in got:
            if carries_old:
                assert old == (forwarded[key][-1] if key in forwarded else None), (key, got)
            forwarded.setdefault(key, []).append(new)
        for key, news in history.items():
            # Forwarded: a subsequence of the uncached updates, ending with the latest.
            sent = iter(news)
            assert all(any(n == m for m in sent) for n in forwarded.get(key, [])), key
            if forwarded.get(key) or news[-1] is not None:
                assert forwarded[key][-1] == news[-1], key
