"""The topic interface (``lakestate.io.topics``): its log-table implementation without a
JVM (create, partitions, end offsets, appends with txns, a batch's append, ranged reads,
describe), and a fake in-memory kind through which the runtime plans and reads a batch,
so that planning and reading depend on the interface, not on log tables."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pytest
from lakestate.checkpoint.layout import AppLayout
from lakestate.checkpoint.layout import end_offsets as layout_end_offsets
from lakestate.errors import TaskMigratedException
from lakestate.io import delta_commits, delta_log, topics
from lakestate.io.logtable import ENDS_METADATA_KEY
from lakestate.io.logtable import ends as log_ends
from lakestate.io.topic_records import RECORD_SCHEMA, check_ranges
from lakestate.runtime import inprocess
from lakestate.runtime.plan import plan_tasks
from lakestate.runtime.transport import input_reads
from lakestate.task_id import TaskId
from lakestate.warehouse import Warehouse


@pytest.fixture
def wh(tmp_path) -> Warehouse:
    return Warehouse(tmp_path / "wh")


def _offsets(topic: topics.Topic) -> dict[int, list[int]]:
    return {
        t.column("partition")[0].as_py(): t.column("offset").to_pylist()
        for t in topic.read_partitions()
        if t.num_rows
    }


# -- the log-table implementation ---------------------------------------------------------


def test_create_partitions_and_describe(wh):
    events = topics.topic(wh, "events")
    assert events.kind == "log_table" and not events.exists()
    with pytest.raises(ValueError, match="does not exist"):
        events.partitions()
    events.create(3)
    events.create(3)  # exist_ok
    assert events.exists() and events.partitions() == 3
    with pytest.raises(ValueError, match="already exists with 3 partitions, not 2"):
        events.create(2)
    with pytest.raises(ValueError, match="already exists"):
        events.create(3, exist_ok=False)
    with pytest.raises(ValueError, match="partitions must be an int >= 1"):
        topics.topic(wh, "other").create(0)
    with pytest.raises(ValueError, match="illegal topic name"):
        topics.topic(wh, "a/b")
    events.append([("a", 1, 5, 0), ("b", 2, 6, 2), ("c", 3, 7, 2)])
    about = events.describe()
    assert about == topics.TopicDescription(
        "events", "log_table", wh.topic_path("events"), 3, {0: 1, 1: 0, 2: 2}
    )
    assert about.records == 3
    events.check_columns()


def test_appends_number_densely_and_txns_make_them_idempotent(wh):
    out = topics.topic(wh, "out")
    out.create(2)
    first = out.append([("k1", 1, 100, 0), ("k2", 2, 101, 1), ("k3", 3, 102, 1)])
    assert first.ranges == {0: (0, 1), 1: (0, 2)} and first.total == 3
    again = out.append([("k4", 4, 103, 1)], txn_app_id="producer", txn_version=1)
    assert again.ranges == {1: (2, 3)} and again.version == first.version + 1
    replay = out.append([("k4", 4, 103, 1)], txn_app_id="producer", txn_version=1)
    assert replay.skipped and replay.ranges == {} and replay.version == again.version
    assert out.end_offsets() == {0: 1, 1: 3}
    assert _offsets(out) == {0: [0], 1: [0, 1, 2]}
    with pytest.raises(ValueError, match="together"):
        out.append([("k", 1)], txn_app_id="producer")
    with pytest.raises(ValueError, match="record 1: partition 5 is out of range"):
        out.append([("k", 1), ("k", 1, 1, 5)])
    assert out.end_offsets() == {0: 1, 1: 3}  # nothing written
    with pytest.raises(ValueError, match="line 2: missing 'value'"):
        topics.validate_records([("k", 1), {"key": 1}], 2, ["line 1", "line 2"])


def test_reader_reads_ranges_from_one_snapshot(wh):
    r = topics.topic(wh, "r")
    r.create(2)
    r.append([(f"k{i}", i, i, 0) for i in range(5)] + [(f"k{i}", i, i, 1) for i in range(3)])
    reader = r.reader()

    def read(ranges):
        rows = reader.read_range(ranges)
        assert rows.column_names == RECORD_SCHEMA.names
        columns = (rows.column("partition").to_pylist(), rows.column("offset").to_pylist())
        return sorted(zip(*columns, strict=True))

    assert read({}) == [] and read({0: (2, 2)}) == [] and read({0: (5, 9)}) == []
    assert read({0: (1, 3)}) == [(0, 1), (0, 2)]  # start inclusive, end exclusive
    assert read({1: (2, 100), 0: (4, 5)}) == [(0, 4), (1, 2)]
    r.append([("late", 9, 9, 1)])
    assert read({1: (0, 10)}) == [(1, 0), (1, 1), (1, 2)]  # the reader's snapshot
    assert len(r.reader().read_range({1: (0, 10)})) == 4
    for bad in [{0: (3, 1)}, {0: (-1, 2)}, {0: (0,)}, {-1: (0, 1)}, {0: (0, True)}]:
        with pytest.raises(ValueError, match="read_range 'r'"):
            reader.read_range(bad)
    assert check_ranges("r", {1: (0, 2), 0: (1, 1)}) == {0: (1, 1), 1: (0, 2)}


def test_read_partitions_in_order_with_a_limit(wh):
    t = topics.topic(wh, "t")
    t.create(3)
    t.append([(f"k{i}", i, i, i % 3) for i in range(9)])
    assert _offsets(t) == {0: [0, 1, 2], 1: [0, 1, 2], 2: [0, 1, 2]}
    limited = list(t.read_partitions([2, 0], limit=4))
    assert [(x.column("partition")[0].as_py(), x.num_rows) for x in limited] == [(0, 3), (2, 1)]
    records = [r for x in limited for r in topics.records_of(x)]
    assert [(r.partition, r.offset, r.key, r.value) for r in records][-1] == (2, 0, "k2", 2)


def _batch_rows(rows_by_task: dict[TaskId, list[tuple[int, str]]]):
    """A ``BatchRows`` numbering each todo task's (partition, key) rows from the ends."""
    calls = []

    def build(todo: dict[TaskId, int], ends: dict[int, int]) -> pa.Table:
        calls.append((dict(todo), dict(ends)))
        next_offset = dict(ends)
        cols = {name: [] for name in RECORD_SCHEMA.names}
        for task in sorted(todo):
            for p, key in rows_by_task[task]:
                cols["partition"].append(p)
                cols["offset"].append(next_offset[p])
                next_offset[p] += 1
                cols["timestamp"].append(1)
                cols["key"].append(f'"{key}"')
                cols["value"].append("1")
                cols["headers"].append(None)
        return pa.table(cols, schema=RECORD_SCHEMA)

    return build, calls


