"""KIP-655 deduplication through the TopologyTestDriver: every example of the seed's
"Semantics" section (seeds/001, KIP-655), for each of the three operators, plus null
handling, purging, late records, the repartition of ``deduplicate`` and metrics.

Each seed example is a list of events ``(dedup key, timestamp in s, forwarded?)``. The
dedup key becomes, per operator: the record key (``deduplicate_by_key``); the id of a record
whose key is fixed (``deduplicate_by_key_value``); the id of records with distinct keys
(``deduplicate``, which must still drop them: it repartitions by id).
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from lakestate import Deduplicated, StreamsBuilder
from lakestate.processors.dedup import (
    DUPLICATES_DROPPED,
    LATE_RECORDS_FORWARDED,
    RECORDS_FORWARDED,
    STORE_SIZE,
)
from lakestate.state.dedup import DedupEntry
from lakestate.testing.driver import TestRecord, TopologyTestDriver

TEN_S = timedelta(seconds=10)
STORE = "seen"
OPERATORS = ["by_key", "by_key_value", "deduplicate"]


def _id(k, v):
    return v["id"]


def _dedup(stream, operator, interval, deduplicated=None):
    deduplicated = deduplicated or Deduplicated.as_(STORE)
    if operator == "by_key":
        return stream.deduplicate_by_key(interval, deduplicated)
    if operator == "by_key_value":
        return stream.deduplicate_by_key_value(_id, interval, deduplicated)
    return stream.deduplicate(_id, interval, deduplicated)


def _record(operator, dedup_key, n):
    """The (key, value) of the n-th event, whose deduplication key is ``dedup_key``."""
    if operator == "by_key":
        return dedup_key, {"n": n}
    if operator == "by_key_value":
        return "same-key", {"id": dedup_key, "n": n}
    return f"key-{n}", {"id": dedup_key, "n": n}


def _store_id(operator, dedup_key):
    return ("same-key", dedup_key) if operator == "by_key_value" else dedup_key


def _driver(operator, interval=TEN_S, config=None):
    b = StreamsBuilder()
    _dedup(b.stream("in"), operator, interval).to("out")
    return TopologyTestDriver(b.build(), config or {})


def _check(operator, events, interval=TEN_S):
    """Pipe the events one by one, checking after each whether it was forwarded."""
    with _driver(operator, interval) as driver:
        source = driver.create_input_topic("in")
        out = driver.create_output_topic("out")
        for n, (dedup_key, seconds, forwarded) in enumerate(events):
            key, value = _record(operator, dedup_key, n)
            source.pipe_input(key, value, timestamp=seconds * 1000)
            expected = [TestRecord(key, value, seconds * 1000)] if forwarded else []
            assert out.read_records_to_list() == expected, (n, dedup_key, seconds)
        return {k: e.ts // 1000 for k, e in driver.get_state_store(STORE).all()}


# -- seed, "Semantics" → "Duplicate sequence" ----------------------------------------------

T = 100  # "t", in seconds


@pytest.mark.parametrize("operator", OPERATORS)
def test_seed_duplicate_sequence(operator):
    # a1 at t → forwarded and saved; a2 at t+8s → not forwarded, store not updated;
    # a3 at t+11s → forwarded "as if there was never an event a2".
    with _driver(operator) as driver:
        source = driver.create_input_topic("in")
        out = driver.create_output_topic("out")
        store = driver.get_state_store(STORE)
        sid = _store_id(operator, "a")
        source.pipe_input(*_record(operator, "a", 1), timestamp=T * 1000)
        assert out.get_queue_size() == 1
        assert store.get(sid).ts == T * 1000
        source.pipe_input(*_record(operator, "a", 2), timestamp=(T + 8) * 1000)
        assert out.get_queue_size() == 1
        assert store.get(sid).ts == T * 1000  # "we don't update the store"
        source.pipe_input(*_record(operator, "a", 3), timestamp=(T + 11) * 1000)
        assert [r.value["n"] for r in out.read_records_to_list()] == [1, 3]
        assert store.get(sid).ts == (T + 11) * 1000


@pytest.mark.parametrize("operator", OPERATORS)
def test_seed_duplicate_sequence_out_of_order(operator):
    # a1 at t → forwarded; a2 at t-8s → not forwarded; a3 at t-11s → forwarded (late).
    held = _check(operator, [("a", T, True), ("a", T - 8, False), ("a", T - 11, True)])
    assert held == {_store_id(operator, "a"): T}  # neither a2 nor the late a3 is stored


# -- seed, "Semantics" → "Deduplication interval boundaries" -------------------------------


@pytest.mark.parametrize("operator", OPERATORS)
def test_seed_interval_ends_are_inclusive(operator):
    # a1 @5s → forwarded; a2 @15s → dropped; a3 @16s → forwarded.
    held = _check(operator, [("a", 5, True), ("a", 15, False), ("a", 16, True)])
    assert held == {_store_id(operator, "a"): 16}


@pytest.mark.parametrize("operator", OPERATORS)
def test_seed_interval_ends_are_inclusive_out_of_order(operator):
    # a1 @15s → forwarded; a2 @5s → dropped; a3 @4s → forwarded.
    held = _check(operator, [("a", 15, True), ("a", 5, False), ("a", 4, True)])
    assert held == {_store_id(operator, "a"): 15}


@pytest.mark.parametrize("operator", OPERATORS)
def test_seed_zero_interval(operator):
    # deduplicationInterval = 0: a1 @5s → forwarded; a2 @5s → dropped; a3 @6s → forwarded.
    events = [("a", 5, True), ("a", 5, False), ("a", 6, True)]
    held = _check(operator, events, interval=timedelta(0))
    assert held == {_store_id(operator, "a"): 6}


# -- seed, "Semantics" → "Late events by more than deduplicationInterval" ------------------


@pytest.mark.parametrize("operator", OPERATORS)
def test_seed_late_events_example_1(operator):
    # k @20s → forwarded; k @25s → dropped; k @11s → dropped (late, but its duplicate
    # @20s is still in the store); k @9s → forwarded (late, no duplicate within interval).
    events = [("k", 20, True), ("k", 25, False), ("k", 11, False), ("k", 9, True)]
    assert _check(operator, events) == {_store_id(operator, "k"): 20}


@pytest.mark.parametrize("operator", OPERATORS)
def test_seed_late_events_example_2(operator):
    # k1 @10s → forwarded; k2 @20s → forwarded; k1 @9s → dropped (late, but its duplicate
    # @10s still exists in the store).
    events = [("k1", 10, True), ("k2", 20, True), ("k1", 9, False)]
    held = _check(operator, events)
    assert held == {_store_id(operator, "k1"): 10, _store_id(operator, "k2"): 20}


@pytest.mark.parametrize("operator", OPERATORS)
def test_seed_late_events_example_3(operator):
    # k1 @10s → forwarded; k2 @21s → forwarded, and k1 @10s is now purged from the store;
    # k1 @9s → forwarded (late event with no duplicate in the store).
    with _driver(operator) as driver:
        source = driver.create_input_topic("in")
        out = driver.create_output_topic("out")
        store = driver.get_state_store(STORE)
        source.pipe_input(*_record(operator, "k1", 0), timestamp=10_000)
        source.pipe_input(*_record(operator, "k2", 1), timestamp=21_000)
        assert store.get(_store_id(operator, "k1")) is None  # purged
        assert [k for k, _ in store.all()] == [_store_id(operator, "k2")]
        source.pipe_input(*_record(operator, "k1", 2), timestamp=9_000)
        assert [r.value["n"] for r in out.read_records_to_list()] == [0, 1, 2]
        assert store.get(_store_id(operator, "k1")) is None  # late: forwarded, not stored
        metrics = driver.metrics()
        assert metrics[RECORDS_FORWARDED] == 3
        assert metrics[LATE_RECORDS_FORWARDED] == 1
        assert metrics[STORE_SIZE] == 1


# -- null handling (seed, "Semantics" → "Null deduplication key") --------------------------


def _run(build, records):
    b = StreamsBuilder()
    build(b.stream("in")).to("out")
    with TopologyTestDriver(b.build()) as driver:
        source = driver.create_input_topic("in")
        for key, value, ts in records:
            source.pipe_input(key, value, timestamp=ts)
        return driver.create_output_topic("out").read_records_to_list(), driver.metrics()


def test_by_key_forwards_every_null_key_record_and_stores_nothing():
    records = [(None, 1, 0), (None, 1, 0), ("a", 1, 0), ("a", 2, 1), (None, 3, 2)]
    out, metrics = _run(lambda s: s.deduplicate_by_key(TEN_S), records)
    assert out == [TestRecord(None, 1, 0), TestRecord(None, 1, 0), TestRecord("a", 1, 0),
                   TestRecord(None, 3, 2)]  # fmt: skip
    assert metrics[STORE_SIZE] == 1
    assert metrics[DUPLICATES_DROPPED] == 1


def test_by_key_value_forwards_null_keys_and_null_ids():
    records = [
        (None, {"id": 1}, 0),
        (None, {"id": 1}, 0),  # null key: forwarded, whatever the id
        ("a", {"id": None}, 0),
        ("a", {"id": None}, 0),  # null id: forwarded, "not only the key" is used
        ("a", {"id": 1}, 0),
        ("b", {"id": 1}, 0),  # same id, other key: not a duplicate
        ("a", {"id": 1}, 5),  # same (key, id): dropped
    ]
    out, metrics = _run(lambda s: s.deduplicate_by_key_value(_id, TEN_S), records)
    assert [(r.key, r.value) for r in out] == [(k, v) for k, v, _ in records[:6]]
    assert metrics[STORE_SIZE] == 2
    assert metrics[DUPLICATES_DROPPED] == 1


def test_deduplicate_forwards_null_ids_with_their_key_and_value():
    records = [
        (None, {"id": None}, 0),
        (None, {"id": None}, 0),
        ("a", {"id": None}, 1),
        ("a", {"id": None}, 1),
        (None, {"id": 7}, 2),
        ("b", {"id": 7}, 3),  # same id as the null-key record: dropped
    ]
    out, metrics = _run(lambda s: s.deduplicate(_id, TEN_S), records)
    assert out == [TestRecord(k, v, ts) for k, v, ts in records[:5]]
    assert metrics[STORE_SIZE] == 1
    assert metrics[RECORDS_FORWARDED] == 5


# -- deduplicate repartitions by id and keeps the original record ------------------------


def test_deduplicate_drops_same_id_under_different_keys_and_keeps_original_key():
    b = StreamsBuilder()
    b.stream("in").deduplicate(_id, TEN_S, Deduplicated.as_("orders-seen")).to("out")
    topology = b.build()
    assert len(topology.subtopologies) == 2
    assert topology.subtopologies[1].repartition_sources == ("orders-seen-repartition",)
    assert topology.subtopologies[1].stores == ("orders-seen",)
    with TopologyTestDriver(topology) as driver:
        source = driver.create_input_topic("in")
        source.pipe_input(
            "customer-1", {"id": "o-1", "amount": 5}, timestamp=1_000, headers={"h": 1}
        )
        source.pipe_input("customer-2", {"id": "o-1", "amount": 5}, timestamp=2_000)
        out = driver.create_output_topic("out").read_records_to_list()
        assert out == [TestRecord("customer-1", {"id": "o-1", "amount": 5}, 1_000, {"h": 1})]
        entry = driver.get_state_store("orders-seen").get("o-1")
        assert entry.ts == 1_000 and entry.offset == 0


def test_deduplicate_output_is_repartitioned_before_a_keyed_aggregation():
    b = StreamsBuilder()
    counts = b.stream("in").deduplicate(_id, TEN_S).group_by_key().count()
    counts.to_stream().to("out")
    topology = b.build()
    assert len(topology.subtopologies) == 3  # dedup by id, then the count by original key
    with TopologyTestDriver(topology) as driver:
        source = driver.create_input_topic("in")
        for key, i in [("a", 1), ("a", 2), ("b", 1), ("a", 1)]:
            source.pipe_input(key, {"id": i}, timestamp=0)
        out = driver.create_output_topic("out").read_key_values_to_list()
        assert out == [("a", 1), ("a", 2)]


@pytest.mark.parametrize("operator", ["by_key", "by_key_value"])
def test_by_key_operators_repartition_after_a_key_change(operator):
    b = StreamsBuilder()
    stream = b.stream("in").select_key(lambda k, v: v["user"])
    _dedup(stream, operator, TEN_S).to("out")
    topology = b.build()
    assert [s.repartition_sources for s in topology.subtopologies] == [(), ("seen-repartition",)]
    with TopologyTestDriver(topology) as driver:
        source = driver.create_input_topic("in")
        source.pipe_input("x", {"user": "u", "id": 1}, timestamp=0)
        source.pipe_input("y", {"user": "u", "id": 1}, timestamp=1)
        assert driver.create_output_topic("out").read_key_values_to_list() == [
            ("u", {"user": "u", "id": 1})
        ]


@pytest.mark.parametrize("operator", ["by_key", "by_key_value"])
def test_by_key_operators_do_not_repartition_without_a_key_change(operator):
    b = StreamsBuilder()
    _dedup(b.stream("in").filter(lambda k, v: True), operator, TEN_S).to("out")
    assert len(b.build().subtopologies) == 1


# -- purge, late records, first record wins -----------------------------------------------


@pytest.mark.parametrize("operator", OPERATORS)
def test_entries_older_than_stream_time_minus_interval_are_purged(operator):
    with _driver(operator) as driver:
        source = driver.create_input_topic("in")
        store = driver.get_state_store(STORE)
        for n, (dk, s) in enumerate([("a", 0), ("b", 3), ("c", 6), ("d", 9)]):
            source.pipe_input(*_record(operator, dk, n), timestamp=s * 1000)
        assert store.size() == 4
        # Stream time 14s: entries with ts < 4s go (a @0s, b @3s); c @6s and d @9s stay.
        source.pipe_input(*_record(operator, "e", 9), timestamp=14_000)
        assert sorted(k for k, _ in store.all()) == [_store_id(operator, k) for k in "cde"]
        assert [ts for ts, _ in store.by_time()] == [6_000, 9_000, 14_000]
        assert driver.metrics()[STORE_SIZE] == store.size() == 3
        # Exactly at the boundary (ts == stream time - interval) an entry stays.
        source.pipe_input(*_record(operator, "e", 10), timestamp=16_000)  # duplicate of e
        assert sorted(k for k, _ in store.all()) == [_store_id(operator, k) for k in "cde"]
        source.pipe_input(*_record(operator, "f", 11), timestamp=16_001)
        assert sorted(k for k, _ in store.all()) == [_store_id(operator, k) for k in "def"]


@pytest.mark.parametrize("operator", OPERATORS)
def test_late_record_without_duplicate_is_forwarded_not_stored_and_counted(operator):
    with _driver(operator) as driver:
        source = driver.create_input_topic("in")
        source.pipe_input(*_record(operator, "a", 0), timestamp=100_000)
        source.pipe_input(*_record(operator, "b", 1), timestamp=5_000)  # late by 85s
        source.pipe_input(*_record(operator, "b", 2), timestamp=5_000)  # not detected
        out = driver.create_output_topic("out").read_records_to_list()
        assert [r.value["n"] for r in out] == [0, 1, 2]
        assert driver.get_state_store(STORE).get(_store_id(operator, "b")) is None
        metrics = driver.metrics()
        assert metrics[LATE_RECORDS_FORWARDED] == 2
        assert metrics[RECORDS_FORWARDED] == 3
        assert metrics.get(DUPLICATES_DROPPED, 0) == 0
        assert metrics[STORE_SIZE] == 1


@pytest.mark.parametrize("operator", OPERATORS)
def test_first_record_wins_and_keeps_its_offset(operator):
    with _driver(operator) as driver:
        source = driver.create_input_topic("in")
        for n in range(3):
            source.pipe_input(*_record(operator, "a", n), timestamp=1_000 + n)
        out = driver.create_output_topic("out").read_records_to_list()
        assert [r.value["n"] for r in out] == [0]
        entry = driver.get_state_store(STORE).get(_store_id(operator, "a"))
        assert (entry.ts, entry.offset) == (1_000, 0)
        assert isinstance(entry, DedupEntry)
        assert driver.metrics()[DUPLICATES_DROPPED] == 2


def test_ids_of_any_key_type_are_deduplicated():
    ids = [1, 1.5, "1", True, ("t", 1), {"a": [1]}, [1, 2]]
    records = [("k", {"id": i}, 0) for i in ids] * 2
    out, metrics = _run(lambda s: s.deduplicate_by_key_value(_id, TEN_S), records)
    assert [r.value["id"] for r in out] == ids
    assert metrics[STORE_SIZE] == len(ids)


def test_two_deduplications_in_one_task_sum_their_metrics():
    b = StreamsBuilder()
    s = b.stream("in")
    s.deduplicate_by_key(TEN_S, Deduplicated.as_("one")).to("out1")
    s.deduplicate_by_key(timedelta(seconds=1), Deduplicated.as_("two")).to("out2")
    with TopologyTestDriver(b.build()) as driver:
        source = driver.create_input_topic("in")
        for key, ts in [("a", 0), ("b", 0), ("a", 5_000), ("c", 20_000)]:
            source.pipe_input(key, 1, timestamp=ts)
        assert driver.create_output_topic("out1").read_key_values_to_list() == [
            ("a", 1), ("b", 1), ("c", 1)]  # fmt: skip
        assert driver.create_output_topic("out2").read_key_values_to_list() == [
            ("a", 1), ("b", 1), ("a", 1), ("c", 1)]  # fmt: skip
        one, two = driver.get_state_store("one"), driver.get_state_store("two")
        assert (one.size(), two.size()) == (1, 1)
        assert driver.metrics()[STORE_SIZE] == 2
        assert driver.metrics()[RECORDS_FORWARDED] == 7
        assert driver.metrics()[DUPLICATES_DROPPED] == 1


def test_metrics_survive_a_failed_record():
    b = StreamsBuilder()
    b.stream("in").deduplicate_by_key(TEN_S).map_values(lambda v: 1 // v).to("out")
    with TopologyTestDriver(b.build()) as driver:
        source = driver.create_input_topic("in")
        source.pipe_input("a", 1, timestamp=0)
        with pytest.raises(Exception, match="division"):
            source.pipe_input("b", 0, timestamp=1)
        source.pipe_input("b", 1, timestamp=2)  # the failed record left no state behind
        assert driver.create_output_topic("out").read_key_values_to_list() == [("a", 1), ("b", 1)]
        assert driver.metrics()[STORE_SIZE] == 2
        assert driver.metrics()[RECORDS_FORWARDED] == 2


def test_purge_of_a_failed_record_is_redone_by_the_next_one():
    # The failed record's purge is rolled back with it; the next record at the same stream
    # time must purge again (the store's purge memo is per transaction).
    b = StreamsBuilder()
    b.stream("in").deduplicate_by_key(TEN_S, Deduplicated.as_(STORE)).map_values(
        lambda v: 1 // v
    ).to("out")
    with TopologyTestDriver(b.build()) as driver:
        source = driver.create_input_topic("in")
        source.pipe_input("a", 1, timestamp=0)
        with pytest.raises(Exception, match="division"):
            source.pipe_input("b", 0, timestamp=20_000)
        assert driver.get_state_store(STORE).get("a") is not None  # purge rolled back
        source.pipe_input("c", 1, timestamp=20_000)
        assert driver.get_state_store(STORE).get("a") is None
        source.pipe_input("a", 1, timestamp=5_000)  # late, and no duplicate left: forwarded
        out = driver.create_output_topic("out").read_key_values_to_list()
        assert out == [("a", 1), ("c", 1), ("a", 1)]
        assert driver.metrics()[STORE_SIZE] == 1


@pytest.mark.parametrize("operator", OPERATORS)
def test_late_means_older_than_stream_time_minus_interval(operator):
    with _driver(operator) as driver:
        source = driver.create_input_topic("in")
        store = driver.get_state_store(STORE)
        source.pipe_input(*_record(operator, "x", 0), timestamp=30_000)
        source.pipe_input(*_record(operator, "a", 1), timestamp=20_000)  # == 30s - 10s
        assert store.get(_store_id(operator, "a")).ts == 20_000  # not late: stored
        source.pipe_input(*_record(operator, "b", 2), timestamp=19_999)  # 1 ms older
        assert store.get(_store_id(operator, "b")) is None  # late: forwarded, not stored
        assert driver.create_output_topic("out").get_queue_size() == 3
        assert driver.metrics()[LATE_RECORDS_FORWARDED] == 1
