"""Stores with Bytes serdes (Kafka's ``Serdes.Bytes()``): the one seam between what a
processor gives and gets and what a store holds (state/serde_checked.py) and how the
changelog shows a key (serdes.changelog_text). Arbitrary bytes keys and values, empty and
non-UTF-8 ones too, come back as they were put: after a commit, from the changelog rows a
restore copies, and as base64 text in the changelog's JSON columns (the SQL view turns it
back into BINARY). A store whose key serde is not Bytes cannot write a bytes key to its
changelog: the batch fails naming the node, the store and what to do."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lakestate import (
    App,
    Consumed,
    Grouped,
    Materialized,
    Serdes,
    SerializationException,
    StreamsBuilder,
    StreamsException,
)
from lakestate.processors.task import Task
from lakestate.records import Record, Window, Windowed
from lakestate.runtime.batch_rows import Rows, out_fields, state_rows, store_kinds
from lakestate.serdes import TopicSerdes, changelog_text
from lakestate.state.memory import in_memory_store
from lakestate.state.registry import open_view, view_class
from lakestate.state.versioned import VersionedRecord

B, L, S, J = Serdes.Bytes(), Serdes.Long(), Serdes.String(), Serdes.Json()
NAME = "s"
TIMESTAMPED, WINDOW, VERSIONED = "timestamped_key_value", "window", "versioned"
OPTIONS = {VERSIONED: {"history_retention_ms": 10**9}}

# Any bytes: empty, NUL, 0xff, invalid UTF-8 sequences.
blobs = st.binary(max_size=10)


BYTES = TopicSerdes(B, B)


def _view(kind: str, source):
    return open_view(NAME, kind, OPTIONS.get(kind, {}), source, BYTES)


def _committed(kind: str, put) -> tuple[object, list[tuple[bytes, bytes]]]:
    """A store after one committed transaction of ``put(view)``: (its store, its entries
    as a changelog would carry them)."""
    store = in_memory_store("task")
    txn = store.new_transaction()
    put(_view(kind, lambda: txn))
    txn.commit()
    raw = list(store.iterate(NAME, None, None, False))
    return store, raw


def _restored(kind: str, raw: list[tuple[bytes, bytes]]):
    """A fresh store restored from changelog rows (their raw_key, raw_value)."""
    fresh = in_memory_store("restored")
    txn = fresh.new_transaction()
    view_class(kind).restore_entries(txn, NAME, raw)
    txn.commit()
    return fresh


def _unbase64(text: str) -> bytes:
    return base64.b64decode(json.loads(text), validate=True)


@settings(max_examples=80, deadline=None)
@given(st.dictionaries(blobs, blobs, max_size=8))
def test_a_bytes_store_gives_back_its_bytes_committed_restored_and_in_the_changelog(entries):
    def put(view):
        for ts, (k, v) in enumerate(entries.items()):
            view.put(k, v, ts)

    store, raw = _committed(TIMESTAMPED, put)
    for source in (store, _restored(TIMESTAMPED, raw)):
        view = _view(TIMESTAMPED, lambda s=source: s)
        assert dict(view.all()) == entries
        assert [k for k, _ in view.all()] == sorted(entries)  # byte order, as Kafka's store
        for ts, (k, v) in enumerate(entries.items()):
            assert view.get_with_timestamp(k) == (v, ts) and type(view.get(k)) is bytes
        assert view.get_many_with_timestamp(list(entries)) == [
            (v, ts) for ts, v in enumerate(entries.values())
        ]
    rows = [view_class(TIMESTAMPED).changelog_row(k, v, B) for k, v in raw]
    assert {(_unbase64(r["key"]), _unbase64(r["value"])) for r in rows} == set(entries.items())


@settings(max_examples=40, deadline=None)
@given(st.dictionaries(st.tuples(blobs, st.integers(0, 3)), blobs, max_size=6))
def test_a_bytes_window_store_gives_back_its_bytes(entries):
    def window(start: int) -> Window:
        return Window(start * 10, start * 10 + 10)

    def put(view):
        for (k, start), v in entries.items():
            view.put(k, window(start), v, start)

    store, raw = _committed(WINDOW, put)
    for source in (store, _restored(WINDOW, raw)):
        view = _view(WINDOW, lambda s=source: s)
        assert {(w.key, w.window): v for w, v in view.all()} == {
            (k, window(s)): v for (k, s), v in entries.items()
        }
        for (k, start), v in entries.items():
            assert view.get(k, window(start)) == v
            assert view.get_windowed(Windowed(k, window(start))).value == v
            assert (window(start), (v, start)) in list(view.windows_of(k))
    rows = [view_class(WINDOW).changelog_row(k, v, B) for k, v in raw]
    rows = [r for r in rows if r is not None]
    assert sorted((_unbase64(r["key"]), _unbase64(r["value"])) for r in rows) == sorted(
        (k, v) for (k, _), v in entries.items()
    )


@settings(max_examples=40, deadline=None)
@given(st.dictionaries(blobs, st.lists(blobs, min_size=1, max_size=3), max_size=5))
def test_a_bytes_versioned_store_gives_back_its_bytes(versions):
    def put(view):
        for k, values in versions.items():
            for ts, v in enumerate(values):
                view.put(k, v, ts)

    store, raw = _committed(VERSIONED, put)
    for source in (store, _restored(VERSIONED, raw)):
        view = _view(VERSIONED, lambda s=source: s)
        for k, values in versions.items():
            last = len(values) - 1
            assert view.get(k) == VersionedRecord(values[-1], last, None)
            assert view.get(k, 0).value == values[0]
        assert {k: r.value for k, r in view.all()} == {k: vs[-1] for k, vs in versions.items()}


def test_a_bytes_store_refuses_what_is_not_bytes_naming_the_store():
    store = in_memory_store("task")
    txn = store.new_transaction()
    view = _view(TIMESTAMPED, lambda: txn)
    with pytest.raises(SerializationException, match=r"store 's' has value serde Serdes\.Bytes"):
        view.put(b"k", "text", 1)
    with pytest.raises(SerializationException, match=r"store 's' has key serde Serdes\.Bytes"):
        view.put("k", b"v", 1)
    assert list(txn.changes()) == []  # refused before anything is written


@given(blobs)
def test_changelog_text_shows_bytes_by_the_serde_and_refuses_them_without_it(data):
    assert _unbase64(changelog_text(data, B)) == data
    assert changelog_text(7, L) == "7" and changelog_text("é", S) == '"é"'
    with pytest.raises(SerializationException, match="JSON has no bytes"):
        changelog_text(data, J)


def test_a_json_store_given_a_bytes_key_fails_naming_node_store_and_what_to_do():
    b = StreamsBuilder()
    b.stream("in", Consumed.with_(B, B)).group_by_key(Grouped.with_(J, J)).count(
        Materialized.as_("counts").with_value_serde(L)
    )
    app = App("bytes", b.build(), {})
    task = Task(app.topology, 0, 0, in_memory_store("task"), app.config, app.name)
    task.process("in", 0, Record(b"\xff", b"v", 1_000))
    writes = task.transaction.changes_by_namespace()
    task.close()
    with pytest.raises(StreamsException) as info:
        state_rows(Rows(out_fields(store_kinds(app))), app, writes, 0, 0)
    text = str(info.value)
    assert "node KSTREAM-AGGREGATE-0000000001: store 'counts'" in text
    assert "Serdes.Json()" in text and "JSON has no bytes" in text
    assert "Grouped.with_(Serdes.Bytes()" in text and "before anything was written" in text


def test_the_test_driver_gives_bytes_to_reducers_joiners_and_store_readers():
    from lakestate import Produced
    from lakestate.testing.driver import TopologyTestDriver

    b = StreamsBuilder()
    blobs = b.stream("in", Consumed.with_(B, B))
    blobs.group_by_key(Grouped.with_(B, B)).reduce(
        lambda agg, v: agg + v, Materialized.as_("concat")
    ).to_stream().to("concat", Produced.with_(B, B))
    table = b.table("labels", Consumed.with_(B, B), Materialized.as_("labels"))
    blobs.join(table, lambda v, label: label + v).to("joined", Produced.with_(B, B))
    labels = b.global_table("glabels", consumed=Consumed.with_(B, B))
    blobs.join(labels, lambda k, v: k, lambda v, label: label + v).to(
        "gjoined", Produced.with_(B, B)
    )
    with TopologyTestDriver(b.build()) as driver:
        for topic in ("labels", "glabels"):
            driver.create_input_topic(topic).pipe_input(b"\xff", b"L:")
        inputs = driver.create_input_topic("in")
        inputs.pipe_input(b"\xff", b"\x00")
        inputs.pipe_input(b"\xff", b"\x80")
        inputs.pipe_input(b"", b"")
        assert driver.create_output_topic("concat").read_key_values_to_list() == [
            (b"\xff", b"\x00"),
            (b"\xff", b"\x00\x80"),
            (b"", b""),
        ]
        joined = [(b"\xff", b"L:\x00"), (b"\xff", b"L:\x80")]
        assert driver.create_output_topic("joined").read_key_values_to_list() == joined
        assert driver.create_output_topic("gjoined").read_key_values_to_list() == joined
        store = driver.get_key_value_store("concat")
        assert dict(store.all()) == {b"": b"", b"\xff": b"\x00\x80"}


@pytest.mark.parametrize("empty, longer", [(b"", b"\x00"), (b"", b"\x00\x01"), ("", "\x00")])
def test_a_key_whose_encoding_another_key_extends_sees_only_its_own_entries(empty, longer):
    # state.keys escapes 0x00 as 0x00 0xff, so b"" encodes as a prefix of b"\x00"'s
    # encoding: a window's or a version's range scan of b"" also meets b"\x00"'s entries.
    store = in_memory_store("task")
    txn = store.new_transaction()
    serdes = TopicSerdes(B, B) if type(empty) is bytes else TopicSerdes(S, S)
    value = b"v" if type(empty) is bytes else "v"
    windows = open_view(NAME, "session", {}, lambda: txn, serdes)
    windows.put(longer, Window(5, 6), value, 6)
    assert list(windows.windows_of(empty)) == []
    assert windows.find_sessions(empty, 0, 10) == []
    windows.put(empty, Window(1, 2), value, 2)
    assert [w for w, _ in windows.windows_of(empty)] == [Window(1, 2)]
    assert [w for w, _ in windows.windows_of(longer)] == [Window(5, 6)]
    versions = open_view("v", VERSIONED, OPTIONS[VERSIONED], lambda: txn, serdes)
    versions.put(longer, value, 10)
    assert versions.get(empty) is None
    versions.put(empty, value, 3)  # its next version, if any, is its own: none
    assert versions.get(empty) == VersionedRecord(value, 3, None)
    assert versions.get(longer) == VersionedRecord(value, 10, None)


def test_removing_a_waiting_join_group_leaves_a_key_that_extends_its_encoding():
    store = in_memory_store("task")
    txn = store.new_transaction()
    waiting = open_view(NAME, "stream_join_waiting", {}, lambda: txn)
    waiting.add("", 5, True, 0, "a")
    waiting.add("\x00", 5, True, 1, "b")
    waiting.remove_group("", 5, True)
    assert [(key, value) for _, _, _, key, value in waiting.scan()] == [("\x00", "b")]


def test_every_store_kind_takes_the_key_serde_state_rows_passes():
    import inspect

    from lakestate.state.registry import STORE_KINDS

    for kind, view in STORE_KINDS.items():
        parameters = inspect.signature(view.changelog_row).parameters
        assert list(parameters)[:3] == ["raw_key", "raw_value", "key_serde"], kind
