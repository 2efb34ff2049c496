"""KTables through the TopologyTestDriver: sources, filters, map_values, to_table, and
table aggregations that move rows between groups (KIP-904, Kafka 3.5+).

Table re-grouping semantics: an update whose old and new value select the same group
travels as one change (subtract and add in one step, one output); an update that moves a
row to another group is sent as two changes, the old group's subtraction first, then the
new group's addition. A delete subtracts.
"""

from __future__ import annotations

import pytest
from lakestate import Materialized, StreamsBuilder
from lakestate.testing.driver import TestRecord, TopologyTestDriver

BACKENDS = [{}, {"lakestate.state.backend": "rocksdb"}]
BACKEND_IDS = ["memory", "rocksdb"]


@pytest.fixture(params=BACKENDS, ids=BACKEND_IDS)
def config(request):
    return dict(request.param)


def _pipe(driver, records, topic):
    source = driver.create_input_topic(topic)
    for key, value, ts in records:
        source.pipe_input(key, value, timestamp=ts)


def _table_topology(then=None):
    b = StreamsBuilder()
    table = b.table("users", Materialized.as_("users-store"))
    (then or (lambda t: t))(table).to_stream().to("out")
    return b.build()


# -- table() source -----------------------------------------------------------------------


def test_table_keeps_the_latest_value_per_key_and_emits_every_update(config):
    with TopologyTestDriver(_table_topology(), config) as driver:
        _pipe(driver, [("u1", "eu", 1), ("u2", "us", 2), ("u1", "apac", 3)], "users")
        assert driver.create_output_topic("out").read_records_to_list() == [
            TestRecord("u1", "eu", 1),
            TestRecord("u2", "us", 2),
            TestRecord("u1", "apac", 3),
        ]
        store = driver.get_key_value_store("users-store")
        assert dict(store.all()) == {"u1": "apac", "u2": "us"}
        assert store.get_with_timestamp("u1") == ("apac", 3)


def test_table_tombstone_deletes_and_is_forwarded_as_a_null_value(config):
    with TopologyTestDriver(_table_topology(), config) as driver:
        _pipe(driver, [("u1", "eu", 1), ("u2", "us", 2), ("u1", None, 3)], "users")
        assert driver.create_output_topic("out").read_records_to_list() == [
            TestRecord("u1", "eu", 1),
            TestRecord("u2", "us", 2),
            TestRecord("u1", None, 3),
        ]
        store = driver.get_key_value_store("users-store")
        assert store.get("u1") is None
        assert dict(store.all()) == {"u2": "us"}
        # Re-inserting after a delete works.
        _pipe(driver, [("u1", "eu", 4)], "users")
        assert store.get("u1") == "eu"


def test_table_drops_null_keys_and_counts_them():
    with TopologyTestDriver(_table_topology()) as driver:
        _pipe(driver, [(None, "eu", 1), ("u1", "us", 2)], "users")
        assert driver.create_output_topic("out").read_key_values_to_list() == [("u1", "us")]
        assert driver.metrics()["dropped-records"] == 1
        assert dict(driver.get_key_value_store("users-store").all()) == {"u1": "us"}


def test_unnamed_table_store_is_materialized_under_its_generated_name():
    b = StreamsBuilder()
    b.table("users")
    topology = b.build()
    (store_name,) = topology.stores
    with TopologyTestDriver(topology) as driver:
        _pipe(driver, [("u1", "eu", 1)], "users")
        assert driver.get_key_value_store(store_name).get("u1") == "eu"


# -- filter / filter_not / map_values -------------------------------------------------------


def test_filter_turns_a_filtered_out_update_into_a_tombstone(config):
    topology = _table_topology(lambda t: t.filter(lambda k, v: v["age"] >= 18))
    with TopologyTestDriver(topology, config) as driver:
        _pipe(
            driver,
            [
                ("ann", {"age": 20}, 1),  # passes
                ("bob", {"age": 10}, 2),  # never passed: nothing downstream
                ("ann", {"age": 21}, 3),  # passes again: an update
                ("ann", {"age": 17}, 4),  # filtered out: a delete downstream
                ("bob", None, 5),  # tombstone for a key that never passed: not forwarded
                ("ann", None, 6),  # already filtered out: nothing to delete
                ("cid", {"age": 30}, 7),
                ("cid", None, 8),  # delete of a passing row
            ],
            "users",
        )
        assert driver.create_output_topic("out").read_records_to_list() == [
            TestRecord("ann", {"age": 20}, 1),
            TestRecord("ann", {"age": 21}, 3),
            TestRecord("ann", None, 4),
            TestRecord("cid", {"age": 30}, 7),
            TestRecord("cid", None, 8),
        ]


