"""The suppression buffer store kind: its contract in both holdings (in memory, on disk) on
both backends, rollback of the in-memory mirror, its changelog rows and restore; and
property tests: random inputs through suppress agree with a plain model, in one run and in
runs split by a restart or by a restore from the changelog rows.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lakestate import BufferConfig, KTable, StreamsBuilder, Suppressed, Window, Windowed
from lakestate.state import processor_metadata
from lakestate.state.keys import encode_key
from lakestate.state.registry import view_class
from lakestate.state.rocksdb import rocksdb_store
from lakestate.state.serde import encode_value
from lakestate.state.suppression_buffer import BufferedRecord, SuppressionBuffer
from lakestate.testing.driver import TopologyTestDriver
from state_backends import BACKENDS, store_factories

NAME = "buf"


@pytest.fixture(params=BACKENDS)
def store_factory(request, tmp_path):
    yield from store_factories(request, tmp_path)


@pytest.fixture(params=[False, True], ids=["in-memory", "on-disk"])
def spill(request):
    return request.param


def _view(txn_holder, spill):
    return SuppressionBuffer(NAME, lambda: txn_holder[0], spill_to_disk=spill)


def _drain(buffer):
    out = []
    buffer.evict_while(lambda: True, out.append)
    return out


def test_contract(store_factory, spill):
    store = store_factory()
    holder = [store.new_transaction()]
    buffer = _view(holder, spill)
    assert buffer.min_buffer_time() is None and buffer.num_records() == 0
    buffer.put(5, "b", 1, None, 5)
    buffer.put(3, "a", 10, 9, 3, {"h": 1})
    buffer.put(9, "a", 11, 10, 4)  # an update: buffer time 3 and prior value 9 are kept
    assert buffer.get("a") == BufferedRecord("a", 11, 9, 4, 3, None)
    assert buffer.prior_value("a") == (True, 9)
    assert buffer.prior_value("zz") == (False, None)
    assert buffer.num_records() == 2 and buffer.min_buffer_time() == 3
    size = buffer.buffer_size()
    assert size == sum(
        1 + len(encode_key(k)) + len(encode_value([bt, ts, v, p, None]))
        for k, bt, ts, v, p in (("a", 3, 4, 11, 9), ("b", 5, 5, 1, None))
    )
    out = []
    assert buffer.evict_while(lambda: buffer.min_buffer_time() <= 4, out.append) == 1
    assert out == [BufferedRecord("a", 11, 9, 4, 3, None)]
    assert buffer.get("a") is None and buffer.num_records() == 1
    holder[0].commit()
    holder[0] = store.new_transaction()
    assert _drain(buffer) == [BufferedRecord("b", 1, None, 5, 5, None)]
    assert buffer.buffer_size() == 0 and buffer.min_buffer_time() is None


def test_ties_leave_in_key_order(store_factory, spill):
    store = store_factory()
    holder = [store.new_transaction()]
    buffer = _view(holder, spill)
    for key in ("c", "a", "b"):
        buffer.put(7, key, key, None, 7)
    buffer.put(8, "0", "0", None, 8)
    assert [r.key for r in _drain(buffer)] == ["a", "b", "c", "0"]


def test_a_rolled_back_transaction_leaves_nothing(store_factory, spill):
    store = store_factory()
    holder = [store.new_transaction()]
    buffer = _view(holder, spill)
    buffer.put(1, "kept", 1, None, 1)
    buffer.flush()
    holder[0].commit()
    holder[0] = store.new_transaction()
    buffer.put(2, "lost", 2, None, 2)
    buffer.put(9, "kept", 5, 1, 9)
    buffer.flush()
    assert buffer.num_records() == 2
    holder[0].close()  # rolled back: the mirror must not keep its writes
    holder[0] = store.new_transaction()
    assert buffer.num_records() == 1
    assert buffer.get("lost") is None
    assert buffer.get("kept") == BufferedRecord("kept", 1, None, 1, 1, None)
    assert [r.key for r in _drain(buffer)] == ["kept"]


def test_a_committed_mirror_is_handed_on_and_a_reopened_store_reloads(store_factory, spill):
    store = store_factory()
    holder = [store.new_transaction()]
    buffer = _view(holder, spill)
    for i in range(5):
        buffer.put(i, f"k{i}", i, None, i)
    buffer.flush()
    holder[0].commit()
    holder[0] = store.new_transaction()
    assert buffer.num_records() == 5
    holder[0].close()
    store = store_factory.reopen(store)
    holder[0] = store.new_transaction()
    fresh = _view(holder, spill)
    assert [r.key for r in fresh.all()] == [f"k{i}" for i in range(5)]
    assert fresh.num_records() == 5


def test_changelog_rows_and_restore(store_factory, spill):
    store = store_factory()
    holder = [store.new_transaction()]
    buffer = _view(holder, spill)
    key = Windowed("a", Window(0, 10))
    buffer.put(10, key, {"n": 2}, {"n": 1}, 7)
    buffer.put(12, "plain", None, "x", 12)
    buffer.flush()
    writes = list(holder[0].changes())
    holder[0].commit()
    kind = view_class(SuppressionBuffer.kind)
    rows = [
        (k, v, kind.changelog_row(k, v))
        for ns, k, v in writes
        if ns == NAME and not kind.is_index_only(k)
    ]
    typed = sorted((r[2] for r in rows), key=lambda r: str(r["key"]))
    assert typed == [
        {"key": '"plain"', "value": None, "prior_value": '"x"', "ts": 12, "buffer_time": 12},
        {
            "key": '{"key":"a","window_end":10,"window_start":0}',
            "value": '{"n":2}',
            "prior_value": '{"n":1}',
            "ts": 7,
            "buffer_time": 10,
        },
    ]
    assert {c for c, _ in SuppressionBuffer.STATE_COLUMNS} == set(typed[0])
    # A store restored from the rows alone (no index entries) holds the same buffer.
    restored = store_factory()
    txn = restored.new_transaction()
    kind.restore_entries(txn, NAME, [(k, v) for k, v, _ in rows])
    txn.commit()
    holder2 = [restored.new_transaction()]
    again = _view(holder2, spill)
    holder[0] = store.new_transaction()
    assert (again.num_records(), again.buffer_size()) == (2, buffer.buffer_size())
    assert _drain(again) == _drain(buffer) != []
    # A tombstone row removes the entry and its index entry.
    txn = restored.new_transaction()
    kind.restore_entry(txn, NAME, b"k" + encode_key("plain"), None)
    assert not [k for k, _ in txn.iterate(NAME, None, None, False) if k.endswith(encode_key("plain"))]
    txn.close()


# -- property tests through the driver ------------------------------------------------------

SETTINGS = settings(max_examples=30, deadline=None, database=None)
KEYS = st.sampled_from(["a", "b", "c", "d"])
VALUES = st.one_of(st.none(), st.integers(0, 3))
RECORDS = st.lists(st.tuples(KEYS, VALUES, st.integers(0, 40)), max_size=25)
CONFIGS = {
    "unbounded": BufferConfig.unbounded(),
    "spill": BufferConfig.max_records(1).spill_to_disk_when_full(),
    "max_records_2": BufferConfig.max_records(2),
    "max_bytes_60": BufferConfig.max_bytes(60),
}
WINDOW = 10


def _size(key, bt, ts, value, prior):
    return 1 + len(encode_key(key)) + len(encode_value([bt, ts, value, prior, None]))


def model(records, duration, final, config):
    """Suppress after a table source, written plainly: the latest value per key in a dict,
    the oldest found by a full scan."""
    table: dict = {}
    buffer: dict = {}  # key -> [buffer_time, ts, value, prior]
    observed = -1
    out = []

    def oldest():
        return min(buffer, key=lambda k: (buffer[k][0], encode_key(k)))

    def evict():
        key = oldest()
        _, ts, value, _ = buffer.pop(key)
        if not (final and value is None):
            out.append((key, value, ts))

    def over():
        count = len(buffer)
        size = sum(_size(k, *e) for k, e in buffer.items())
        return (config.record_limit is not None and count > config.record_limit) or (
            config.byte_limit is not None and size > config.byte_limit
        )

    for key, value, ts in records:
        old = table.get(key)
        table[key] = value
        # A table source forwards every update, a delete of a key it never held too (as
        # Kafka's KTableSource does).
        observed = max(observed, ts)
        if key in buffer:
            buffer[key][1:3] = [ts, value]
        else:
            buffer[key] = [key.window.end if final else ts, ts, value, old]
        while buffer and buffer[oldest()][0] <= observed - duration:
            evict()
        if config.when_full == "emit_early":
            while buffer and over():
                evict()
    return out


def _topology(duration, final, config):
    b = StreamsBuilder()
    table = b.table("in")
    if final:
        table = KTable(table._graph, table.node_name, table.query_store_name, window_grace_ms=duration)
        suppressed = Suppressed.until_window_closes(config)
    else:
        suppressed = Suppressed.until_time_limit(timedelta(milliseconds=duration), config)
    table.suppress(suppressed).to_stream().to("out")
    return b.build()


def _keyed(records, final):
    """Windowed keys for final results: the window of ``WINDOW`` ms holding the timestamp."""
    if not final:
        return records
    return [(Windowed(k, Window(ts // WINDOW * WINDOW, ts // WINDOW * WINDOW + WINDOW)), v, ts) for k, v, ts in records]


def _pipe(driver, records, one_list):
    source = driver.create_input_topic("in")
    if one_list:
        from lakestate.testing.driver import TestRecord

        source.pipe_record_list([TestRecord(k, v, ts) for k, v, ts in records])
    else:
        for key, value, ts in records:
            source.pipe_input(key, value, timestamp=ts)
    return [(r.key, r.value, r.timestamp) for r in driver.create_output_topic("out").read_records_to_list()]


def _restore_copy(src_dir, dst_dir, topology):
    """A task store rebuilt from the changelog rows of the one in ``src_dir`` (what the
    engine's restore does): every store's non-index entries, through its kind, and the
    processor metadata (which the engine restores from the task's progress row)."""
    src = rocksdb_store("src", f"{src_dir}/test-app/0_0")
    dst = rocksdb_store("dst", f"{dst_dir}/test-app/0_0")
    txn = dst.new_transaction()
    processor_metadata.write(txn, processor_metadata.read(src))
    for name, spec in topology.stores.items():
        kind = view_class(spec.kind)
        rows = [(k, v) for k, v in src.iterate(name) if not kind.is_index_only(k)]
        kind.restore_entries(txn, name, rows)
    txn.commit()
    src.close()
    dst.close()


@SETTINGS
@given(
    records=RECORDS,
    duration=st.integers(0, 12),
    final=st.booleans(),
    config=st.sampled_from(sorted(CONFIGS)),
    cut=st.integers(0, 25),
)
def test_random_inputs_match_the_model_however_they_are_split(
    tmp_path_factory, records, duration, final, config, cut
):
    buffer_config = CONFIGS[config]
    if final and not buffer_config.is_strict:
        buffer_config = BufferConfig.unbounded()
    records = _keyed(records, final)
    expected = model(records, duration, final, buffer_config)
    topology = _topology(duration, final, buffer_config)
    # One run, memory backend, as one list and record by record.
    for one_list in (True, False):
        with TopologyTestDriver(topology) as d:
            assert _pipe(d, records, one_list) == expected
    # Split by a restart (RocksDB keeps the buffer and the node's stream time) ...
    state = tmp_path_factory.mktemp("state")
    rocks = {"lakestate.state.backend": "rocksdb", "state.dir": str(state)}
    with TopologyTestDriver(topology, rocks) as d:
        first = _pipe(d, records[:cut], False)
    # ... and by a restore of the local store from its changelog rows.
    restored = tmp_path_factory.mktemp("restored")
    _restore_copy(state, restored, topology)
    with TopologyTestDriver(topology, rocks) as d:
        assert first + _pipe(d, records[cut:], False) == expected
    with TopologyTestDriver(topology, {**rocks, "state.dir": str(restored)}) as d:
        assert first + _pipe(d, records[cut:], False) == expected
