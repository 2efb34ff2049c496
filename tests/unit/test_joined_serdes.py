"""``Joined`` in stream-table joins, as Kafka Streams 4.3's KStreamImpl.join(KTable, joiner,
Joined): the repartition topic before the join takes Joined's key serde (else the stream's
known one, which a key change clears: Json) and value serde (else the stream's), and is
named ``<name>-repartition`` after Joined's name, which names the join processor too; the
joined stream keeps the key serde. A grace period (KIP-923) is refused at build."""

from __future__ import annotations

from datetime import timedelta

import pytest
from lakestate import (
    Consumed,
    Joined,
    Serdes,
    SerializationException,
    StreamsBuilder,
    TopologyException,
)
from lakestate.serdes import TopicSerdes
from lakestate.testing.driver import TopologyTestDriver
from lakestate.topology.graph import PROCESSOR, SINK, SOURCE

S, L, J = Serdes.String(), Serdes.Long(), Serdes.Json()


def _topics(topology) -> dict[str, TopicSerdes]:
    """Each repartition topic's serdes (its sink's, checked equal to its source's)."""
    found: dict[str, TopicSerdes] = {}
    for node in topology.nodes.values():
        if node.internal_topic and node.kind in (SOURCE, SINK):
            assert found.setdefault(node.topics[0], node.serdes) == node.serdes
    return found


def _rekeyed_join(joined=None, left=False):
    """Clicks (String keys, Long values) re-keyed by value, joined with the users table."""
    b = StreamsBuilder()
    users = b.table("users", Consumed.with_(S, S))
    clicks = b.stream("clicks", Consumed.with_(S, L)).select_key(lambda k, v: f"u{v}")
    args = (users, lambda click, user: f"{click}:{user}") + ((joined,) if joined else ())
    (clicks.left_join if left else clicks.join)(*args).to("out")
    return b.build()


def test_builders_chain_serdes_and_name():
    assert Joined.with_(S, L, J) == Joined(key_serde=S, value_serde=L, other_value_serde=J)
    assert Joined.with_(S, None, None, "j") == Joined(key_serde=S, name="j")
    assert Joined.with_key_serde(S).with_name("j") == Joined(key_serde=S, name="j")
    assert Joined.as_("j").with_value_serde(L).with_other_value_serde(S) == Joined(
        value_serde=L, other_value_serde=S, name="j"
    )
    # with_ on an instance keeps the name, as Kafka's withKeySerde & co. do.
    assert Joined.as_("j").with_(S, L, None).name == "j"


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Joined.with_("String", L, S), "Joined key_serde must be a serde"),
        (lambda: Joined.with_value_serde(int), "Joined value_serde must be a serde"),
        (lambda: Joined.with_other_value_serde(3), "Joined other_value_serde must be a serde"),
        (lambda: Joined.as_("no spaces"), r"Joined\.as_: name 'no spaces' contains"),
        (lambda: Joined.with_name(""), r"Joined\.with_name needs a non-empty name"),
        (lambda: Joined.with_grace_period(5), "non-negative timedelta"),
        (lambda: Joined.with_grace_period(timedelta(seconds=-1)), "non-negative timedelta"),
    ],
)
def test_bad_arguments_fail_with_the_reason(make, message):
    with pytest.raises(TopologyException, match=message):
        make()


@pytest.mark.parametrize("left", [False, True], ids=["join", "left_join"])
def test_the_repartition_topic_takes_joineds_serdes(left):
    prefix = "KSTREAM-LEFTJOIN-" if left else "KSTREAM-JOIN-"
    topology = _rekeyed_join(Joined.with_(S, None, S), left)
    [(topic, serdes)] = _topics(topology).items()
    assert topic.startswith(prefix) and topic.endswith("-repartition")
    # Key: Joined's; value: not given, the stream's (Consumed's Long, kept by select_key).
    assert serdes == TopicSerdes(S, L)
    # The joined stream keeps Joined's key serde: to() takes it.
    [out] = [n for n in topology.nodes.values() if n.kind == SINK and not n.internal_topic]
    assert out.serdes == TopicSerdes(S, J)


def test_without_joined_the_key_serde_is_the_default_after_a_key_change():
    # select_key clears the known key serde (Kafka's KStreamImpl: keySerde null), so the
    # topic's key serde is the default: what made String-keyed tables miss keys on Kafka.
    [serdes] = _topics(_rekeyed_join()).values()
    assert serdes == TopicSerdes(J, L)
    [serdes] = _topics(_rekeyed_join(Joined.with_value_serde(S))).values()
    assert serdes == TopicSerdes(J, S)


