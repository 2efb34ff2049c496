"""flat_map, flat_map_values, split/branch, merge, foreach and repartition through the
TopologyTestDriver, with Kafka Streams 4's semantics and node names (KStreamImpl,
BranchedKStreamImpl); Kafka's own driver agrees in tests/conformance."""

from __future__ import annotations

import pytest
from lakestate import (
    Branched,
    Materialized,
    Named,
    ProcessingException,
    Repartitioned,
    StreamsBuilder,
    TopologyException,
)
from lakestate.testing import TopologyTestDriver
from lakestate.testing.driver import TestRecord


def _pipe(driver, topic, records):
    source = driver.create_input_topic(topic)
    for key, value, ts in records:
        source.pipe_input(key, value, timestamp=ts)


def _out(driver, topic="out"):
    return [
        (r.key, r.value, r.timestamp)
        for r in driver.create_output_topic(topic).read_records_to_list()
    ]


# -- flat_map / flat_map_values -------------------------------------------------------------


def test_flat_map_gives_each_pair_in_order_with_the_records_timestamp_and_headers():
    b = StreamsBuilder()
    b.stream("in").flat_map(lambda k, v: [(f"{k}{i}", v * i) for i in range(v)]).to("out")
    with TopologyTestDriver(b.build()) as d:
        d.create_input_topic("in").pipe_input("a", 2, timestamp=5, headers={"h": 1})
        _pipe(d, "in", [("b", 0, 6), ("c", 3, 4)])
        records = d.create_output_topic("out").read_records_to_list()
    assert records == [
        TestRecord("a0", 0, 5, {"h": 1}),
        TestRecord("a1", 2, 5, {"h": 1}),
        TestRecord("c0", 0, 4),
        TestRecord("c1", 3, 4),
        TestRecord("c2", 6, 4),
    ]


def test_flat_map_changes_keys_so_a_count_repartitions_and_drops_null_keys():
    b = StreamsBuilder()
    b.stream("in").flat_map(
        lambda k, v: [(w, 1) for w in v.split()] + [(None, 1)]
    ).group_by_key().count(Materialized.as_("words")).to_stream().to("out")
    topology = b.build()
    assert len(topology.subtopologies) == 2
    assert topology.subtopologies[0].repartition_sinks == ("words-repartition",)
    with TopologyTestDriver(topology) as d:
        _pipe(d, "in", [(None, "a b a", 1), ("x", "b", 2)])
        assert _out(d) == [("a", 1, 1), ("b", 1, 1), ("a", 2, 1), ("b", 2, 2)]
        # The null keys are dropped at the repartition topic, uncounted (as Kafka 4.4 does).
        assert "dropped-records" not in d.metrics()


def test_flat_map_values_keeps_keys_and_needs_no_repartition():
    b = StreamsBuilder()
    b.stream("in").flat_map_values(lambda v: v or []).group_by_key().count().to_stream().to("out")
    topology = b.build()
    assert len(topology.subtopologies) == 1
    with TopologyTestDriver(topology) as d:
        _pipe(d, "in", [("a", [1, 2], 1), ("a", None, 2), ("b", [None, 3], 3)])
        # b's null value is not counted (dropped), its 3 is.
        assert _out(d) == [("a", 1, 1), ("a", 2, 1), ("b", 1, 3)]
        assert d.metrics()["dropped-records"] == 1


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda s: s.flat_map(lambda k, v: None), "flat_map's mapper returned None"),
        (lambda s: s.flat_map(lambda k, v: [k, v]), r"must give \(key, value\) tuples, got 'a'"),
        (lambda s: s.flat_map_values(lambda v: None), "flat_map_values' mapper returned None"),
    ],
)
def test_a_mapper_that_gives_no_iterable_of_pairs_fails_naming_the_node(build, message):
    b = StreamsBuilder()
    build(b.stream("in")).to("out")
    with TopologyTestDriver(b.build()) as d:
        with pytest.raises(ProcessingException, match=rf"node KSTREAM-FLATMAP.*{message}"):
            _pipe(d, "in", [("a", 1, 1)])


def test_flat_map_functions_are_checked_at_build():
    with pytest.raises(TopologyException, match="node KSTREAM-FLATMAP-0000000001: mapper must"):
        StreamsBuilder().stream("in").flat_map("nope")
    with pytest.raises(TopologyException, match="KSTREAM-FLATMAPVALUES-0000000001: mapper must"):
        StreamsBuilder().stream("in").flat_map_values(None)


# -- split ---------------------------------------------------------------------------------


def _split(b, named=None):
    return (
        b.stream("in")
        .split(named)
        .branch(lambda k, v: v > 10, Branched.as_("big"))
        .branch(lambda k, v: v > 5)
        .branch(lambda k, v: v > 0, Branched.as_("small"))
    )


