"""KIP-892 bounded uncommitted state: a task asks for a commit once its open transaction
holds more than ``statestore.uncommitted.max.records`` entries or
``statestore.uncommitted.max.bytes`` bytes."""

from __future__ import annotations

from pathlib import Path

import pytest
from lakestate import Materialized, StreamsBuilder
from lakestate.processors.task import Task
from lakestate.records import Record
from lakestate.state.base import TopicPartition
from lakestate.state.memory import in_memory_store
from lakestate.state.rocksdb import rocksdb_store
from lakestate.testing.driver import TopologyTestDriver

MAX_RECORDS = "statestore.uncommitted.max.records"
MAX_BYTES = "statestore.uncommitted.max.bytes"


def _count_topology():
    b = StreamsBuilder()
    b.stream("in").group_by_key().count(Materialized.as_("counts")).to_stream().to("out")
    return b.build()


@pytest.fixture(params=["memory", "rocksdb"])
def make_store(request, tmp_path: Path):
    stores = []

    def make():
        if request.param == "memory":
            store = in_memory_store("0_0")
        else:
            store = rocksdb_store("0_0", tmp_path / f"s{len(stores)}")
        stores.append(store)
        return store

    yield make
    for store in stores:
        store.close()


def _task(store, config):
    return Task(_count_topology(), 0, 0, store, config, "app")


def test_commit_needed_once_uncommitted_records_exceed_the_bound(make_store):
    task = _task(make_store(), {MAX_RECORDS: 3})
    assert not task.commit_needed()
    for offset, key in enumerate(["a", "b", "c"]):  # one store entry per new key
        task.process("in", offset, Record(key, 1, offset))
        assert not task.commit_needed(), key  # 1, 2, 3 entries: not above 3
    task.process("in", 3, Record("d", 1, 3))
    assert task.transaction.approximate_num_uncommitted_entries() == 4
    assert task.commit_needed()
    output = task.commit({TopicPartition("in", 0): 4})
    assert [r.key for _, r in output] == ["a", "b", "c", "d"]
    assert not task.commit_needed()
    # The bound applies to each new transaction again.
    for offset, key in enumerate(["e", "f", "g", "h"], start=4):
        task.process("in", offset, Record(key, 1, offset))
    assert task.commit_needed()
    task.close()


def test_updates_of_the_same_key_are_one_uncommitted_entry(make_store):
    task = _task(make_store(), {MAX_RECORDS: 3})
    for offset in range(10):
        task.process("in", offset, Record("same", 1, offset))
    assert task.transaction.approximate_num_uncommitted_entries() == 1
    assert not task.commit_needed()
    task.close()


def test_commit_needed_once_uncommitted_bytes_exceed_the_bound(make_store):
    max_bytes = 500
    task = _task(make_store(), {MAX_BYTES: max_bytes})
    offset = 0
    while not task.commit_needed():
        task.process("in", offset, Record(f"key-{offset:04d}", "v", offset))
        offset += 1
        assert offset < 100, "the bytes bound never forced a commit"
    assert offset > 1  # one small record is well below the bound
    assert task.transaction.approximate_num_uncommitted_bytes() > max_bytes
    assert task.transaction.approximate_num_uncommitted_entries() == offset  # records bound unused
    task.commit({TopicPartition("in", 0): offset})
    assert not task.commit_needed()
    assert task.transaction.approximate_num_uncommitted_bytes() == 0
    task.close()


def test_abort_also_clears_the_need_to_commit(make_store):
    task = _task(make_store(), {MAX_RECORDS: 1})
    task.process("in", 0, Record("a", 1, 0))
    task.process("in", 1, Record("b", 1, 1))
    assert task.commit_needed()
    task.abort()
    assert not task.commit_needed()
    task.close()


def test_default_bounds_are_large(make_store):
    task = _task(make_store(), {})
    for offset in range(200):
        task.process("in", offset, Record(offset, "v", offset))
    assert not task.commit_needed()
    task.close()


def test_bounds_accept_string_config_values(make_store):
    task = _task(make_store(), {MAX_RECORDS: "2"})
    for offset, key in enumerate("abc"):
        task.process("in", offset, Record(key, 1, offset))
    assert task.commit_needed()
    task.close()


def test_driver_commits_every_record_so_small_bounds_do_not_change_results():
    config = {MAX_RECORDS: 1, MAX_BYTES: 1}
    with TopologyTestDriver(_count_topology(), config) as driver:
        source = driver.create_input_topic("in")
        for ts, key in enumerate("abcab"):
            source.pipe_input(key, 1, timestamp=ts)
        assert driver.create_output_topic("out").read_key_values_to_list() == [
            ("a", 1),
            ("b", 1),
            ("c", 1),
            ("a", 2),
            ("b", 2),
        ]
