"""Stream time per task: the largest timestamp seen, the current record included; committed
with the state, restored by abort, and continued by a task reopened on the same store."""

from __future__ import annotations

from pathlib import Path

import pytest
from lakestate import Materialized, StreamsBuilder
from lakestate.processors.api import Processor
from lakestate.processors.task import NO_STREAM_TIME, Task
from lakestate.records import Record
from lakestate.state.base import TopicPartition
from lakestate.state.memory import in_memory_store
from lakestate.state.rocksdb import rocksdb_store
from lakestate.testing.driver import TopologyTestDriver


class StreamTimeRecorder(Processor):
    """Test-only: records the stream time each record sees, then forwards the record."""

    def __init__(self, seen: list[int]) -> None:
        self.seen = seen

    def process(self, record: Record) -> None:
        self.seen.append(self.context.stream_time)
        self.context.forward(record)


def _topology(seen: list[int]):
    b = StreamsBuilder()
    s = b.stream("in")
    name = b._graph.new_name("TEST-STREAMTIME-")
    b._graph.add_processor(name, s.node_name, lambda: StreamTimeRecorder(seen))
    # Give the task a store too, so that committed state and stream time travel together.
    s.group_by_key().count(Materialized.as_("counts"))
    return b.build()


def _process(task: Task, offset: int, ts: int, key: str = "k") -> None:
    task.process("in", offset, Record(key, "v", ts))


def test_stream_time_is_the_max_timestamp_seen_including_the_current_record():
    seen: list[int] = []
    store = in_memory_store("0_0")
    task = Task(_topology(seen), 0, 0, store, {}, "app")
    assert task.stream_time == NO_STREAM_TIME == -1
    for offset, ts in enumerate([10, 5, 30, 20, 30, 31]):
        _process(task, offset, ts)
    assert seen == [10, 10, 30, 30, 30, 31]
    assert task.stream_time == 31
    task.close()
    store.close()


def test_stream_time_in_the_driver():
    seen: list[int] = []
    with TopologyTestDriver(_topology(seen)) as driver:
        source = driver.create_input_topic("in")
        for ts in [100, 50, 150, 0]:
            source.pipe_input("k", "v", timestamp=ts)
    assert seen == [100, 100, 150, 150]


def test_stream_time_is_committed_with_the_state():
    seen: list[int] = []
    store = in_memory_store("0_0")
    task = Task(_topology(seen), 0, 0, store, {}, "app")
    _process(task, 0, 40)
    _process(task, 1, 20)
    assert store.stream_time() is None  # nothing committed yet
    task.commit({TopicPartition("in", 0): 2})
    assert store.stream_time() == 40
    assert store.committed_offset(TopicPartition("in", 0)) == 2
    task.close()
    store.close()


def test_abort_restores_the_committed_stream_time():
    seen: list[int] = []
    store = in_memory_store("0_0")
    task = Task(_topology(seen), 0, 0, store, {}, "app")
    _process(task, 0, 50)
    task.abort()  # before any commit: back to "no stream time"
    assert task.stream_time == NO_STREAM_TIME
    _process(task, 0, 20)
    task.commit({TopicPartition("in", 0): 1})
    _process(task, 1, 90)
    _process(task, 2, 95)
    assert task.stream_time == 95
    task.abort()
    assert task.stream_time == 20
    assert store.stream_time() == 20
    _process(task, 1, 25)
    assert seen == [50, 20, 90, 95, 25]
    # The aborted records' state is gone too.
    counts = task.store_view("counts")
    assert counts.get("k") == 2
    task.close()
    store.close()


def test_failed_record_does_not_advance_stream_time_in_the_driver():
    seen: list[int] = []
    b = StreamsBuilder()
    s = b.stream("in")
    name = b._graph.new_name("TEST-STREAMTIME-")
    b._graph.add_processor(name, s.node_name, lambda: StreamTimeRecorder(seen))
    s.map_values(lambda v: 1 // v).to("out")
    with TopologyTestDriver(b.build()) as driver:
        source = driver.create_input_topic("in")
        source.pipe_input("k", 1, timestamp=10)
        with pytest.raises(Exception):  # noqa: B017 - any processing failure
            source.pipe_input("k", 0, timestamp=1000)
        source.pipe_input("k", 1, timestamp=20)
    assert seen == [10, 1000, 20]


def test_reopened_task_continues_from_the_committed_stream_time(tmp_path: Path):
    seen: list[int] = []
    topology = _topology(seen)
    path = tmp_path / "0_0"

    store = rocksdb_store("0_0", path)
    task = Task(topology, 0, 0, store, {}, "app")
    _process(task, 0, 100)
    _process(task, 1, 60)
    task.commit({TopicPartition("in", 0): 2})
    _process(task, 2, 500)  # processed but never committed: lost with the crash
    task.close()
    store.close()

    store = rocksdb_store("0_0", path)
    assert store.stream_time() == 100
    assert store.committed_offset(TopicPartition("in", 0)) == 2
    task = Task(topology, 0, 0, store, {}, "app")
    assert task.stream_time == 100
    _process(task, 2, 70)
    assert seen[-1] == 100  # an older record does not move stream time back
    _process(task, 3, 120)
    assert seen[-1] == 120
    assert task.store_view("counts").get("k") == 4
    task.commit({TopicPartition("in", 0): 4})
    task.close()
    store.close()

    store = rocksdb_store("0_0", path)
    task = Task(topology, 0, 0, store, {}, "app")
    assert task.stream_time == 120
    task.abort()
    assert task.stream_time == 120
    task.close()
    store.close()


def test_each_task_has_its_own_stream_time():
    seen: list[int] = []
    topology = _topology(seen)
    stores = [in_memory_store("0_0"), in_memory_store("0_1")]
    tasks = [Task(topology, 0, p, stores[p], {}, "app") for p in (0, 1)]
    _process(tasks[0], 0, 1000)
    _process(tasks[1], 0, 5)
    assert [t.stream_time for t in tasks] == [1000, 5]
    for task, store in zip(tasks, stores, strict=True):
        task.close()
        store.close()
