"""The record cache forwards the delete of a key downstream has seen, also where the
processor forwards no old values: a session put that overwrites the session [t, t] in place
(Kafka's session aggregate forwards its puts with no old value; Kafka's caching store reads
the one it held when it flushes). Regression: a session sent downstream by an eviction
flush, or at an earlier commit, then updated and merged away within one flush interval was
dropped as "created and deleted", leaving downstream a stale session. Likewise below an
uncached session table, in a cached materialized filter or map_values, whose store holds
the row that session put's missing old value hides."""

from __future__ import annotations

from datetime import timedelta

import pytest
from lakestate import Materialized, SessionWindows, StreamsBuilder
from lakestate.processors.task import Task
from lakestate.records import Record, Window, Windowed
from lakestate.state.base import TopicPartition
from lakestate.state.memory import in_memory_store


def _task(cache_bytes: int, store=None, below: str | None = None) -> Task:
    """A session count into "out"; with ``below`` ("filter", "map_values") the count's
    store uncached and that materialized table operator after it."""
    b = StreamsBuilder()
    windows = SessionWindows.of_inactivity_gap_with_no_grace(timedelta(milliseconds=2))
    grouped = b.stream("in").group_by_key().windowed_by(windows)
    if below is None:
        table = grouped.count()
    else:
        counts = grouped.count(Materialized.as_("counts").with_caching_disabled())
        table = (
            counts.filter(lambda k, v: True, Materialized.as_("below"))
            if below == "filter"
            else counts.map_values(lambda v: v, Materialized.as_("below"))
        )
    table.to_stream().to("out")
    config = {"statestore.cache.max.bytes": cache_bytes} if cache_bytes else {}
    return Task(b.build(), 0, 0, store or in_memory_store("0_0"), config, "app")


def _batch(task: Task, chunked: bool, offset: int, batch: list[tuple[str, int]]) -> list[tuple]:
    """``batch`` (key, timestamp) as input from ``offset``, committed; what reached "out"."""
    records = [Record(key, 1, ts) for key, ts in batch]
    offsets = list(range(offset, offset + len(records)))
    if not (chunked and task.process_chunk("in", offsets, records)):
        for i, record in enumerate(records):
            task.process("in", offset + i, record)
    committed = task.commit({TopicPartition("in", 0): offset + len(records)})
    return [(r.key, r.value, r.timestamp) for topic, r in committed if topic == "out"]


def _session(key: str, start: int, end: int) -> Windowed:
    return Windowed(key, Window(start, end))


def _downstream(out: list[tuple]) -> dict:
    """The table a consumer of "out" builds: the latest value per key, deletes removing."""
    table: dict = {}
    for key, value, _ts in out:
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value
    return table


@pytest.mark.parametrize("chunked", [False, True], ids=["one_by_one", "chunk"])
def test_a_session_flushed_by_an_eviction_then_merged_away_is_deleted_downstream(chunked):
    # 40 bytes hold one session: b[0,0] evicts a[0,0], which flushes both; b's second
    # record overwrites b[0,0] in place, b@1 merges it into b[0,1] (deleting b[0,0]), and
    # that put evicts b[0,0]: its delete must go out, since downstream holds b[0,0]=1.
    batch = [("a", 0), ("b", 0), ("b", 0), ("b", 1)]
    task = _task(40)
    if chunked:
        assert task.can_process_chunks("in")
    out = _batch(task, chunked, 0, batch)
    assert out == [
        (_session("a", 0, 0), 1, 0),
        (_session("b", 0, 0), 1, 0),
        (_session("b", 0, 0), None, 0),
        (_session("b", 0, 1), 3, 1),
    ]
    assert task.cached.cache.evictions >= 2
    assert _downstream(out) == _downstream(_batch(_task(0), chunked, 0, batch))


@pytest.mark.parametrize("chunked", [False, True], ids=["one_by_one", "chunk"])
def test_a_session_forwarded_at_a_commit_then_merged_away_is_deleted_downstream(chunked):
    # No eviction: b[0,0]=1 went out at the first commit; the next batch overwrites it and
    # merges it away before its commit, which must forward its delete.
    task = _task(10**7)
    assert _batch(task, chunked, 0, [("b", 0)]) == [(_session("b", 0, 0), 1, 0)]
    out = _batch(task, chunked, 1, [("b", 0), ("b", 1)])
    assert out == [(_session("b", 0, 0), None, 0), (_session("b", 0, 1), 3, 1)]
    assert task.cached.cache.evictions == 0


@pytest.mark.parametrize("chunked", [False, True], ids=["one_by_one", "chunk"])
def test_after_a_restart_the_cache_knows_a_session_from_its_old_value(chunked):
    # The restarted task's cache is empty: only the overwritten session's old value tells
    # it that downstream holds b[0,0].
    store = in_memory_store("0_0")
    assert _batch(_task(10**7, store), chunked, 0, [("b", 0)]) == [(_session("b", 0, 0), 1, 0)]
    out = _batch(_task(10**7, store), chunked, 1, [("b", 0), ("b", 1)])
    assert out == [(_session("b", 0, 0), None, 0), (_session("b", 0, 1), 3, 1)]


@pytest.mark.parametrize("chunked", [False, True], ids=["one_by_one", "chunk"])
def test_a_session_created_and_merged_away_between_flushes_is_not_forwarded(chunked):
    # As Kafka: b[0,0] never reached downstream (nor the store under Kafka's cache).
    out = _batch(_task(10**7), chunked, 0, [("b", 0), ("b", 0), ("b", 1)])
    assert out == [(_session("b", 0, 1), 3, 1)]


@pytest.mark.parametrize("below", ["filter", "map_values"])
def test_a_cached_table_below_an_uncached_session_table_deletes_what_it_forwarded(below):
    # One by one (a table filter or map_values takes no chunks).
    task = _task(10**7, below=below)
    assert set(task.cached._cached.values()) == {"below"}
    assert _batch(task, False, 0, [("b", 0)]) == [(_session("b", 0, 0), 1, 0)]
    out = _batch(task, False, 1, [("b", 0), ("b", 1)])
    assert out == [(_session("b", 0, 0), None, 0), (_session("b", 0, 1), 3, 1)]
