"""The record cache (state/record_cache.py) on its own: coalescing per key, flush order
(last update), Kafka's eviction (the put-into cache's least recently written entry; a dirty
one flushes that whole cache, evicted entry first), clean entries, deletes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lakestate.records import Change, Record
from lakestate.state.record_cache import (
    ENTRY_OVERHEAD_BYTES,
    RecordCache,
    cache_max_bytes,
)

# A one-letter key (1 byte) with a number (8 bytes) plus the overhead.
ENTRY = 1 + 8 + ENTRY_OVERHEAD_BYTES


def _put(cache: RecordCache, key: str, new, old, ts: int = 0, name: str = "s") -> list[tuple]:
    return _seen(cache.put(name, Record(key, Change(new, old), ts)))


def _seen(records: list[Record]) -> list[tuple]:
    return [(r.key, r.value.new_value, r.value.old_value, r.timestamp) for r in records]


def test_updates_coalesce_per_key_and_flush_in_order_of_last_update():
    cache = RecordCache(10_000)
    assert _put(cache, "a", 1, None, 1) == []
    assert _put(cache, "b", 1, None, 2) == []
    assert _put(cache, "a", 2, 1, 3) == []
    # b's last update came before a's: b first; a's old value is from before its first update.
    assert _seen(cache.flush("s")) == [("b", 1, None, 2), ("a", 2, None, 3)]
    assert not cache.dirty() and cache.flush("s") == []
    # Clean now: the next update's old value is the flushed one.
    _put(cache, "a", 3, 2, 4)
    assert _seen(cache.flush("s")) == [("a", 3, 2, 4)]


def test_a_key_created_and_deleted_between_flushes_is_not_forwarded():
    cache = RecordCache(10_000)
    _put(cache, "a", 1, None)
    _put(cache, "a", None, 1)
    _put(cache, "b", 5, None)
    assert _seen(cache.flush("s")) == [("b", 5, None, 0)]
    # A delete of a key that existed before is forwarded, and leaves the cache.
    _put(cache, "b", None, 5, 7)
    assert _seen(cache.flush("s")) == [("b", None, 5, 7)]
    assert cache.size == 0


def test_evicting_a_dirty_entry_flushes_its_cache_evicted_entry_first():
    cache = RecordCache(2 * ENTRY)
    assert _put(cache, "a", 1, None) == []
    assert _put(cache, "b", 1, None) == []
    # The third entry does not fit: a (least recently written) is evicted, which flushes
    # the whole cache: a, then every dirty entry in order of last update (b, c).
    assert _put(cache, "c", 1, None) == [("a", 1, None, 0), ("b", 1, None, 0), ("c", 1, None, 0)]
    assert cache.size == 2 * ENTRY and cache.evictions == 1
    # b and c stay, clean: evicting b now forwards nothing.
    assert _put(cache, "d", 1, None) == []
    assert cache.evictions == 2
    assert _seen(cache.flush("s")) == [("d", 1, None, 0)]


def test_recency_is_that_of_the_last_write():
    cache = RecordCache(3 * ENTRY)
    _put(cache, "a", 1, None)
    _put(cache, "b", 1, None)
    _put(cache, "a", 2, 1)  # a is now the most recent: b goes first
    _put(cache, "c", 1, None)
    assert _put(cache, "d", 1, None) == [
        ("b", 1, None, 0),
        ("a", 2, None, 0),
        ("c", 1, None, 0),
        ("d", 1, None, 0),
    ]


def test_eviction_takes_only_from_the_cache_put_into():
    cache = RecordCache(2 * ENTRY)
    _put(cache, "a", 1, None, name="x")
    _put(cache, "b", 1, None, name="x")
    # Over budget, but y's own entry is all y holds: it is evicted and flushed, x is left.
    assert _put(cache, "c", 1, None, name="y") == [("c", 1, None, 0)]
    assert cache.size == 2 * ENTRY
    assert _seen(cache.flush("x")) == [("a", 1, None, 0), ("b", 1, None, 0)]


def test_snapshot_and_restore_undo_puts():
    cache = RecordCache(10_000)
    _put(cache, "a", 1, None)
    snapshot = cache.snapshot()
    _put(cache, "a", 2, 1)
    _put(cache, "b", 1, None)
    cache.restore(snapshot)
    assert _seen(cache.flush("s")) == [("a", 1, None, 0)]
    cache.clear()
    assert cache.size == 0 and not cache.dirty()


def test_unhashable_keys_are_cached_by_their_json():
    cache = RecordCache(10_000)
    cache.put("s", Record({"id": 1}, Change(1, None), 0))
    cache.put("s", Record({"id": 1}, Change(2, 1), 1))
    assert [(r.key, r.value.new_value, r.value.old_value) for r in cache.flush("s")] == [
        ({"id": 1}, 2, None)
    ]


def test_config():
    assert cache_max_bytes({}) == 0
    assert cache_max_bytes({"cache.max.bytes.buffering": 5}) == 5
    assert cache_max_bytes({"cache.max.bytes.buffering": 5, "statestore.cache.max.bytes": 7}) == 7
    with pytest.raises(ValueError):
        cache_max_bytes({"statestore.cache.max.bytes": -1})


def test_the_test_driver_ignores_the_cache_as_kafkas_does():
    # Kafka's TopologyTestDriver commits (and flushes) after every input record.
    from lakestate import Materialized, StreamsBuilder
    from lakestate.testing.driver import TopologyTestDriver

    def outputs(config: dict) -> list:
        b = StreamsBuilder()
        b.stream("in").group_by_key().count(Materialized.as_("c")).to_stream().to("out")
        driver = TopologyTestDriver(b.build(), config)
        driver.create_input_topic("in").pipe_key_value_list([("a", 1), ("a", 1), ("b", 1)])
        return driver.create_output_topic("out").read_key_values_to_list()

    assert (
        outputs({"statestore.cache.max.bytes": 10_000})
        == outputs({})
        == [
            ("a", 1),
            ("a", 2),
            ("b", 1),
        ]
    )


def test_a_record_failing_below_the_cache_at_a_flush_fails_the_commit():
    # It is no input record a handler could skip: log-and-continue does not apply.
    from lakestate import Materialized, StreamsBuilder
    from lakestate.errors import ProcessingException
    from lakestate.processors.task import Task
    from lakestate.state.base import TopicPartition
    from lakestate.state.memory import in_memory_store

    def no_two(v):
        if v == 2:
            raise ValueError("two")
        return v

    b = StreamsBuilder()
    (
        b.stream("in")
        .group_by_key()
        .count(Materialized.as_("c"))
        .to_stream()
        .map_values(no_two)
        .to("out")
    )
    config = {
        "statestore.cache.max.bytes": 10_000,
        "processing.exception.handler": "log_and_continue",
    }
    task = Task(b.build(), 0, 0, in_memory_store("0_0"), config, "app")
    # Both updates of "a" are held back: processing succeeds, the flush meets count 2.
    assert task.process_chunk("in", [0, 1], [Record("a", 1, 0), Record("a", 1, 1)])
    with pytest.raises(ProcessingException, match="MAPVALUES.*ValueError: two"):
        task.commit({TopicPartition("in", 0): 2})


def _state(cache: RecordCache) -> tuple:
    # An empty named cache is one never put into.
    named = {
        name: (list(n.entries.items()), list(n.dirty), n.size)
        for name, n in cache._named.items()
        if n.entries
    }
    return cache.size, cache.evictions, named


ops_st = st.lists(
    st.tuples(
        st.sampled_from("xy"), st.sampled_from("abcdef"), st.one_of(st.none(), st.integers(0, 99))
    ),
    max_size=25,
)


@settings(max_examples=200, deadline=None, database=None)
@given(ops_st, ops_st, st.integers(1, 8), st.integers(0, 25))
def test_restore_undoes_a_failed_chunk_with_its_evictions_and_flushes(before, chunk, fits, fail_at):
    # A chunk puts some updates (evicting and flushing as the budget says) and fails midway:
    # the undo leaves the cache exactly as before it (entries, their order, dirty slots in
    # order, sizes), and it then behaves as a cache that never saw the chunk.
    def run(cache: RecordCache, ops: list) -> list[tuple]:
        out = []
        for name, key, new in ops:
            out += _put(cache, key, new, None, name=name)
        return out

    cache, twin = RecordCache(fits * ENTRY), RecordCache(fits * ENTRY)
    run(cache, before)
    run(twin, before)
    cache.flush("x")
    twin.flush("x")
    expected = _state(cache)
    mark = cache.snapshot()
    run(cache, chunk[:fail_at])
    cache.flush("y")
    cache.restore(mark)
    assert _state(cache) == expected
    assert cache._log is None
    assert run(cache, chunk) == run(twin, chunk)
    assert _seen(cache.flush("x") + cache.flush("y")) == _seen(twin.flush("x") + twin.flush("y"))


def test_a_chunk_failing_below_the_cache_after_evictions_leaves_the_cache_as_before():
    from lakestate import Materialized, StreamsBuilder
    from lakestate.processors.task import Task
    from lakestate.state.memory import in_memory_store

    def no_ten(v):
        if v == 10:
            raise ValueError("ten")
        return v

    b = StreamsBuilder()
    b.stream("in").group_by_key().count(Materialized.as_("c")).to_stream().map_values(no_ten).to(
        "out"
    )
    config = {
        "statestore.cache.max.bytes": 3 * (2 + 8 + ENTRY_OVERHEAD_BYTES),
        "processing.exception.handler": "log_and_continue",
    }
    task = Task(b.build(), 0, 0, in_memory_store("0_0"), config, "app")
    first = [Record(f"k{i % 5}", 1, i) for i in range(8)]
    assert task.process_chunk("in", list(range(8)), first)
    cache = task.cached.cache
    before = _state(cache)
    # k0 reaches 10 late in the chunk, after puts of five keys into a cache of three evicted.
    records = [Record(f"k{i % 5}", 1, 8 + i) for i in range(40)]
    assert cache.evictions > 0
    assert not task.process_chunk("in", list(range(8, 48)), records)
    assert _state(cache) == before