def test_joineds_name_names_the_topic_its_sink_and_source_and_the_join():
    topology = _rekeyed_join(Joined.as_("enrich").with_key_serde(S))
    assert _topics(topology) == {"enrich-repartition": TopicSerdes(S, L)}
    assert topology.nodes["enrich-repartition-sink"].kind == SINK
    assert topology.nodes["enrich-repartition-source"].children == ["enrich"]
    assert topology.nodes["enrich"].kind == PROCESSOR
    assert topology.nodes["enrich"].stores  # the join reads the table's store
    [repartitioned] = [s for s in topology.subtopologies if s.repartition_sources]
    assert repartitioned.repartition_sources == ("enrich-repartition",)


def test_without_a_key_change_the_name_names_the_join_and_no_topic():
    b = StreamsBuilder()
    users = b.table("users", Consumed.with_(S, S))
    clicks = b.stream("clicks")
    clicks.join(users, lambda c, u: u, Joined.as_("enrich")).to("out")
    topology = b.build()
    assert _topics(topology) == {}
    assert topology.nodes["enrich"].parents == [clicks.node_name]


def test_records_go_through_the_typed_topic_to_the_join():
    topology = _rekeyed_join(Joined.with_(S, L, S), left=True)
    with TopologyTestDriver(topology, {"application.id": "app"}) as driver:
        driver.create_input_topic("users").pipe_input("u1", "Ann", timestamp=1)
        clicks = driver.create_input_topic("clicks")
        clicks.pipe_input("x", 1, timestamp=2)
        clicks.pipe_input("y", 2, timestamp=3)
        out = driver.create_output_topic("out").read_key_values_to_list()
        assert out == [("u1", "1:Ann"), ("u2", "2:None")]
        # The topic's Long value serde holds what it is given, and refuses what it cannot.
        with pytest.raises(SerializationException, match=r"Serdes\.Long\(\) cannot serialize"):
            clicks.pipe_input("z", "one", timestamp=4)


def test_a_key_its_key_serde_cannot_hold_fails_at_the_topic():
    b = StreamsBuilder()
    users = b.table("users")
    clicks = b.stream("clicks").select_key(lambda k, v: v)  # an int key
    clicks.join(users, lambda c, u: u, Joined.with_key_serde(S)).to("out")
    with TopologyTestDriver(b.build(), {"application.id": "app"}) as driver:
        with pytest.raises(SerializationException, match=r"Serdes\.String\(\) cannot serialize"):
            driver.create_input_topic("clicks").pipe_input("x", 7)


def test_a_grace_period_is_refused_at_build():
    b = StreamsBuilder()
    users = b.table("users")
    joined = Joined.with_grace_period(timedelta(seconds=1))
    with pytest.raises(TopologyException, match=r"Joined\.with_grace_period \(KIP-923"):
        b.stream("clicks").join(users, lambda c, u: u, joined)


def test_a_join_takes_only_a_joined_and_a_global_table_none():
    b = StreamsBuilder()
    users = b.table("users")
    clicks = b.stream("clicks")
    with pytest.raises(TopologyException, match="a join with a table takes a Joined, got 'j'"):
        clicks.join(users, lambda c, u: u, "j")
    with pytest.raises(TopologyException, match=r"takes \(table, joiner\[, Joined\]\)"):
        clicks.left_join(users, lambda c, u: u, Joined(), None)
    # Kafka's join with a GlobalKTable takes a Named, never a Joined.
    countries = b.global_table("countries")
    with pytest.raises(TopologyException, match="global_table, key_selector, joiner"):
        clicks.join(countries, lambda k, v: v, lambda c, u: u, Joined())


@pytest.mark.parametrize("left", [False, True], ids=["join", "left_join"])
def test_a_left_joins_topic_carries_null_keys_to_the_join(left):
    """KIP-962, as Kafka 4.4: a null key made by the key change goes through a left join's
    repartition topic and is joined with None; an inner join's topic drops it."""
    b = StreamsBuilder()
    users = b.table("users", Consumed.with_(S, S))
    clicks = b.stream("clicks", Consumed.with_(S, S)).select_key(lambda k, v: v or None)
    (clicks.left_join if left else clicks.join)(
        users, lambda c, u: f"{c}:{u}", Joined.with_key_serde(S)
    ).to("out")
    with TopologyTestDriver(b.build(), {"application.id": "app"}) as driver:
        driver.create_input_topic("users").pipe_input("u1", "Ann", timestamp=1)
        clicks_in = driver.create_input_topic("clicks")
        clicks_in.pipe_input("x", "", timestamp=2)  # re-keyed to None
        clicks_in.pipe_input("y", "u1", timestamp=3)
        out = driver.create_output_topic("out").read_key_values_to_list()
    assert out == ([(None, ":None")] if left else []) + [("u1", "u1:Ann")]
