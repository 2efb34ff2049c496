"""The deduplication DSL: ``Deduplicated`` naming, store and node names, argument checks."""

from __future__ import annotations

from datetime import timedelta

import lakestate as ls
import pytest
from lakestate import Deduplicated, StreamsBuilder, TopologyException
from lakestate.state.dedup import DedupStore
from lakestate.state.registry import view_class

TEN_S = timedelta(seconds=10)


def _id(k, v):
    return v


def test_deduplicated_is_exported_and_names_the_store():
    assert ls.Deduplicated is Deduplicated
    assert Deduplicated.as_("seen").store_name == "seen"
    assert Deduplicated.as_("a").with_name("b").store_name == "b"
    assert Deduplicated().store_name is None


@pytest.mark.parametrize("bad", ["", "  ", "a/b", "a b", None, 3])
def test_deduplicated_rejects_bad_names(bad):
    with pytest.raises(TopologyException):
        Deduplicated.as_(bad)
    with pytest.raises(TopologyException):
        Deduplicated().with_name(bad)


def test_generated_names():
    b = StreamsBuilder()
    s = b.stream("in")
    s.deduplicate_by_key(TEN_S).to("o1")
    s.deduplicate(_id, TEN_S).to("o2")
    topology = b.build()
    stores = sorted(topology.stores)
    assert stores == [
        "KSTREAM-DEDUPLICATE-STATE-STORE-0000000002",
        "KSTREAM-DEDUPLICATE-STATE-STORE-0000000006",
    ]
    assert all(topology.stores[name].kind == "dedup" for name in stores)
    assert "KSTREAM-DEDUPLICATE-0000000001" in topology.nodes
    # deduplicate: key selection, then the repartition named after the store, then dedup.
    assert "KSTREAM-KEY-SELECT-0000000004" in topology.nodes
    dedup = topology.nodes["KSTREAM-DEDUPLICATE-0000000005"]
    assert dedup.stores == ["KSTREAM-DEDUPLICATE-STATE-STORE-0000000006"]
    assert topology.subtopologies[1].repartition_sources == (
        "KSTREAM-DEDUPLICATE-STATE-STORE-0000000006-repartition",
    )
    assert "Processor: KSTREAM-DEDUPLICATE-0000000005" in topology.describe()


def test_named_store_and_repartition_topic():
    b = StreamsBuilder()
    b.stream("in").deduplicate(_id, TEN_S, Deduplicated.as_("seen")).to("out")
    topology = b.build()
    assert topology.stores["seen"].kind == "dedup"
    assert topology.sink_topics() == ["out"]
    assert topology.subtopologies[0].repartition_sinks == ("seen-repartition",)


def test_the_same_name_twice_is_rejected():
    b = StreamsBuilder()
    s = b.stream("in")
    s.deduplicate_by_key(TEN_S, Deduplicated.as_("seen"))
    s.deduplicate_by_key(TEN_S, Deduplicated.as_("seen"))
    with pytest.raises(TopologyException, match="seen"):
        b.build()


@pytest.mark.parametrize("interval", [timedelta(seconds=-1), "10s", None, 1.5])
def test_bad_intervals_are_rejected_naming_the_node(interval):
    b = StreamsBuilder()
    with pytest.raises(TopologyException, match="KSTREAM-DEDUPLICATE-"):
        b.stream("in").deduplicate_by_key(interval)


def test_interval_may_be_zero():
    b = StreamsBuilder()
    b.stream("in").deduplicate_by_key(timedelta(0))
    b.build()


@pytest.mark.parametrize("method", ["deduplicate_by_key_value", "deduplicate"])
def test_id_selector_must_be_callable(method):
    b = StreamsBuilder()
    with pytest.raises(TopologyException, match="id_selector must be callable"):
        getattr(b.stream("in"), method)("id", TEN_S)


def test_deduplicated_argument_is_checked():
    b = StreamsBuilder()
    with pytest.raises(TopologyException, match="Deduplicated"):
        b.stream("in").deduplicate_by_key(TEN_S, ls.Materialized.as_("x"))


def test_dedup_kind_is_registered_with_its_state_table_columns():
    assert view_class("dedup") is DedupStore
    assert DedupStore.STATE_COLUMNS == (
        ("dedup_id", "STRING"),
        ("ts", "BIGINT"),
        ("offset", "BIGINT"),
    )
