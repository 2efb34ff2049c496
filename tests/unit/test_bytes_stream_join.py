"""Stream-stream joins whose values (and keys) are Bytes (issue 26): the join buffers and the
shared waiting store go through the one seam of every store (state/serde_checked.py) with
StreamJoined's serdes; the waiting store holds each side's values by that side's serde
(Kafka's LeftOrRightValueSerde). Arbitrary bytes, empty, NUL and not UTF-8, come back as
they were put: after a commit, from the changelog rows a restore copies, and as base64 text
in the changelog's value column; the Json side beside them keeps its JSON."""

from __future__ import annotations

import base64
import json
from datetime import timedelta
from itertools import groupby

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lakestate import (
    Consumed,
    JoinWindows,
    Serdes,
    SerializationException,
    StreamJoined,
    StreamsBuilder,
)
from lakestate.serdes import TopicSerdes
from lakestate.state.memory import in_memory_store
from lakestate.state.registry import open_view, view_class
from lakestate.state.stream_join import LeftOrRightValueSerde
from lakestate.testing.driver import TestRecord, TopologyTestDriver

B, S, J = Serdes.Bytes(), Serdes.String(), Serdes.Json()
WAITING, BUFFER = "stream_join_waiting", "stream_join_buffer"
NAME = "s"

blobs = st.binary(max_size=8)  # empty, NUL, 0xff, invalid UTF-8 sequences
texts = st.one_of(st.text(max_size=6), st.integers(-5, 5), st.lists(st.integers(0, 3), max_size=2))


def _unbase64(text: str) -> bytes:
    return base64.b64decode(json.loads(text), validate=True)


def _committed(kind: str, serdes: TopicSerdes, put) -> tuple[object, list]:
    """A store after one committed transaction of ``put(view)``, and its entries as a
    changelog carries them (raw key, raw value)."""
    store = in_memory_store("task")
    txn = store.new_transaction()
    put(open_view(NAME, kind, {}, lambda: txn, serdes))
    txn.commit()
    return store, list(store.iterate(NAME, None, None, False))


def _restored(kind: str, raw: list):
    fresh = in_memory_store("restored")
    txn = fresh.new_transaction()
    view_class(kind).restore_entries(txn, NAME, raw)
    txn.commit()
    return fresh


# (key, timestamp, is left, value): the left side's values bytes, the right side's JSON.
waiting_records = st.lists(
    st.tuples(blobs, st.integers(0, 4), st.booleans(), blobs, texts), max_size=10
)


@settings(max_examples=80, deadline=None)
@given(waiting_records, st.booleans())
def test_the_waiting_store_holds_bytes_on_one_side_and_json_on_the_other(records, bytes_left):
    # Kafka's LeftOrRightValueSerde(left, right): each record's value by its side's serde.
    serdes = TopicSerdes(
        B, LeftOrRightValueSerde(B, J) if bytes_left else LeftOrRightValueSerde(J, B)
    )
    entries = [
        (key, ts, is_left, blob if is_left == bytes_left else text, seq)
        for seq, (key, ts, is_left, blob, text) in enumerate(records)
    ]

    def put(view):
        for key, ts, is_left, value, seq in entries:
            view.add(key, ts, is_left, seq, value)

    # Kafka's order: by timestamp, the right side first, by key (bytes order), by arrival.
    expected = [
        (ts, is_left, key, value)
        for key, ts, is_left, value, _ in sorted(entries, key=lambda e: (e[1], e[2], e[0], e[4]))
    ]
    store, raw = _committed(WAITING, serdes, put)
    for source in (store, _restored(WAITING, raw)):
        view = open_view(NAME, WAITING, {}, lambda s=source: s, serdes)
        scanned = [(ts, is_left, key, value) for _, ts, is_left, key, value in view.scan()]
        assert scanned == expected
        for _, is_left, _, value in scanned:  # bytes where bytes were put, JSON elsewhere
            assert (type(value) is bytes) == (is_left == bytes_left)
    rows = [view_class(WAITING).changelog_row(k, v, B) for k, v in raw]
    shown = sorted(
        (_unbase64(r["key"]), r["ts"], r["side"] == "left", r["seq"], r["value"]) for r in rows
    )
    assert shown == sorted(
        (
            key,
            ts,
            is_left,
            seq,
            json.dumps(base64.b64encode(value).decode())
            if is_left == bytes_left
            else json.dumps(value, separators=(",", ":"), ensure_ascii=False),
        )
        for key, ts, is_left, value, seq in entries
    )


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(blobs, st.integers(0, 6), blobs), max_size=10))
def test_a_bytes_join_buffer_gives_back_its_bytes(records):
    serdes = TopicSerdes(B, B)
    kept = [(key, ts, seq, value) for seq, (key, ts, value) in enumerate(records)]

    def put(view):
        view.put_all([(k, ts, seq, view.held_value(k, v)) for k, ts, seq, v in kept])

    store, raw = _committed(BUFFER, serdes, put)
    for source in (store, _restored(BUFFER, raw)):
        view = open_view(NAME, BUFFER, {}, lambda s=source: s, serdes)
        assert list(view.all()) == sorted(kept, key=lambda r: (r[0], r[1], r[2]))
        for key in {k for k, *_ in kept}:
            assert view.fetch(key, 1, 5) == [
                (ts, v)
                for k, ts, _, v in sorted(kept, key=lambda r: (r[1], r[2]))
                if k == key and 1 <= ts <= 5
            ]
    rows = [r for r in (view_class(BUFFER).changelog_row(k, v, B) for k, v in raw) if r]
    assert sorted(
        (_unbase64(r["key"]), r["ts"], r["seq"], _unbase64(r["value"])) for r in rows
    ) == (sorted(kept))