def test_filter_not_is_the_complement(config):
    topology = _table_topology(lambda t: t.filter_not(lambda k, v: v == "blocked"))
    with TopologyTestDriver(topology, config) as driver:
        _pipe(
            driver,
            [("u1", "ok", 1), ("u2", "blocked", 2), ("u1", "blocked", 3), ("u2", "ok", 4)],
            "users",
        )
        assert driver.create_output_topic("out").read_key_values_to_list() == [
            ("u1", "ok"),
            ("u1", None),
            ("u2", "ok"),
        ]


def test_materialized_filter_store_holds_only_passing_rows(config):
    b = StreamsBuilder()
    b.table("users").filter(lambda k, v: v > 0, materialized=Materialized.as_("positive"))
    with TopologyTestDriver(b.build(), config) as driver:
        _pipe(driver, [("a", 1, 1), ("b", -1, 2), ("c", 2, 3), ("a", -5, 4)], "users")
        assert dict(driver.get_key_value_store("positive").all()) == {"c": 2}


def test_map_values_maps_updates_and_keeps_deletes(config):
    calls = []

    def mapper(value):
        calls.append(value)
        return value.upper()

    topology = _table_topology(lambda t: t.map_values(mapper, Materialized.as_("upper")))
    with TopologyTestDriver(topology, config) as driver:
        _pipe(driver, [("u1", "eu", 1), ("u1", "us", 2), ("u1", None, 3), ("u2", None, 4)], "users")
        assert driver.create_output_topic("out").read_records_to_list() == [
            TestRecord("u1", "EU", 1),
            TestRecord("u1", "US", 2),
            TestRecord("u1", None, 3),
            TestRecord("u2", None, 4),  # a delete of a key never held, as Kafka forwards it
        ]
        assert None not in calls  # the mapper never sees a delete
        assert dict(driver.get_key_value_store("upper").all()) == {}
        _pipe(driver, [("u3", "x", 5)], "users")
        assert dict(driver.get_key_value_store("upper").all()) == {"u3": "X"}


def test_filter_then_map_values_chain():
    topology = _table_topology(
        lambda t: t.filter(lambda k, v: v % 2 == 0).map_values(lambda v: v * 10)
    )
    with TopologyTestDriver(topology) as driver:
        _pipe(driver, [("a", 2, 1), ("a", 3, 2), ("b", 5, 3), ("b", 4, 4)], "users")
        assert driver.create_output_topic("out").read_key_values_to_list() == [
            ("a", 20),
            ("a", None),
            ("b", 40),
        ]


# -- to_table ----------------------------------------------------------------------------


def test_stream_to_table(config):
    b = StreamsBuilder()
    b.stream("in").to_table(Materialized.as_("latest")).to_stream().to("out")
    with TopologyTestDriver(b.build(), config) as driver:
        _pipe(
            driver,
            [("a", 1, 1), ("b", 2, 2), ("a", 3, 3), (None, 9, 4), ("b", None, 5), ("z", None, 6)],
            "in",
        )
        assert driver.create_output_topic("out").read_records_to_list() == [
            TestRecord("a", 1, 1),
            TestRecord("b", 2, 2),
            TestRecord("a", 3, 3),
            TestRecord("b", None, 5),
            TestRecord("z", None, 6),  # a delete of a key never held, as Kafka forwards it
        ]
        assert dict(driver.get_key_value_store("latest").all()) == {"a": 3}
        assert driver.metrics()["dropped-records"] == 1


def test_select_key_then_to_table_repartitions(config):
    b = StreamsBuilder()
    b.stream("in").select_key(lambda k, v: v["id"]).to_table(Materialized.as_("by-id"))
    with TopologyTestDriver(b.build(), config) as driver:
        _pipe(driver, [("x", {"id": 1, "n": "a"}, 1), ("y", {"id": 1, "n": "b"}, 2)], "in")
        assert dict(driver.get_key_value_store("by-id").all()) == {1: {"id": 1, "n": "b"}}


# -- table aggregations: rows moving between groups ------------------------------------------