def test_append_batch_carries_each_tasks_txn_and_skips_what_it_holds(wh, monkeypatch):
    sink = topics.topic(wh, "sink")
    sink.create(2)
    sink.append([("x", 0, 1, 1)])
    t0, t1 = TaskId(0, 0), TaskId(0, 1)
    build, calls = _batch_rows({t0: [(0, "a"), (1, "b")], t1: [(1, "c")]})
    done = sink.append_batch("app", {t0: 1, t1: 1}, build, {"run_id": "r1"})
    assert calls == [({t0: 1, t1: 1}, {0: 0, 1: 1})]
    assert done.ranges == {0: (0, 1), 1: (1, 3)} and not done.skipped
    table = delta_commits.open_table(wh.topic_path("sink"))
    assert delta_commits.txn_versions(table, "app", [t0, t1]) == {t0: 1, t1: 1}
    commit = delta_log.read_commit(delta_log.local_log(wh.topic_path("sink")), done.version)
    assert commit.metadata_value(ENDS_METADATA_KEY) == {"0": 1, "1": 3}
    assert commit.metadata_value("run_id") == "r1"

    # A replay: the task batches it holds are not appended again.
    assert sink.append_batch("app", {t0: 1, t1: 1}, build, {}).skipped
    build2, calls2 = _batch_rows({t0: [(0, "d")], t1: [(0, "e")]})
    partly = sink.append_batch("app", {t0: 1, t1: 2}, build2, {})
    assert calls2 == [({t1: 2}, {0: 1, 1: 3})] and partly.ranges == {0: (1, 2)}

    # The end offsets come from the commits alone, as a new process would read them.
    def no_scan(*args):
        raise AssertionError("end offsets scanned: the commits should have told them")

    monkeypatch.setattr(log_ends, "_scan_end_offsets", no_scan)
    log_ends.clear_cache()
    assert sink.end_offsets() == {0: 2, 1: 3}
    assert _offsets(sink) == {0: [0, 1], 1: [0, 1, 2]}