def test_the_join_stores_refuse_what_their_serdes_cannot_hold_naming_them():
    txn = in_memory_store("task").new_transaction()
    waiting = open_view(NAME, WAITING, {}, lambda: txn, TopicSerdes(B, LeftOrRightValueSerde(B, J)))
    with pytest.raises(
        SerializationException, match=r"store 's' has left value serde Serdes\.Bytes"
    ):
        waiting.add(b"k", 1, True, 0, "text")
    with pytest.raises(SerializationException, match="bytes"):
        waiting.add(b"k", 1, False, 0, b"\xff")  # the right side is Json
    with pytest.raises(SerializationException, match=r"store 's' has key serde Serdes\.Bytes"):
        waiting.add("k", 1, True, 0, b"v")
    buffer = open_view(NAME, BUFFER, {}, lambda: txn, TopicSerdes(S, B))
    with pytest.raises(SerializationException, match=r"store 's' has value serde Serdes\.Bytes"):
        buffer.held_value("k", "text")
    json_buffer = open_view(NAME, BUFFER, {}, lambda: txn)
    with pytest.raises(SerializationException, match=r"StreamJoined\.with_\(key_serde, Serdes"):
        json_buffer.held_value("k", b"\x00")
    assert list(txn.changes()) == []  # refused before anything is written


def test_left_or_right_value_serde_is_its_two_serdes():
    serde = LeftOrRightValueSerde(B, S)
    assert serde.side(True) == B and serde.side(False) == S
    assert serde == LeftOrRightValueSerde(B, S) != LeftOrRightValueSerde(S, B)
    assert hash(serde) == hash(LeftOrRightValueSerde(B, S)) and serde.json_form_differs
    assert not LeftOrRightValueSerde(S, J).json_form_differs
    assert serde.name == "LeftOrRightValueSerde(Serdes.Bytes(), Serdes.String())"
    with pytest.raises(SerializationException, match="by its side's serde"):
        serde.to_json(b"")  # a value without its side has no form


def test_the_join_stores_take_the_stream_joined_serdes():
    b = StreamsBuilder()
    left, right = b.stream("l", Consumed.with_(B, B)), b.stream("r", Consumed.with_(B, S))
    windows = JoinWindows.of_time_difference_without_grace(timedelta(milliseconds=5))
    left.outer_join(right, lambda a, c: c, windows, StreamJoined.as_("p").with_(B, B, S))
    left.outer_join(right, lambda a, c: c, windows, StreamJoined.as_("q"))
    left.left_join(right, lambda a, c: c, windows, StreamJoined.as_("r").with_(S, B, B))
    stores = b.build().stores
    assert stores["p-outer-this-join-store"].serdes == TopicSerdes(B, B)
    assert stores["p-outer-other-join-store"].serdes == TopicSerdes(B, S)
    assert stores["p-outer-shared-join-store"].serdes == TopicSerdes(B, LeftOrRightValueSerde(B, S))
    # Both sides Bytes: the waiting store's values are Bytes (its view types them BINARY).
    assert stores["r-left-shared-join-store"].serdes == TopicSerdes(S, B)
    # None given: Kafka's StreamJoined.with(null, null, null); lakestate's default is Json.
    assert all(
        stores[f"q-{s}-store"].serdes.is_json for s in ("outer-this-join", "outer-shared-join")
    )


