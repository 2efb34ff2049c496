"""Foreign-key table joins of tables keyed by Bytes (issue 26, Kafka's KIP-213 wiring): the
subscription's primary key, both internal topics' keys and the subscription store's
``(foreign key, primary key)`` key carry bytes as they are. The store's prefix scan of one
foreign key returns its subscribers only, never those of a foreign key whose bytes extend
it (``b""`` and ``b"\\x00"``), after a commit and a restore too; its changelog shows each
key as Kafka's subscription store holds it (``CombinedKeySchema``: the foreign key's length,
its bytes, the primary key's bytes), base64 text that the SQL view turns into BINARY. A
join in the test driver over random updates gives each row its model's result."""

from __future__ import annotations

import base64
import json
import struct

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from lakestate import (
    Consumed,
    Materialized,
    Produced,
    Serdes,
    SerializationException,
    StreamsBuilder,
)
from lakestate.processors.fk_join import (
    PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE,
    Subscription,
)
from lakestate.processors.fk_keys import CombinedKeySerde, subscription_store_serdes
from lakestate.serdes import DEFAULT_SERDES, JSON
from lakestate.state.memory import in_memory_store
from lakestate.state.registry import open_view, view_class
from lakestate.testing.driver import TopologyTestDriver

B, S, L = Serdes.Bytes(), Serdes.String(), Serdes.Long()
TIMESTAMPED = "timestamped_key_value"
STORE = "subscriptions"

# Keys of a few bytes from an alphabet where one is often a prefix of another: b"", NUL,
# 0xff (never UTF-8), 0x80 (a stray continuation byte).
keys = st.binary(max_size=3).map(lambda b: bytes(b"\x00\x01\xff\x80"[x % 4] for x in b))


def _kafka_bytes(fk: bytes, pk: bytes) -> bytes:
    """Kafka's CombinedKeySchema.toBytes (read from kafka-streams 4.4's bytecode): the
    foreign key's serialized length as a 4-byte big-endian int, its bytes, the primary
    key's bytes."""
    return struct.pack(">i", len(fk)) + fk + pk


def test_the_combined_key_is_kafkas_layout():
    serde = CombinedKeySerde(B, S)
    assert serde.serialize((b"\x00\xff", "k1")) == b"\x00\x00\x00\x02\x00\xffk1"
    assert serde.serialize((b"", "")) == b"\x00\x00\x00\x00"
    assert CombinedKeySerde(S, L).serialize(("a", 1)) == b"\x00\x00\x00\x01a" + struct.pack(">q", 1)
    assert serde.to_json((b"", "é")) == base64.b64encode(b"\x00\x00\x00\x00\xc3\xa9").decode()
    with pytest.raises(SerializationException, match="takes bytes"):
        serde.serialize(("text", "k"))
    with pytest.raises(SerializationException, match="takes a str"):
        serde.serialize((b"", 5))
    with pytest.raises(SerializationException, match="hold no combined key"):
        serde.deserialize(b"\x00\x00\x00\x05ab")


@settings(max_examples=100, deadline=None)
@given(keys, keys)
@example(b"", b"")
@example(b"\xff\xfe", b"\x00")
def test_the_combined_key_round_trips(fk, pk):
    serde = CombinedKeySerde(B, B)
    assert serde.serialize((fk, pk)) == _kafka_bytes(fk, pk)
    assert serde.deserialize(serde.serialize((fk, pk))) == (fk, pk)
    assert serde.from_json(serde.to_json((fk, pk))) == (fk, pk)


def test_the_subscription_store_takes_kafkas_combined_key_only_for_bytes_keys():
    assert subscription_store_serdes(JSON, JSON) is DEFAULT_SERDES
    assert subscription_store_serdes(S, L) is DEFAULT_SERDES  # its key stays a JSON list
    for fk, pk in ((B, S), (S, B), (B, B)):
        serdes = subscription_store_serdes(fk, pk)
        assert serdes.key == CombinedKeySerde(fk, pk) and serdes.value == JSON
        # The layout records it by the name Kafka's store's key serde has: its view is BINARY.
        assert serdes.key.name == "Serdes.Bytes()"
    assert CombinedKeySerde(B, S) != CombinedKeySerde(S, B)
    assert hash(CombinedKeySerde(B, S)) == hash(CombinedKeySerde(B, S))


@given(keys, st.text(max_size=3))
def test_a_subscription_carries_a_bytes_primary_key_as_base64(pk, hash_text):
    sent = Subscription(hash_text, PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE, pk)
    wire = sent.encode(B)
    assert wire[2] == base64.b64encode(pk).decode()
    assert json.loads(json.dumps(wire)) == wire  # the topic's JSON value
    assert Subscription.decode(wire, B) == sent
    assert (
        Subscription.decode(Subscription("h", sent.instruction, "k").encode(), JSON).primary_key
        == "k"
    )


def _store_view(source, serdes):
    return open_view(STORE, TIMESTAMPED, {}, source, serdes)


def _model_scan(model: dict[tuple[bytes, bytes], str], fk: bytes) -> list:
    return sorted((pk, v) for (f, pk), v in model.items() if f == fk)


ops = st.lists(st.tuples(st.booleans(), keys, keys), max_size=25)