# Users keyed by id, value = region and name; counts per region as users move and leave.
USER_UPDATES = [
    ("u1", {"region": "eu", "name": "Ann"}, 1),
    ("u2", {"region": "eu", "name": "Bob"}, 2),
    ("u3", {"region": "us", "name": "Cid"}, 3),
    ("u1", {"region": "us", "name": "Ann"}, 4),  # u1 moves eu -> us
    ("u1", {"region": "us", "name": "Annie"}, 5),  # same region: one combined update
    ("u2", None, 6),  # u2 deleted: eu loses a member
    ("u9", None, 7),  # delete of a user that never existed: nothing
    ("u3", {"region": "apac", "name": "Cid"}, 8),  # u3 moves us -> apac
    ("u2", {"region": "eu", "name": "Bob"}, 9),  # u2 comes back
]


def _region_topology(aggregation):
    b = StreamsBuilder()
    users = b.table("users", Materialized.as_("users-store"))
    aggregation(users.group_by(lambda user, v: (v["region"], v))).to_stream().to("out")
    return b.build()


def test_table_count_per_region_as_users_move_and_are_deleted(config):
    topology = _region_topology(lambda g: g.count(Materialized.as_("per-region")))
    with TopologyTestDriver(topology, config) as driver:
        out = driver.create_output_topic("out")
        _pipe(driver, USER_UPDATES, "users")
        assert out.read_records_to_list() == [
            TestRecord("eu", 1, 1),
            TestRecord("eu", 2, 2),
            TestRecord("us", 1, 3),
            # Move: subtract from the old group first, then add to the new one.
            TestRecord("eu", 1, 4),
            TestRecord("us", 2, 4),
            # Same group: old and new travel together, one update, count unchanged.
            TestRecord("us", 2, 5),
            # Delete subtracts.
            TestRecord("eu", 0, 6),
            TestRecord("us", 1, 8),
            TestRecord("apac", 1, 8),
            TestRecord("eu", 1, 9),
        ]
        store = driver.get_key_value_store("per-region")
        assert dict(store.all()) == {"apac": 1, "eu": 1, "us": 1}


def test_table_count_keeps_a_zero_count_and_outputs_one_update_per_record(config):
    topology = _region_topology(lambda g: g.count(Materialized.as_("per-region")))
    with TopologyTestDriver(topology, config) as driver:
        out = driver.create_output_topic("out")
        _pipe(driver, [("u1", {"region": "eu", "name": "A"}, 1)], "users")
        assert out.read_key_values_to_list() == [("eu", 1)]
        _pipe(driver, [("u1", None, 2)], "users")
        assert out.read_records_to_list() == [TestRecord("eu", 0, 2)]
        assert driver.get_key_value_store("per-region").get("eu") == 0
        assert dict(driver.get_key_value_store("users-store").all()) == {}


def test_table_aggregate_with_adder_and_subtractor(config):
    calls = []

    def adder(region, user, names):
        calls.append(("add", region, user["name"]))
        return sorted(names + [user["name"]])

    def subtractor(region, user, names):
        calls.append(("sub", region, user["name"]))
        return [n for n in names if n != user["name"]]

    topology = _region_topology(
        lambda g: g.aggregate(list, adder, subtractor, Materialized.as_("names"))
    )
    with TopologyTestDriver(topology, config) as driver:
        _pipe(driver, USER_UPDATES, "users")
        assert driver.create_output_topic("out").read_key_values_to_list() == [
            ("eu", ["Ann"]),
            ("eu", ["Ann", "Bob"]),
            ("us", ["Cid"]),
            ("eu", ["Bob"]),
            ("us", ["Ann", "Cid"]),
            ("us", ["Annie", "Cid"]),
            ("eu", []),
            ("us", ["Annie"]),
            ("apac", ["Cid"]),
            ("eu", ["Bob"]),
        ]
        assert calls == [
            ("add", "eu", "Ann"),
            ("add", "eu", "Bob"),
            ("add", "us", "Cid"),
            ("sub", "eu", "Ann"),
            ("add", "us", "Ann"),
            ("sub", "us", "Ann"),  # same group: subtract the old value, then add the new
            ("add", "us", "Annie"),
            ("sub", "eu", "Bob"),
            ("sub", "us", "Cid"),
            ("add", "apac", "Cid"),
            ("add", "eu", "Bob"),
        ]
        assert dict(driver.get_key_value_store("names").all()) == {
            "apac": ["Cid"],
            "eu": ["Bob"],
            "us": ["Annie"],
        }