def _join(how: str, as_bytes: bool):
    """``how`` join of "l" and "r" (windows 3 ms, grace 2) whose left values are bytes
    with Bytes serdes (``as_bytes``) or their hex text with Json ones; the right side's are
    text either way. The joiner shows the left value as hex, so both give the same text."""
    b = StreamsBuilder()
    left = b.stream("l", Consumed.with_(S, B if as_bytes else J))
    right = b.stream("r", Consumed.with_(S, S))
    windows = JoinWindows.of_time_difference_and_grace(
        timedelta(milliseconds=3), timedelta(milliseconds=2)
    )

    def joiner(value, other):
        shown = None if value is None else value.hex() if as_bytes else value
        return f"{shown}|{other}"

    joined = StreamJoined.with_(S, B, S) if as_bytes else None
    join = {"inner": left.join, "left": left.left_join, "outer": left.outer_join}[how]
    join(right, joiner, windows, *([joined] if joined else [])).to("out")
    return b.build()


join_inputs = st.lists(
    st.tuples(st.booleans(), st.sampled_from(["a", "b"]), blobs, st.integers(0, 12)),
    min_size=1,
    max_size=14,
)


@settings(max_examples=40, deadline=None)
@given(join_inputs, st.sampled_from(["inner", "left", "outer"]), st.booleans())
def test_a_join_of_bytes_gives_what_the_same_join_of_their_hex_gives(records, how, chunks):
    # The Json path is Kafka's (conformance groups join-stream_stream-*); Bytes values
    # through the seam must join, wait and close exactly as their text does.
    outputs = []
    for as_bytes in (True, False):
        with TopologyTestDriver(_join(how, as_bytes)) as driver:
            # chunks: each run of records on one topic piped as one list (the chunk loops).
            runs = (
                [list(g) for _, g in groupby(records, key=lambda r: r[0])]
                if chunks
                else [[r] for r in records]
            )
            for run in runs:
                topic = driver.create_input_topic("l" if run[0][0] else "r")
                topic.pipe_record_list(
                    TestRecord(
                        key, (blob if as_bytes else blob.hex()) if on_left else blob.hex(), ts
                    )
                    for on_left, key, blob, ts in run
                )
            out = driver.create_output_topic("out").read_records_to_list()
            outputs.append([(r.key, r.value, r.timestamp) for r in out])
    assert outputs[0] == outputs[1]


def test_a_join_store_whose_key_serde_is_json_cannot_log_a_bytes_key_and_says_what_to_do():
    from lakestate import App, StreamsException
    from lakestate.processors.task import Task
    from lakestate.records import Record
    from lakestate.runtime.batch_rows import Rows, out_fields, state_rows, store_kinds

    b = StreamsBuilder()
    left, right = b.stream("l", Consumed.with_(B, B)), b.stream("r", Consumed.with_(B, B))
    windows = JoinWindows.of_time_difference_without_grace(timedelta(milliseconds=5))
    joined = StreamJoined.as_("p").with_value_serde(B).with_other_value_serde(B)  # no key serde
    left.join(right, lambda a, c: a + c, windows, joined).to("out")
    app = App("bytes", b.build(), {})
    task = Task(app.topology, 0, 0, in_memory_store("task"), app.config, app.name)
    task.process("l", 0, Record(b"\xff", b"v", 1_000))
    writes = task.transaction.changes_by_namespace()
    task.close()
    with pytest.raises(StreamsException) as info:
        state_rows(Rows(out_fields(store_kinds(app))), app, writes, 0, 0)
    text = str(info.value)
    assert "store 'p-this-join-store' (key serde Serdes.Json())" in text
    assert "StreamJoined.with_key_serde(Serdes.Bytes())" in text


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(blobs, st.integers(0, 3), st.booleans(), blobs), max_size=8))
def test_a_waiting_store_whose_sides_share_bytes_holds_them_by_that_one_serde(records):
    # StreamJoined.with_(k, Bytes, Bytes): waiting_serdes gives the one serde, Bytes.
    serdes = TopicSerdes(B, B)

    def put(view):
        for seq, (key, ts, is_left, value) in enumerate(records):
            view.add(key, ts, is_left, seq, value)

    store, raw = _committed(WAITING, serdes, put)
    expected = sorted(
        ((ts, is_left, key, seq), value) for seq, (key, ts, is_left, value) in enumerate(records)
    )
    for source in (store, _restored(WAITING, raw)):
        view = open_view(NAME, WAITING, {}, lambda s=source: s, serdes)
        assert [v for _, _, _, _, v in view.scan()] == [v for _, v in expected]
    rows = [view_class(WAITING).changelog_row(k, v, B) for k, v in raw]
    assert sorted(_unbase64(r["value"]) for r in rows) == sorted(v for _, v in expected)
