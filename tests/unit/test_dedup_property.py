"""Property tests: the three deduplication operators agree with a plain per-record model of
KIP-655 on random sequences with out-of-order timestamps, on both state backends; and a
store restored (or caught up) from its state-table rows carries on exactly as the original.

The model keeps no store: it remembers every record it forwarded and did not find late, and
calls a record a duplicate when one of those with the same id is within the interval of it
and not yet expired (ts >= stream time - interval, the current record included). A null id
(null key for by_key; null key or id for by_key_value; null id for deduplicate) is
forwarded. A record older than stream time - interval is late: forwarded if no duplicate is
found, never remembered.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lakestate import Deduplicated, StreamsBuilder
from lakestate.processors.dedup import (
    DUPLICATES_DROPPED,
    LATE_RECORDS_FORWARDED,
    RECORDS_FORWARDED,
    STORE_SIZE,
)
from lakestate.processors.task import Task
from lakestate.records import Record
from lakestate.state.base import TopicPartition
from lakestate.state.dedup import FLOOR_KEY
from lakestate.state.memory import in_memory_store
from lakestate.state.registry import restore_entry, view_class
from lakestate.testing.driver import TestRecord, TopologyTestDriver

BACKENDS = {"memory": {}, "rocksdb": {"lakestate.state.backend": "rocksdb"}}
SETTINGS = settings(max_examples=40, deadline=None, database=None)

KEYS = st.one_of(st.none(), st.sampled_from(["a", "b", "c"]))
IDS = st.one_of(st.none(), st.integers(1, 3))
# Small ranges, so that boundaries (|ts - ts'| == interval, ts == stream time - interval)
# are hit often.
RECORDS = st.lists(st.tuples(KEYS, IDS, st.integers(0, 60)), max_size=40)
INTERVALS = st.integers(0, 20)

SKIP = object()


def _id(key, value):
    return value["id"]


def by_key(key, value):
    return SKIP if key is None else key


def by_key_value(key, value):
    return SKIP if key is None or value["id"] is None else (key, value["id"])


def by_id(key, value):
    return SKIP if value["id"] is None else value["id"]


OPERATORS = {"by-key": by_key, "by-kv": by_key_value, "by-id": by_id}


def model(records, interval, id_of):
    """Indexes of the records forwarded, ids held at the end -> ts, and the late count."""
    stream_time = -1
    remembered: list[tuple] = []  # (id, ts) of records forwarded and not late
    forwarded, late = [], 0
    for n, (key, value, ts) in enumerate(records):
        stream_time = max(stream_time, ts)
        dedup_id = id_of(key, value)
        if dedup_id is SKIP:
            forwarded.append(n)
            continue
        live = [t for i, t in remembered if i == dedup_id and t >= stream_time - interval]
        assert len(live) <= 1  # so a store with one entry per id is enough
        if any(abs(t - ts) <= interval for t in live):
            continue
        forwarded.append(n)
        if ts < stream_time - interval:
            late += 1
        else:
            remembered.append((dedup_id, ts))
    held = {i: t for i, t in remembered if t >= stream_time - interval}
    return forwarded, held, late


def _topology(interval_ms):
    interval = timedelta(milliseconds=interval_ms)
    b = StreamsBuilder()
    s = b.stream("in")
    s.deduplicate_by_key(interval, Deduplicated.as_("by-key")).to("by-key-out")
    s.deduplicate_by_key_value(_id, interval, Deduplicated.as_("by-kv")).to("by-kv-out")
    s.deduplicate(_id, interval, Deduplicated.as_("by-id")).to("by-id-out")
    return b.build()


def _records(raw):
    return [(key, {"id": dedup_id, "n": n}, ts) for n, (key, dedup_id, ts) in enumerate(raw)]


@pytest.mark.parametrize("backend", list(BACKENDS))
@SETTINGS
@given(raw=RECORDS, interval=INTERVALS)
def test_operators_match_the_model(backend, raw, interval):
    records = _records(raw)
    totals = {RECORDS_FORWARDED: 0, DUPLICATES_DROPPED: 0, LATE_RECORDS_FORWARDED: 0}
    size = 0
    with TopologyTestDriver(_topology(interval), BACKENDS[backend]) as driver:
        source = driver.create_input_topic("in")
        for n, (key, value, ts) in enumerate(records):
            source.pipe_input(key, value, timestamp=ts)
            if backend != "memory":
                continue  # (slow on RocksDB; the stores are checked at the end below)
            for name, id_of in OPERATORS.items():  # the store after every record
                held = model(records[: n + 1], interval, id_of)[1]
                assert {i: e.ts for i, e in driver.get_state_store(name).all()} == held, name
        for name, id_of in OPERATORS.items():
            forwarded, held, late = model(records, interval, id_of)
            out = driver.create_output_topic(f"{name}-out").read_records_to_list()
            assert out == [TestRecord(*records[n]) for n in forwarded], name
            store = driver.get_state_store(name)
            assert {i: e.ts for i, e in store.all()} == held, name
            assert store.size() == len(held)
            assert sorted(store.by_time()) == sorted((t, i) for i, t in held.items())
            totals[RECORDS_FORWARDED] += len(forwarded)
            totals[DUPLICATES_DROPPED] += len(records) - len(forwarded)
            totals[LATE_RECORDS_FORWARDED] += late
            size += len(held)
        metrics = driver.metrics()
        for name, value in totals.items():
            assert metrics.get(name, 0) == value, name
        assert metrics.get(STORE_SIZE, 0) == size


# -- restore and catch-up from state-table rows ---------------------------------------------


def _task_topology(interval_ms):
    """by_key and by_key_value in one task (two dedup stores)."""
    interval = timedelta(milliseconds=interval_ms)
    b = StreamsBuilder()
    s = b.stream("in")
    s.deduplicate_by_key(interval, Deduplicated.as_("by-key")).to("by-key-out")
    s.deduplicate_by_key_value(_id, interval, Deduplicated.as_("by-kv")).to("by-kv-out")
    return b.build()


STORES = ("by-key", "by-kv")
TP = TopicPartition("in", 0)


def _run(task, records, first_offset):
    out = []
    for i, (key, value, ts) in enumerate(records):
        task.process("in", first_offset + i, Record(key, value, ts))
        out.extend(task.commit({TP: first_offset + i + 1}))
    return out


def _rows(store):
    """The state-table rows of each dedup store (what Delta holds): its id entries."""
    return {
        name: {k: v for k, v in store.iterate(name) if not view_class("dedup").is_index_only(k)}
        for name in STORES
    }


def _raw(store):
    """Each dedup store's entries but its purge floor: a bound, not restored (the first
    purge learns it again), so a restored store's may differ from the original's."""
    return {name: {k: v for k, v in store.iterate(name) if k != FLOOR_KEY} for name in STORES}


def _apply(store, rows_by_store, stream_time, offset, hook=True):
    with store.new_transaction() as txn:
        for name, rows in rows_by_store.items():
            for raw_key, raw_value in rows.items():
                if hook:
                    restore_entry("dedup", txn, name, raw_key, raw_value)
                else:
                    txn.put(name, raw_key, raw_value)
        txn.set_stream_time(stream_time)
        txn.commit({TP: offset})


def _changes(before, after):
    changes = {}
    for name in STORES:
        diff = {k: v for k, v in after[name].items() if before[name].get(k) != v}
        diff.update({k: None for k in before[name] if k not in after[name]})
        changes[name] = diff
    return changes


@SETTINGS
@given(raw=RECORDS, interval=INTERVALS, cuts=st.tuples(st.integers(0, 40), st.integers(0, 40)))
def test_restore_and_catch_up_from_rows_carry_on_like_the_original(raw, interval, cuts):
    records = _records(raw)
    first, second = sorted(min(c, len(records)) for c in cuts)
    topology = _task_topology(interval)

    def task(store):
        return Task(topology, 0, 0, store, {}, "app")

    original = in_memory_store("original")
    t = task(original)
    _run(t, records[:first], 0)
    rows_first, time_first = _rows(original), t.stream_time
    _run(t, records[first:second], first)
    rows_second, raw_second, time_second = _rows(original), _raw(original), t.stream_time
    expected = _run(t, records[second:], second)

    # Restored at the first cut, caught up to the second from the net row changes.
    caught_up = in_memory_store("caught-up")
    _apply(caught_up, rows_first, time_first, first)
    _apply(caught_up, _changes(rows_first, rows_second), time_second, second)
    assert _raw(caught_up) == raw_second  # index and size rebuilt exactly

    # Restored at the second cut by a plain copy of the rows: the processors rebuild.
    copied = in_memory_store("copied")
    _apply(copied, rows_second, time_second, second, hook=False)

    for store in (caught_up, copied):
        resumed = task(store)
        assert _run(resumed, records[second:], second) == expected
        resumed.commit({TP: len(records)})  # (the rebuild is written with the first commit)
        assert _raw(store) == _raw(original)
