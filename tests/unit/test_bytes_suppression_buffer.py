"""The suppression buffer of a table with Bytes serdes (Kafka's buffer serializes with the
table's serdes): it holds the values' JSON form (base64 text) through the store seam
(state/serde_checked.py) and gives the bytes back: on eviction, record by record and in a
chunk's staged changes, and after a restore from its changelog rows into a wiped store.
Empty and non-UTF-8 bytes too."""

from __future__ import annotations

import base64
import json
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lakestate import (
    BufferConfig,
    Consumed,
    Grouped,
    Produced,
    Serdes,
    SerializationException,
    StreamsBuilder,
    Suppressed,
    TimeWindows,
)
from lakestate.records import Window, Windowed
from lakestate.serdes import TopicSerdes, WindowedSerdes
from lakestate.state.memory import in_memory_store
from lakestate.state.registry import open_view, view_class
from lakestate.state.suppression_stage import StagedBuffer
from lakestate.testing.driver import TopologyTestDriver

B, S = Serdes.Bytes(), Serdes.String()
NAME = "buffer"
KIND = "suppression_buffer"
BYTES = TopicSerdes(B, B)

# Any bytes: empty, NUL, 0xff, invalid UTF-8 sequences; None: a tombstone / no old value.
blobs = st.binary(max_size=8)
# Updates of distinct keys (b"earlier" is the one each test buffers before them).
keys = blobs.filter(lambda k: k != b"earlier")
updates = st.dictionaries(keys, st.tuples(st.none() | blobs, st.none() | blobs), max_size=6)


def _buffer(txn, spill: bool = False, serdes: TopicSerdes = BYTES):
    return open_view(NAME, KIND, {"spill_to_disk": spill}, lambda: txn, serdes)


def _evicted(buffer) -> list[tuple]:
    out = []
    buffer.evict_while(lambda: True, lambda r: out.append((r.key, r.value, r.prior_value)))
    return out


def _unbase64(text: str | None) -> bytes | None:
    held = None if text is None else json.loads(text)
    return None if held is None else base64.b64decode(held, validate=True)


@settings(max_examples=60, deadline=None)
@given(updates, st.booleans())
def test_a_bytes_buffer_gives_back_its_bytes_evicted_restored_and_in_the_changelog(entries, spill):
    expected = [(k, v, old) for k, (v, old) in entries.items()]
    store = in_memory_store("task")
    txn = store.new_transaction()
    buffer = _buffer(txn, spill)
    for time, (k, (v, old)) in enumerate(entries.items()):
        buffer.put(time, k, v, old, time)
    buffer.put(-1, b"earlier", b"\xff", b"\x00", 0)  # a second update keeps the first's prior
    buffer.put(-1, b"earlier", b"", b"\x80", 0)
    expected = [(b"earlier", b"", b"\x00"), *expected]
    assert buffer.prior_value(b"earlier") == (True, b"\x00")
    assert [(r.key, r.value, r.prior_value) for r in buffer.all()][:1] == expected[:1]
    buffer.flush()
    txn.commit()

    raw = list(store.iterate(NAME, None, None, False))
    rows = [view_class(KIND).changelog_row(k, v, B) for k, v in raw]
    shown = {
        _unbase64(r["key"]): (_unbase64(r["value"]), _unbase64(r["prior_value"])) for r in rows if r
    }
    assert shown == {k: (v, old) for k, v, old in expected}

    for source in (store, _restored(raw)):  # as committed, and restored into a wiped store
        txn = source.new_transaction()
        assert _evicted(_buffer(txn, spill)) == expected
        txn.close()  # not committed: the next source starts from its own state


def _restored(raw):
    fresh = in_memory_store("restored")
    txn = fresh.new_transaction()
    view_class(KIND).restore_entries(txn, NAME, raw)
    txn.commit()
    return fresh


@settings(max_examples=40, deadline=None)
@given(updates)
def test_a_chunk_staged_over_a_bytes_buffer_gives_back_its_bytes(entries):
    store = in_memory_store("task")
    txn = store.new_transaction()
    buffer = _buffer(txn)
    buffer.put(-1, b"earlier", b"\x00\xff", None, -1)  # in the buffer before the chunk
    staged = StagedBuffer(buffer)
    for time, (k, (v, old)) in enumerate(entries.items()):
        staged.put(time, k, v, old, time)
    out = []
    staged.evict_through(0, lambda r: out.append((r.key, r.value, r.prior_value)))
    updated = [(k, v, old) for k, (v, old) in entries.items()]
    assert out == [(b"earlier", b"\x00\xff", None), *updated[:1]]  # buffer times -1 and 0
    staged.apply()
    rest = updated[1:]
    assert _evicted(buffer) == rest