def test_split_names_branches_as_kafka_does():
    b = StreamsBuilder()
    branches = _split(b, Named.as_("size-")).default_branch()
    assert list(branches) == ["size-big", "size-2", "size-small", "size-0"]
    b = StreamsBuilder()
    branches = _split(b).default_branch(Branched.as_("rest"))
    # The generated splitter name, then its index or name (BranchedKStreamImpl).
    assert list(branches) == [
        "KSTREAM-BRANCH-0000000001big",
        "KSTREAM-BRANCH-00000000012",
        "KSTREAM-BRANCH-0000000001small",
        "KSTREAM-BRANCH-0000000001rest",
    ]
    described = b.build().describe()
    assert "Processor: KSTREAM-BRANCH-0000000001\n" in described
    assert "--> KSTREAM-BRANCH-0000000001big, KSTREAM-BRANCH-00000000012" in described


def test_a_record_goes_to_the_first_branch_whose_predicate_holds_else_the_default():
    b = StreamsBuilder()
    branches = _split(b, Named.as_("s-")).default_branch()
    for name, stream in branches.items():
        stream.to(name)
    with TopologyTestDriver(b.build()) as d:
        _pipe(d, "in", [("a", 20, 1), ("b", 7, 2), ("c", 1, 3), ("d", -1, 4), ("e", 11, 5)])
        assert [k for k, _, _ in _out(d, "s-big")] == ["a", "e"]
        assert [k for k, _, _ in _out(d, "s-2")] == ["b"]
        assert [k for k, _, _ in _out(d, "s-small")] == ["c"]
        assert [k for k, _, _ in _out(d, "s-0")] == ["d"]


def test_without_a_default_branch_unmatched_records_are_dropped():
    b = StreamsBuilder()
    branches = _split(b, Named.as_("s-")).no_default_branch()
    assert list(branches) == ["s-big", "s-2", "s-small"]
    b.build()
    for stream in branches.values():
        stream.to("out")
    with TopologyTestDriver(b.build()) as d:
        _pipe(d, "in", [("a", 20, 1), ("d", -1, 2), ("c", 1, 3)])
        assert [k for k, _, _ in _out(d)] == ["a", "c"]
        assert "dropped-records" not in d.metrics()


def test_branched_with_function_and_with_consumer():
    b = StreamsBuilder()
    seen = []
    branches = (
        b.stream("in")
        .split(Named.as_("s-"))
        .branch(lambda k, v: v > 0, Branched.with_function(lambda s: s.map_values(lambda v: -v)))
        .branch(lambda k, v: v == 0, Branched.with_function(lambda s: None, "gone"))
        .default_branch(Branched.with_consumer(lambda s: seen.append(s) or s.to("negative")))
    )
    assert list(branches) == ["s-1"]  # a None result and a consumer's branch are left out
    assert len(seen) == 1
    branches["s-1"].to("out")
    with TopologyTestDriver(b.build()) as d:
        _pipe(d, "in", [("a", 3, 1), ("b", 0, 2), ("c", -2, 3)])
        assert _out(d) == [("a", -3, 1)]
        assert _out(d, "negative") == [("c", -2, 3)]


def test_split_keeps_the_need_to_repartition():
    b = StreamsBuilder()
    branches = (
        b.stream("in")
        .select_key(lambda k, v: v)
        .split()
        .branch(lambda k, v: True)
        .no_default_branch()
    )
    next(iter(branches.values())).group_by_key().count().to_stream().to("out")
    assert len(b.build().subtopologies) == 2


def test_split_is_refused_where_kafka_refuses_it_or_it_cannot_be_what_was_meant():
    s = StreamsBuilder().stream("in")
    with pytest.raises(TopologyException, match="contains ' '"):
        s.split(Named.as_("bad name"))
    with pytest.raises(TopologyException, match="node KSTREAM-BRANCH-0000000001: predicate must"):
        s.split().branch("x")
    split = s.split(Named.as_("p-")).branch(lambda k, v: True, Branched.as_("x"))
    with pytest.raises(TopologyException, match="node p-x already exists"):
        split.branch(lambda k, v: True, Branched.as_("x"))
    split.no_default_branch()
    with pytest.raises(TopologyException, match=r"node p-: branch\(\) after default_branch"):
        split.branch(lambda k, v: True)
    with pytest.raises(TopologyException, match="needs a callable"):
        Branched.with_function(None)


def test_a_branch_added_after_build_does_not_change_the_built_topology():
    b = StreamsBuilder()
    split = b.stream("in").split(Named.as_("s-")).branch(lambda k, v: v > 0)
    topology = b.build()
    split.branch(lambda k, v: True)
    assert "s-2" not in topology.nodes
    with TopologyTestDriver(topology) as d:
        # -1 would go to s-2 in the builder's topology; in the built one, nowhere.
        _pipe(d, "in", [("a", -1, 1), ("b", 1, 2)])


# -- merge ---------------------------------------------------------------------------------


def test_merge_interleaves_two_sources_in_processing_order():
    b = StreamsBuilder()
    b.stream("left").merge(b.stream("right").map_values(lambda v: v * 10)).to("out")
    topology = b.build()
    assert len(topology.subtopologies) == 1  # both sources in one sub-topology, as in Kafka
    with TopologyTestDriver(topology) as d:
        _pipe(d, "left", [("a", 1, 5)])
        _pipe(d, "right", [("b", 2, 1)])
        _pipe(d, "left", [("c", 3, 2)])
        assert _out(d) == [("a", 1, 5), ("b", 20, 1), ("c", 3, 2)]