@settings(max_examples=150, deadline=None)
@given(ops, st.lists(keys, max_size=4))
@example([(True, b"", b"p"), (True, b"\x00", b"q"), (True, b"\x00\x00", b"r")], [b""])
@example([(True, b"\xff", b""), (True, b"\xff\x00", b""), (True, b"\xff\xff", b"")], [b"\xff"])
def test_a_prefix_scan_of_one_foreign_key_finds_its_subscribers_only(operations, probes):
    """Puts and deletes of (fk, pk) subscriptions, then a prefix scan per foreign key
    (every one used and a few more) against a dict: exactly the subscribers of that
    foreign key, in primary-key byte order; the same after a commit and after a restore
    from the changelog rows; each changelog key is Kafka's combined key."""
    serdes = subscription_store_serdes(B, B)
    store = in_memory_store("task")
    txn = store.new_transaction()
    view = _store_view(lambda: txn, serdes)
    model: dict[tuple[bytes, bytes], str] = {}
    for i, (put, fk, pk) in enumerate(operations):
        if put:
            view.put((fk, pk), f"h{i}", i)
            model[(fk, pk)] = f"h{i}"
        else:
            view.delete((fk, pk))
            model.pop((fk, pk), None)
    foreign_keys = {fk for fk, _ in model} | set(probes)

    def scan(v, fk):
        return [(pk, found.value) for (f, pk), found in v.prefix_scan((fk,))]

    for fk in foreign_keys:
        assert scan(view, fk) == _model_scan(model, fk)
    txn.commit()
    raw = list(store.iterate(STORE, None, None, False))
    restored = in_memory_store("restored")
    restoring = restored.new_transaction()
    view_class(TIMESTAMPED).restore_entries(restoring, STORE, raw)
    restoring.commit()
    for source in (store, restored):
        for fk in foreign_keys:
            assert scan(_store_view(lambda s=source: s, serdes), fk) == _model_scan(model, fk)
    rows = [view_class(TIMESTAMPED).changelog_row(k, v, serdes.key) for k, v in raw]
    shown = {base64.b64decode(json.loads(r["key"])): json.loads(r["value"]) for r in rows}
    assert shown == {_kafka_bytes(fk, pk): v for (fk, pk), v in model.items()}


def _joined(how: str, this_keys, other_keys, updates) -> dict:
    """The last result per primary key of a join of table "left" (keyed by ``this_keys``)
    with table "right" (keyed by ``other_keys``) in the test driver, record by record."""
    b = StreamsBuilder()
    left = b.table("left", Consumed.with_(this_keys, B))
    right = b.table("right", Consumed.with_(other_keys, B))
    join = left.left_join if how == "left" else left.join
    as_fk = _as(other_keys)

    def extract(v: bytes):
        return None if v[:1] == b"\x01" else as_fk(v[1:])  # a value b"\x01..." names none

    def joiner(v: bytes, r: bytes | None) -> bytes:
        assert type(v) is bytes and (r is None or type(r) is bytes)
        return (b"-" if r is None else r) + b"|" + v

    table = join(right, extract, joiner, materialized=Materialized.with_(this_keys, B))
    table.to_stream().to("out", Produced.with_(this_keys, B))
    results = {}
    with TopologyTestDriver(b.build()) as driver:
        topics = {side: driver.create_input_topic(side) for side in ("left", "right")}
        out = driver.create_output_topic("out")
        as_pk = _as(this_keys)
        for ts, (side, key, value) in enumerate(updates):
            topics[side].pipe_input(as_pk(key) if side == "left" else as_fk(key), value, ts)
            results.update(out.read_key_values_to_list())
    return results


def _as(serde):
    """A key of bytes as a table keyed by ``serde`` has it (a String key: each byte a
    character, so b"" and b"\\x00" stay "" and "\\x00")."""
    return (lambda k: k) if serde == B else (lambda k: k.decode("latin-1"))


def _expected(how: str, this_keys, other_keys, updates) -> dict:
    lefts: dict[bytes, bytes] = {}
    rights: dict[bytes, bytes] = {}
    for side, key, value in updates:
        table = lefts if side == "left" else rights
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value
    expected = {}
    for key, value in lefts.items():
        fk = None if value[:1] == b"\x01" else value[1:]
        found = None if fk is None else rights.get(fk)
        if found is not None or how == "left":
            expected[_as(this_keys)(key)] = (b"-" if found is None else found) + b"|" + value
    return expected


updates = st.lists(
    st.tuples(
        st.sampled_from(["left", "right"]),
        keys,
        st.none() | st.builds(lambda k: b"\x00" + k, keys) | st.just(b"\x01"),
    ),
    max_size=30,
)


@pytest.mark.parametrize("how", ["inner", "left"])
@pytest.mark.parametrize("this_keys,other_keys", [(B, B), (B, S), (S, B)], ids=["BB", "BS", "SB"])
@settings(max_examples=40, deadline=None)
@given(updates)
def test_a_join_of_bytes_keyed_tables_gives_each_row_its_models_result(
    how, this_keys, other_keys, changes
):
    """Rows change their foreign key (b"", NUL-led, 0xff: one often a prefix of another),
    lose it (b"\\x01") and are deleted; foreign rows change and are deleted. Each primary
    key's last output is its model's join (a deleted or unmatched row: none, or a
    tombstone)."""
    results = _joined(how, this_keys, other_keys, changes)
    live = {k: v for k, v in results.items() if v is not None}
    assert live == _expected(how, this_keys, other_keys, changes)