def test_a_windowed_bytes_key_shows_its_inner_key_as_base64_in_the_changelog():
    serde = WindowedSerdes.time_windowed_serde_from(B, timedelta(milliseconds=10))
    store = in_memory_store("task")
    txn = store.new_transaction()
    buffer = _buffer(txn, serdes=TopicSerdes(serde, B))
    key = Windowed(b"\xff\x00", Window(0, 10))
    buffer.put(10, key, b"\x80", None, 3)
    [(raw_key, raw_value)] = [e for e in txn.iterate(NAME, b"k", b"l", False)]
    row = view_class(KIND).changelog_row(raw_key, raw_value, serde)
    assert json.loads(row["key"]) == {"key": "/wA=", "window_start": 0, "window_end": 10}
    assert _evicted(buffer) == [(key, b"\x80", None)]


def test_a_bytes_buffer_refuses_a_value_that_is_not_bytes_naming_the_store():
    buffer = _buffer(in_memory_store("task").new_transaction())
    with pytest.raises(SerializationException, match=r"store 'buffer' has value serde"):
        buffer.put(0, b"k", "text", None, 0)
    with pytest.raises(SerializationException, match=r"store 'buffer' has key serde"):
        buffer.put(0, "k", b"v", None, 0)
    assert buffer.num_records() == 0


@pytest.mark.parametrize("text_keys", [False, True])
def test_the_driver_suppresses_a_bytes_windowed_reduce_to_its_final_bytes(text_keys):
    b = StreamsBuilder()
    stream = b.stream("in", Consumed.with_(B, B))
    if text_keys:  # a String key, Bytes values
        stream = stream.select_key(lambda k, v: k.hex())
    grouped = stream.group_by_key(Grouped.with_(S if text_keys else B, B))
    windows = TimeWindows.of_size_with_no_grace(timedelta(milliseconds=10))
    final = Suppressed.until_window_closes(BufferConfig.unbounded())
    reduced = grouped.windowed_by(windows).reduce(lambda agg, v: agg + v).suppress(final)
    reduced.to_stream().map(lambda w, v: (w.key, v)).to(
        "out", Produced.with_(S if text_keys else B, B)
    )
    with TopologyTestDriver(b.build()) as driver:
        inputs = driver.create_input_topic("in")
        for key, value, ts in [(b"\xff", b"\x00", 1), (b"\xff", b"\x80", 2), (b"", b"", 3)]:
            inputs.pipe_input(key, value, ts)
        out = driver.create_output_topic("out")
        assert out.read_key_values_to_list() == []
        inputs.pipe_input(b"\x01", b"x", 10)  # stream time 10 closes [0, 10)
        key = (lambda k: k.hex()) if text_keys else (lambda k: k)
        # One window end: ties by key.
        assert out.read_key_values_to_list() == [(key(b""), b""), (key(b"\xff"), b"\x00\x80")]


@pytest.mark.parametrize("hexed", [False, True])
def test_a_time_limit_suppress_of_a_bytes_table_emits_the_bytes_it_buffered(hexed):
    """``hexed``: ``map_values`` to text first, whose table has no Bytes value serde any
    more (Kafka's mapValues), so its buffer takes the text."""
    b = StreamsBuilder()
    table = b.stream("in", Consumed.with_(B, B)).group_by_key().reduce(lambda a, v: a + v)
    if hexed:
        table = table.map_values(bytes.hex)
    limit = Suppressed.until_time_limit(timedelta(milliseconds=5), BufferConfig.unbounded())
    table.suppress(limit).to_stream().to("out", Produced.with_(B, S if hexed else B))
    with TopologyTestDriver(b.build()) as driver:
        inputs = driver.create_input_topic("in")
        inputs.pipe_input(b"\x00", b"\xfe", 0)
        inputs.pipe_input(b"\x00", b"\xff", 1)
        inputs.pipe_input(b"\x01", b"", 9)
        value = "feff" if hexed else b"\xfe\xff"
        assert driver.create_output_topic("out").read_key_values_to_list() == [(b"\x00", value)]