def test_append_batch_conflicts_with_a_concurrent_commit_of_the_same_txn(wh, monkeypatch):
    sink = topics.topic(wh, "sink")
    sink.create(1)
    t0 = TaskId(0, 0)
    build, _ = _batch_rows({t0: [(0, "a")]})

    def racing(todo, ends):
        # Another writer commits the same task batch between the check and the append.
        table = delta_commits.open_table(wh.topic_path("sink"))
        delta_commits.append(table, RECORD_SCHEMA.empty_table(), "app", {t0: 1}, {})
        return build(todo, ends)

    with pytest.raises(TaskMigratedException):
        sink.append_batch("app", {t0: 1}, racing, {})


def test_append_lock_is_reentrant(wh):
    t = topics.topic(wh, "t")
    t.create(1)
    with t.append_lock(), t.append_lock():
        assert t.append([("k", 1)]).ranges == {0: (0, 1)}


# -- a fake kind: the runtime plans and reads through the interface -----------------------


@dataclass
class MemoryTopic:
    """A topic held in memory (``topics.Topic``, the parts a batch's planning and reading
    use)."""

    name: str
    records: dict[int, list[tuple[int, str, str]]]  # partition -> (timestamp, key, value)
    kind: str = "memory"

    def exists(self) -> bool:
        return True

    def partitions(self) -> int:
        return len(self.records)

    def end_offsets(self) -> dict[int, int]:
        return {p: len(rs) for p, rs in self.records.items()}

    def reader(self) -> MemoryTopic:
        return self

    def read_range(self, ranges) -> pa.Table:
        cols = {name: [] for name in RECORD_SCHEMA.names}
        for p, (start, end) in check_ranges(self.name, ranges).items():
            for offset in range(start, min(end, len(self.records[p]))):
                ts, key, value = self.records[p][offset]
                for name, v in zip(cols, (p, offset, ts, key, value, None), strict=True):
                    cols[name].append(v)
        return pa.table(cols, schema=RECORD_SCHEMA)

    def append_lock(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()


class MemoryKind:
    name = "memory"

    def __init__(self, held: dict[str, MemoryTopic]) -> None:
        self.held = held

    def topic(self, warehouse, name, partitions=None) -> MemoryTopic:
        return self.held[name]


@pytest.fixture
def memory_topics(monkeypatch) -> Iterator[dict[str, MemoryTopic]]:
    held = {
        "events": MemoryTopic("events", {0: [(1, '"a"', "1"), (2, '"b"', "2")], 1: []}),
        "rates": MemoryTopic("rates", {0: [(0, '"eur"', "1.1")]}),
    }
    monkeypatch.setitem(topics.KINDS, "memory", MemoryKind(held))
    monkeypatch.setattr(topics, "kind_of", lambda warehouse, name: "memory")
    yield held


def test_the_runtime_plans_and_reads_a_batch_through_the_topic_interface(wh, memory_topics):
    layout = AppLayout(
        app=None,  # planning and reading need no app module
        warehouse=wh,
        inputs={0: ["events"]},
        task_counts={0: 2},
        outputs={},
        partitions={"events": 2, "rates": 1},
        global_topics=("rates",),
    )
    ends = {t: layout_end_offsets(layout, t) for t in ("events", "rates")}
    assert ends == {"events": {0: 2, 1: 0}, "rates": {0: 1}}
    plans = plan_tasks(layout.tasks(), layout.inputs, {}, ends, None, layout.global_topics)
    assert [(p.task, p.ranges) for p in plans] == [
        (TaskId(0, 0), {"rates@0": (0, 1), "events": (0, 2)}),
        (TaskId(0, 1), {"rates@0": (0, 1)}),
    ]
    reads = input_reads(layout.inputs, layout.global_topics, plans)
    rows = inprocess.read_inputs(reads, plans[0].task, inprocess.BatchReads(layout))
    got = sorted(
        zip(
            *(rows.column(c).to_pylist() for c in ("input_index", "topic", "offset", "key")),
            strict=True,
        )
    )
    assert got == [(-1, "rates", 0, '"eur"'), (0, "events", 0, '"a"'), (0, "events", 1, '"b"')]
    assert set(rows.column("task").to_pylist()) == {0}
    assert not os.path.exists(wh.topics_dir())  # no log table anywhere
