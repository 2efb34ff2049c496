"""``Materialized.with_caching_disabled()`` / ``with_caching_enabled()`` (Kafka's): a store
materialized with caching disabled forwards every update at once, whatever the record
cache's budget, while a cached store beside it holds its updates back until the commit."""

from __future__ import annotations

import pytest
from lakestate import Materialized, StreamsBuilder
from lakestate.processors.task import Task
from lakestate.records import Record
from lakestate.state.base import TopicPartition
from lakestate.state.memory import in_memory_store


def _counts(cached: Materialized, uncached: Materialized) -> Task:
    b = StreamsBuilder()
    stream = b.stream("in")
    stream.group_by_key().count(cached).to_stream().to("cached")
    stream.group_by_key().count(uncached).to_stream().to("uncached")
    config = {"statestore.cache.max.bytes": 10_000}
    return Task(b.build(), 0, 0, in_memory_store("0_0"), config, "app")


def _out(pairs: list[tuple[str, Record]], topic: str) -> list[tuple]:
    return [(r.key, r.value) for t, r in pairs if t == topic]


@pytest.mark.parametrize("chunked", [True, False])
def test_a_store_with_caching_disabled_forwards_every_update_at_once(chunked):
    task = _counts(
        Materialized.as_("c").with_caching_enabled(),
        Materialized.as_("u").with_caching_disabled(),
    )
    records = [Record("a", 1, 0), Record("a", 1, 1), Record("b", 1, 2), Record("a", 1, 3)]
    if chunked:
        assert task.process_chunk("in", [0, 1, 2, 3], records)
    else:
        for offset, record in enumerate(records):
            assert task.process_chunk("in", [offset], [record])
    before = task.pending_output()
    assert _out(before, "uncached") == [("a", 1), ("a", 2), ("b", 1), ("a", 3)]
    assert _out(before, "cached") == []  # held back by the cache
    committed = task.commit({TopicPartition("in", 0): 4})
    # The cached store's flush: each key's newest count, in order of last update.
    assert _out(committed, "cached") == [("b", 1), ("a", 3)]
    assert _out(committed, "uncached") == _out(before, "uncached")


def test_caching_disabled_marks_the_store_spec_and_enabled_undoes_it():
    m = Materialized.as_("s").with_caching_disabled()
    assert not m.caching_enabled and m.with_caching_enabled().caching_enabled
    assert Materialized.with_defaults().caching_enabled  # the default: cached
    b = StreamsBuilder()
    b.stream("in").group_by_key().count(Materialized.with_defaults().with_caching_disabled())
    b.table("t", Materialized.as_("t-store").with_caching_disabled())
    stores = b.build().stores
    assert {name: spec.caching for name, spec in stores.items()} == {
        "KSTREAM-AGGREGATE-STATE-STORE-0000000002": False,
        "t-store": False,
    }