def test_table_reduce_with_adder_and_subtractor(config):
    # Total age per region; the selector picks the age out of the row.
    b = StreamsBuilder()
    b.table("people").group_by(lambda k, v: (v["region"], v["age"])).reduce(
        lambda total, age: total + age,
        lambda total, age: total - age,
        Materialized.as_("age-sums"),
    ).to_stream().to("out")
    with TopologyTestDriver(b.build(), config) as driver:
        _pipe(
            driver,
            [
                ("p1", {"region": "eu", "age": 30}, 1),
                ("p2", {"region": "eu", "age": 40}, 2),
                ("p1", {"region": "eu", "age": 31}, 3),  # same group: 70 -> 71 in one update
                ("p2", {"region": "us", "age": 40}, 4),  # move: eu 31, then us 40
                ("p1", None, 5),  # delete: eu 0
            ],
            "people",
        )
        assert driver.create_output_topic("out").read_records_to_list() == [
            TestRecord("eu", 30, 1),
            TestRecord("eu", 70, 2),
            TestRecord("eu", 71, 3),
            TestRecord("eu", 31, 4),
            TestRecord("us", 40, 4),
            TestRecord("eu", 0, 5),
        ]
        assert dict(driver.get_key_value_store("age-sums").all()) == {"eu": 0, "us": 40}


def test_table_reduce_first_value_is_the_aggregate():
    calls = []
    b = StreamsBuilder()
    b.table("t").group_by(lambda k, v: ("all", v)).reduce(
        lambda a, v: calls.append(("add", a, v)) or a + v,
        lambda a, v: calls.append(("sub", a, v)) or a - v,
        Materialized.as_("total"),
    )
    with TopologyTestDriver(b.build()) as driver:
        _pipe(driver, [("a", 5, 1), ("b", 7, 2)], "t")
        assert calls == [("add", 5, 7)]
        assert driver.get_key_value_store("total").get("all") == 12


def test_table_aggregation_output_timestamp_is_max_of_record_and_aggregate():
    topology = _region_topology(lambda g: g.count(Materialized.as_("per-region")))
    with TopologyTestDriver(topology) as driver:
        _pipe(
            driver,
            [
                ("u1", {"region": "eu", "name": "A"}, 100),
                ("u2", {"region": "eu", "name": "B"}, 50),  # older than the aggregate
                ("u1", {"region": "us", "name": "A"}, 70),  # move with an older timestamp
            ],
            "users",
        )
        assert driver.create_output_topic("out").read_records_to_list() == [
            TestRecord("eu", 1, 100),
            TestRecord("eu", 2, 100),
            TestRecord("eu", 1, 100),
            TestRecord("us", 1, 70),
        ]


def test_table_group_by_selector_may_change_the_value():
    b = StreamsBuilder()
    b.table("orders").group_by(lambda k, v: (v["customer"], v["amount"])).aggregate(
        lambda: 0,
        lambda c, amount, total: total + amount,
        lambda c, amount, total: total - amount,
        Materialized.as_("totals"),
    )
    with TopologyTestDriver(b.build()) as driver:
        _pipe(
            driver,
            [
                ("o1", {"customer": "ann", "amount": 10}, 1),
                ("o2", {"customer": "ann", "amount": 5}, 2),
                ("o1", {"customer": "ann", "amount": 12}, 3),  # order corrected
                ("o2", {"customer": "bob", "amount": 5}, 4),  # order reassigned
            ],
            "orders",
        )
        assert dict(driver.get_key_value_store("totals").all()) == {"ann": 12, "bob": 5}


def test_table_group_by_after_filter_sees_filtered_rows_as_deletes():
    b = StreamsBuilder()
    b.table("users").filter(lambda k, v: v["active"]).group_by(lambda k, v: (v["region"], v)).count(
        Materialized.as_("active-per-region")
    ).to_stream().to("out")
    with TopologyTestDriver(b.build()) as driver:
        _pipe(
            driver,
            [
                ("u1", {"region": "eu", "active": True}, 1),
                ("u2", {"region": "eu", "active": False}, 2),  # never counted
                ("u1", {"region": "eu", "active": False}, 3),  # deactivated: subtract
            ],
            "users",
        )
        assert driver.create_output_topic("out").read_key_values_to_list() == [
            ("eu", 1),
            ("eu", 0),
        ]
