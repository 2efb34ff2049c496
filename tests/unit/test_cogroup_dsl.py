"""Cogroup's DSL (KIP-150): the wiring (one shared store, a node per input, the merge
node, a repartition for an input whose key changed), what it computes on the test driver,
and the errors for bad arguments. Conformance with Kafka: tests/conformance (cogroup-*)."""

from __future__ import annotations

from datetime import timedelta

import lakestate as ls
import pytest
from lakestate.testing import TopologyTestDriver


def _two(builder: ls.StreamsBuilder) -> ls.CogroupedKStream:
    a = builder.stream("a").group_by_key()
    b = builder.stream("b").group_by_key()
    return a.cogroup(lambda k, v, agg: agg + v).cogroup(b, lambda k, v, agg: agg - v)


def test_one_store_a_node_per_input_and_a_merge():
    builder = ls.StreamsBuilder()
    _two(builder).aggregate(lambda: 0, ls.Materialized.as_("totals")).to_stream().to("out")
    topology = builder.build()
    aggregates = [n for n in topology.nodes if n.startswith("COGROUPKSTREAM-AGGREGATE-")]
    merges = [n for n in topology.nodes if n.startswith("COGROUPKSTREAM-MERGE-")]
    assert len(aggregates) == 2 and len(merges) == 1
    assert all(topology.nodes[n].stores == ["totals"] for n in aggregates)
    assert topology.nodes[merges[0]].parents == aggregates
    assert len(topology.subtopologies) == 1
    assert len(topology.copartition_groups) == 1


def test_both_inputs_fold_into_one_aggregate_null_keys_and_values_dropped():
    builder = ls.StreamsBuilder()
    _two(builder).aggregate(lambda: 0, ls.Materialized.as_("totals")).to_stream().to("out")
    with TopologyTestDriver(builder.build()) as driver:
        a, b = driver.create_input_topic("a"), driver.create_input_topic("b")
        out = driver.create_output_topic("out")
        a.pipe_input("k", 5, 10)
        b.pipe_input("k", 2, 4)
        b.pipe_input(None, 2, 4)
        a.pipe_input("k", None, 20)
        a.pipe_input("j", 1, 30)
        got = [(r.key, r.value, r.timestamp) for r in out.read_records_to_list()]
        assert got == [("k", 5, 10), ("k", 3, 10), ("j", 1, 30)]
        assert driver.get_key_value_store("totals").get("k") == 3
        assert driver.metrics()["dropped-records"] == 2


def test_a_key_changed_input_is_repartitioned():
    builder = ls.StreamsBuilder()
    a = builder.stream("a").group_by_key()
    b = builder.stream("b").group_by(lambda k, v: v)
    a.cogroup(lambda k, v, agg: agg + 1).cogroup(b, lambda k, v, agg: agg + 10).aggregate(
        lambda: 0, ls.Materialized.as_("n")
    ).to_stream().to("out")
    topology = builder.build()
    assert topology.subtopologies[0].repartition_sources == ("n-repartition",)
    with TopologyTestDriver(topology) as driver:
        driver.create_input_topic("b").pipe_input("x", "k", 1)
        driver.create_input_topic("a").pipe_input("k", "v", 2)
        got = driver.create_output_topic("out").read_records_to_list()
        assert [(r.key, r.value) for r in got] == [("k", 10), ("k", 11)]


def test_windowed_cogroup_judges_lateness_per_input():
    """Input a's stream time 100 closes a's window [0, 10): a's record at 7 is dropped.
    Input b, at stream time 5, still takes its record at 8 (each input's node keeps its
    own observed stream time, as Kafka's), but the shared store has expired [0, 10) (its
    latest window start is 100), so the window starts again from the initializer, as
    Kafka's store gives it."""
    builder = ls.StreamsBuilder()
    windows = ls.TimeWindows.of_size_with_no_grace(timedelta(milliseconds=10))
    _two(builder).windowed_by(windows).aggregate(lambda: 0).to_stream().to("out")
    with TopologyTestDriver(builder.build()) as driver:
        a, b = driver.create_input_topic("a"), driver.create_input_topic("b")
        out = driver.create_output_topic("out")
        b.pipe_input("k", 1, 5)
        a.pipe_input("k", 7, 6)
        a.pipe_input("j", 1, 100)
        a.pipe_input("k", 1, 7)  # late for a
        b.pipe_input("k", 1, 8)  # not late for b
        got = [(r.key.key, r.key.window.start, r.value) for r in out.read_records_to_list()]
        assert got == [("k", 0, -1), ("k", 0, 6), ("j", 100, 1), ("k", 0, -1)]
        assert driver.metrics()["dropped-records"] == 1


def test_bad_arguments_are_named():
    builder = ls.StreamsBuilder()
    grouped = builder.stream("a").group_by_key()
    with pytest.raises(ls.TopologyException, match="aggregator"):
        grouped.cogroup(lambda v: v)
    cogrouped = grouped.cogroup(lambda k, v, agg: agg)
    with pytest.raises(ls.TopologyException, match="KGroupedStream"):
        cogrouped.cogroup(builder.stream("b"), lambda k, v, agg: agg)
    with pytest.raises(ls.TopologyException, match="initializer"):
        cogrouped.aggregate(lambda x: 0)
    with pytest.raises(ls.TopologyException, match="windowed_by takes"):
        cogrouped.windowed_by(timedelta(seconds=1))