def test_merging_branches_back_gives_the_order_of_one_record_at_a_time():
    # Each record goes down one branch, the "big" ones also down a second path: the merged
    # stream holds them in the order Kafka forwards them, record after record.
    b = StreamsBuilder()
    s = b.stream("in")
    branches = s.split(Named.as_("s-")).branch(lambda k, v: v > 5).default_branch()
    doubled = branches["s-1"].flat_map_values(lambda v: [v, v + 100])
    merged = doubled.merge(branches["s-0"], Named.as_("merged")).merge(s.filter(lambda k, v: v > 5))
    merged.to("out")
    records = [("a", 6, 1), ("b", 1, 2), ("c", 9, 3), ("d", 2, 4)]
    expected = [
        ("a", 6, 1), ("a", 106, 1), ("a", 6, 1),
        ("b", 1, 2),
        ("c", 9, 3), ("c", 109, 3), ("c", 9, 3),
        ("d", 2, 4),
    ]  # fmt: skip
    with TopologyTestDriver(b.build()) as one:
        _pipe(one, "in", records)
        assert _out(one) == expected
    with TopologyTestDriver(b.build()) as listed:  # as one chunk
        listed.create_input_topic("in").pipe_record_list(TestRecord(*r) for r in records)
        assert _out(listed) == expected


def test_merge_repartitions_when_either_side_changed_keys():
    b = StreamsBuilder()
    left = b.stream("left")
    right = b.stream("right").select_key(lambda k, v: v)
    left.merge(right).group_by_key().count().to_stream().to("out")
    assert len(b.build().subtopologies) == 2
    with pytest.raises(TopologyException, match="merge\\(\\) takes a KStream of the same"):
        left.merge(StreamsBuilder().stream("x"))


# -- foreach -------------------------------------------------------------------------------


def test_foreach_calls_its_action_per_record_and_is_terminal():
    b = StreamsBuilder()
    calls = []
    result = b.stream("in").foreach(lambda k, v: calls.append((k, v)))
    assert result is None
    with TopologyTestDriver(b.build()) as d:
        d.create_input_topic("in").pipe_record_list(
            [TestRecord("a", 1, 1), TestRecord(None, None, 2)]
        )
    assert calls == [("a", 1), (None, None)]


# -- repartition ---------------------------------------------------------------------------


def test_repartition_goes_through_a_topic_named_as_kafka_names_it():
    b = StreamsBuilder()
    s = b.stream("in")
    s.repartition().to("out-1")
    s.repartition(Repartitioned.as_("by-user").with_number_of_partitions(4)).to("out-2")
    s.repartition(Repartitioned.with_number_of_partitions(2)).to("out-3")
    topology = b.build()
    assert topology.subtopologies[0].repartition_sinks == (
        "KSTREAM-REPARTITION-0000000001-repartition",
        "by-user-repartition",
        "KSTREAM-REPARTITION-0000000008-repartition",
    )
    assert topology.repartition_partitions() == {
        "by-user-repartition": 4,
        "KSTREAM-REPARTITION-0000000008-repartition": 2,
    }
    assert "Sink: by-user-repartition-sink (topic: by-user-repartition)" in topology.describe()
    assert "Source: by-user-repartition-source" in topology.describe()
    with TopologyTestDriver(topology) as d:
        _pipe(d, "in", [("a", 1, 1), (None, 2, 2)])  # a null key is dropped at the topic
        for topic in ("out-1", "out-2", "out-3"):
            assert _out(d, topic) == [("a", 1, 1)]
        assert d.create_output_topic("test-app-by-user-repartition").is_empty()


def test_repartition_after_a_key_change_makes_the_aggregation_read_it_directly():
    b = StreamsBuilder()
    b.stream("in").select_key(lambda k, v: v).repartition(
        Repartitioned.as_("by-value")
    ).group_by_key().count(Materialized.as_("counts")).to_stream().to("out")
    topology = b.build()
    assert [s.repartition_sinks for s in topology.subtopologies] == [("by-value-repartition",), ()]
    with TopologyTestDriver(topology) as d:
        _pipe(d, "in", [("a", "x", 1), ("b", "x", 2), ("c", None, 3)])
        assert _out(d) == [("x", 1, 1), ("x", 2, 2)]


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: Repartitioned.with_number_of_partitions(0), "at least 1, got 0"),
        (lambda: Repartitioned.with_number_of_partitions(2.0), "at least 1, got 2.0"),
        (lambda: Repartitioned.as_("a/b"), "contains '/'"),
        (lambda: Repartitioned.with_name(""), "needs a non-empty name"),
    ],
)
def test_bad_repartitioned_settings_are_refused(make, message):
    with pytest.raises(TopologyException, match=message):
        make()
