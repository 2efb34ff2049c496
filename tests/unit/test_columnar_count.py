"""The built-in count's columnar path (processors/columnar_count.py) against the per-record
path: the same output texts (new and old counts, timestamps), the same store entries and
changelog, the same metrics and stream time, record for record, over random batches with
repeating keys of every kind, null keys and values, timestamps far apart and state carried
over from earlier batches; and the multi-get the count and dedup read with
(``state/multi_get.get_many``) against one get per key on RocksDB, own writes included."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lakestate import Materialized, Serdes, StreamsBuilder
from lakestate.processors import columnar_count
from lakestate.processors.task import Task
from lakestate.records import Record
from lakestate.state.base import TopicPartition
from lakestate.state.memory import in_memory_store
from lakestate.state.multi_get import get_many
from lakestate.state.rocksdb import rocksdb_store
from lakestate.state.timestamped import TimestampedKeyValueStore

SETTINGS = settings(max_examples=80, deadline=None, database=None)

KEYS = st.one_of(
    st.none(),
    st.sampled_from(["a", "b", "ä", "", 0, 7, -3, 2**40, True, 1.5, ("t", 1), ("t", 2)]),
)
VALUES = st.one_of(st.none(), st.builds(lambda n: {"n": n}, st.integers(0, 9)))
TIMESTAMPS = st.one_of(st.integers(0, 50), st.integers(0, 2**63 - 1))
BATCHES = st.lists(st.lists(st.tuples(KEYS, VALUES, TIMESTAMPS), max_size=60), max_size=4)
# A store with serdes checks each write (state/serde_checked.py): String keys only.
STRING_KEYS = st.one_of(st.none(), st.sampled_from(["a", "b", "ä", ""]))
CHECKED_BATCHES = st.lists(
    st.lists(st.tuples(STRING_KEYS, VALUES, TIMESTAMPS), max_size=60), max_size=4
)


def _task(store, checked: bool = False) -> Task:
    b = StreamsBuilder()
    materialized = Materialized.as_("counts")
    if checked:
        materialized = materialized.with_(Serdes.String(), Serdes.Long())
    b.stream("in").group_by_key().count(materialized).to_stream().to("out")
    return Task(b.build(), 0, 0, store, {}, "app")


def _run(batches: list[list[tuple]], columnar: bool, store=None, checked: bool = False) -> tuple:
    """Each batch as one chunk (columnar) or record by record, committed after each."""
    task = _task(in_memory_store("0_0") if store is None else store, checked)
    offset, out = 0, []
    for rows in batches:
        records = [Record(k, v, ts) for k, v, ts in rows]
        if columnar:
            assert task.process_chunk("in", list(range(offset, offset + len(rows))), records)
        else:
            for i, record in enumerate(records):
                task.process("in", offset + i, record)
        offset += len(rows)
        out += [(o.key_text, o.value_text, o.record.timestamp) for o in task.pending_output_text()]
        task.commit({TopicPartition("in", 0): offset})
    state = {
        ns: list(task.store.iterate(ns, None, None, False))
        for ns in ["counts", "__meta__", "__offsets__"]
    }
    return out, state, task.metrics.document(), task.stream_time


@pytest.fixture
def columnar_from_one(monkeypatch):
    """Every chunk of the count goes the columnar way; process() (a chunk of one) too
    unless the test sets MIN_RECORDS higher for its reference run."""
    monkeypatch.setattr(columnar_count, "MIN_RECORDS", 1)
    return monkeypatch


@SETTINGS
@given(data=st.data(), checked=st.booleans())
def test_a_count_on_columns_gives_what_one_by_one_gives(data, checked):
    batches = data.draw(CHECKED_BATCHES if checked else BATCHES)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(columnar_count, "MIN_RECORDS", 1)
        columnar = _run(batches, columnar=True, checked=checked)
        mp.setattr(columnar_count, "MIN_RECORDS", 10**9)
        one_by_one = _run(batches, columnar=False, checked=checked)
    assert columnar == one_by_one


def test_on_rocksdb_with_state_carried_over(tmp_path: Path, columnar_from_one):
    rows = [(f"k{i % 7}", {"n": i}, 1000 - i if i % 3 else 1000 + i) for i in range(200)]
    batches = [rows[:80], rows[80:81], rows[81:], [(None, {"n": 1}, 5), ("k1", None, 6)]]
    columnar = _run(batches, True, rocksdb_store("0_0", tmp_path / "a"))
    columnar_from_one.setattr(columnar_count, "MIN_RECORDS", 10**9)
    one_by_one = _run(batches, False, rocksdb_store("0_0", tmp_path / "b"))
    assert columnar == one_by_one
    # Kafka's running counts, each at max(record's, previous aggregate's) timestamp: k0's
    # records are i = 0, 7, 14, 21 (timestamps 1000, 993, 986, 1021).
    k0 = [(v, ts) for k, v, ts in columnar[0] if k == '"k0"']
    assert k0[:4] == [("1", 1000), ("2", 1000), ("3", 1000), ("4", 1021)]
    assert len(k0) == 29  # 200 records: i = 0, 7, ..., 196


class _Store:
    """A store holding nothing: what ``count_chunk`` reads from and encodes with."""

    encode_entry = staticmethod(TimestampedKeyValueStore.encode_entry)

    def get_with_timestamp(self, key):
        return None


def test_the_columnar_path_is_taken_unless_the_arrays_cannot_hold_the_chunk():
    records = [Record(f"k{i % 5}", i, 10 * i) for i in range(100)]
    counted = columnar_count.count_chunk(_Store(), records, list(range(100)))
    assert counted is not None
    out, at, pending, dropped = counted
    assert (dropped, at, len(pending)) == (0, list(range(100)), 5)
    assert [(r.value.new_value, r.value.old_value) for r in out.records()[:6]] == [
        (1, None), (1, None), (1, None), (1, None), (1, None), (2, 1)
    ]  # fmt: skip
    wide = [Record("a", 1, 0), Record("b", 1, 2**62)]
    assert columnar_count.count_chunk(_Store(), wide, [0, 1]) is None


def test_timestamps_are_the_running_maximum_per_key():
    records = [Record("a", 1, 50), Record("b", 1, 10), Record("a", 1, 20), Record("a", 1, 70)]
    out, _, pending, _ = columnar_count.count_chunk(_Store(), records, [0, 1, 2, 3])
    assert [(r.key, r.value.new_value, r.timestamp) for r in out.records()] == [
        ("a", 1, 50), ("b", 1, 10), ("a", 2, 50), ("a", 3, 70)
    ]  # fmt: skip
    assert pending == [
        TimestampedKeyValueStore.encode_entry("a", 3, 70),
        TimestampedKeyValueStore.encode_entry("b", 1, 10),
    ]


KV = st.binary(min_size=1, max_size=2)


def test_get_many_is_get_of_each_key(tmp_path: Path):
    store = rocksdb_store("s", tmp_path)
    namespaces = iter(range(10**6))  # one of its own per example, on one open store

    @settings(max_examples=60, deadline=None, database=None)
    @given(
        committed=st.dictionaries(KV, KV, max_size=20),
        buffered=st.dictionaries(KV, st.one_of(st.none(), KV), max_size=20),
        asked=st.lists(KV, max_size=30),
    )
    def check(committed, buffered, asked):
        ns = f"ns{next(namespaces)}"
        txn = store.new_transaction()
        for k, v in committed.items():
            txn.put(ns, k, v)
        txn.commit({TopicPartition("in", 0): 1})
        txn = store.new_transaction()
        for k, v in buffered.items():
            txn.put(ns, k, v)
        try:
            assert get_many(txn, ns, asked) == [txn.get(ns, k) for k in asked]
            assert get_many(txn, "absent", asked) == [None] * len(asked)
        finally:
            txn.close()

    try:
        check()
    finally:
        store.close()


@SETTINGS
@given(
    keys=st.lists(
        st.one_of(st.text(max_size=3), st.sampled_from(["a", "b", "\ud800", "a\udfff", 1])),
        max_size=50,
    )
)
def test_keys_are_numbered_in_first_seen_order(keys):
    """Arrow's numbering (all keys str) and the dict pass (a lone surrogate, an int) give
    each key the number of its first appearance."""
    ids, groups = columnar_count._numbered(keys)
    slots: dict = {}
    assert ids.tolist() == [slots.setdefault((type(k), k), len(slots)) for k in keys]
    assert groups == len(slots)
