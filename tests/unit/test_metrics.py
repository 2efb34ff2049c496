"""A task's scoped metrics and how a progress row's totals add up (processors/metrics.py)."""

from __future__ import annotations

from datetime import timedelta

from lakestate import Deduplicated, Materialized, StreamsBuilder
from lakestate.processors.metrics import (
    TaskMetrics,
    accumulate,
    flat,
    is_document,
    task_level,
)
from lakestate.processors.task import Task
from lakestate.records import Record
from lakestate.state.memory import in_memory_store
from lakestate.testing.driver import TopologyTestDriver


def _report(counts=(), values=()) -> dict:
    m = TaskMetrics()
    for level, scope, name, v in counts:
        m.add(level, scope, name, v)
    for level, scope, name, v in values:
        m.set(level, scope, name, v)
    return m.report()


def test_counts_add_to_the_previous_totals_and_values_replace_them():
    first = accumulate(
        None,
        _report(
            [("nodes", "dedup", "dedup-records-forwarded", 3)],
            [("stores", "seen", "dedup-store-size", 3)],
        ),
    )
    second = accumulate(
        first,
        _report(
            [
                ("nodes", "dedup", "dedup-records-forwarded", 2),
                ("nodes", "agg", "dropped-records", 1),
            ],
            [("stores", "seen", "dedup-store-size", 4)],
        ),
    )
    assert second == {
        "nodes": {"agg": {"dropped-records": 1}, "dedup": {"dedup-records-forwarded": 5}},
        "stores": {"seen": {"dedup-store-size": 4}},
    }
    # A batch that counts nothing keeps the totals and the last values.
    assert accumulate(second, _report()) == second
    # A replay of the second batch starts from the same row: the same totals.
    assert (
        accumulate(
            first,
            _report(
                [
                    ("nodes", "dedup", "dedup-records-forwarded", 2),
                    ("nodes", "agg", "dropped-records", 1),
                ],
                [("stores", "seen", "dedup-store-size", 4)],
            ),
        )
        == second
    )


def test_a_row_written_before_metrics_were_scoped_reads_as_its_task_level():
    legacy = {"dedup-records-forwarded": 7, "dropped-records": 1}
    assert not is_document(legacy) and is_document({}) and is_document({"nodes": {}})
    assert task_level(legacy) == legacy and flat(legacy) == legacy
    # Its figures were one batch's, not totals: the next batch's totals start afresh.
    assert accumulate(legacy, _report([("nodes", "n", "dropped-records", 2)])) == {
        "nodes": {"n": {"dropped-records": 2}}
    }


def test_task_level_dropped_records_is_the_nodes_sum():
    doc = {
        "nodes": {"a": {"dropped-records": 2}, "b": {"dropped-records": 3, "x": 1}},
        "stores": {"s": {"dedup-store-size": 9}},
    }
    assert task_level(doc) == {"dropped-records": 5}
    assert flat(doc) == {"dropped-records": 5, "x": 1, "dedup-store-size": 9}


def test_a_task_reports_its_counts_since_it_opened_and_rolls_back_with_an_abort():
    b = StreamsBuilder()
    b.stream("in").group_by_key().count(Materialized.as_("c")).to_stream().to("out")
    task = Task(b.build(), 0, 0, in_memory_store("0_0"), {}, "app")
    task.process("in", 0, Record(None, "v", 1))
    task.commit({})
    task.process("in", 1, Record(None, "v", 2))
    task.abort()
    nodes = task.metrics.report()["counts"]["nodes"]
    (source,) = [n for n in nodes if n.startswith("KSTREAM-SOURCE-")]
    (node,) = [n for n in nodes if n.startswith("KSTREAM-AGGREGATE-")]
    # The committed record only: the source forwarded it, the aggregation dropped it.
    assert task.metrics.report() == {
        "counts": {"nodes": {source: {"forward-total": 1}, node: {"dropped-records": 1}}},
        "values": {},
    }


def test_each_node_counts_what_it_forwards_the_same_in_chunks_and_one_by_one():
    b = StreamsBuilder()
    (
        b.stream("in")
        .filter(lambda k, v: v % 3 != 0)
        .map_values(lambda v: v * 2)
        .group_by_key()
        .count(Materialized.as_("c"))
        .to_stream()
        .to("out")
    )
    topology = b.build()
    records = [Record(f"k{i % 4}", i, 10 + i) for i in range(30)]
    passed = sum(1 for i in range(30) if i % 3 != 0)
    totals = []
    for chunked in (True, False):
        task = Task(topology, 0, 0, in_memory_store("0_0"), {}, "app")
        if chunked:
            assert task.process_chunk("in", list(range(30)), records)
        else:
            for offset, record in enumerate(records):
                task.process("in", offset, record)
        task.commit({})
        counts = task.metrics.report()["counts"]["nodes"]
        by_kind = {n.split("-")[1]: c.get("forward-total", 0) for n, c in counts.items()}
        totals.append(by_kind)
    chunks, one_by_one = totals
    assert chunks == one_by_one
    # Source: every record; filter: those it keeps; map_values and the count: one each.
    assert chunks["SOURCE"] == 30
    assert chunks["FILTER"] == chunks["MAPVALUES"] == chunks["AGGREGATE"] == passed


def test_the_driver_gives_metrics_by_scope_and_by_name():
    b = StreamsBuilder()
    b.stream("in").deduplicate_by_key(timedelta(seconds=10), Deduplicated.as_("seen")).to("out")
    with TopologyTestDriver(b.build()) as d:
        source = d.create_input_topic("in")
        for ts in (1_000, 2_000, 30_000):
            source.pipe_input("k", "v", timestamp=ts)
        scoped = d.scoped_metrics()
        (node,) = [n for n in scoped["nodes"] if n.startswith("KSTREAM-DEDUPLICATE-")]
        (source,) = [n for n in scoped["nodes"] if n.startswith("KSTREAM-SOURCE-")]
        assert scoped["nodes"][node] == {
            "dedup-records-forwarded": 2,
            "dedup-duplicates-dropped": 1,
            "forward-total": 2,
        }
        assert scoped["nodes"][source] == {"forward-total": 3}
        assert scoped["stores"] == {"seen": {"dedup-store-size": 1}}
        assert d.metrics() == flat(scoped)
