"""Foreign-key table joins over Bytes values (issue 26): the subscription's hash of this
table's value is taken of its serialized bytes (Kafka hashes the value its serde
serializes), and a foreign value travels the response topic in its serde's JSON form
(base64) and reaches the joiner as the bytes it was. Tables keyed by Bytes:
test_bytes_fk_keys.py."""

from __future__ import annotations

import hashlib

from lakestate import (
    Consumed,
    Materialized,
    Produced,
    Serdes,
    StreamsBuilder,
)
from lakestate.processors.fk_join import value_hash
from lakestate.testing.driver import TopologyTestDriver

B, S = Serdes.Bytes(), Serdes.String()


def test_the_value_hash_is_of_the_serialized_value():
    assert value_hash(b"\xff\x00", B) == hashlib.blake2b(b"\xff\x00", digest_size=16).hexdigest()
    assert value_hash(b"", B) != value_hash(b"\x00", B)
    assert value_hash(None, B) is None
    # Json: the canonical JSON text, whatever the dict's key order.
    assert value_hash({"a": 1, "b": 2}) == value_hash({"b": 2, "a": 1})


def _run(how: str) -> list:
    b = StreamsBuilder()
    left = b.table("left", Consumed.with_(S, B))
    right = b.table("right", Consumed.with_(S, B))
    join = left.left_join if how == "left" else left.join

    def joiner(v: bytes, r: bytes | None) -> bytes:
        assert type(v) is bytes and (r is None or type(r) is bytes)
        return (b"-" if r is None else r) + b":" + v

    table = join(right, lambda v: v[:1].hex(), joiner, materialized=Materialized.with_(S, B))
    table.to_stream().to("out", Produced.with_(S, B))
    with TopologyTestDriver(b.build()) as driver:
        rights, lefts = driver.create_input_topic("right"), driver.create_input_topic("left")
        rights.pipe_input("ff", b"\x80", 0)
        lefts.pipe_input("a", b"\xff\x01", 1)  # foreign key "ff"
        lefts.pipe_input("b", b"\x00", 2)  # foreign key "00": no row
        rights.pipe_input("ff", b"", 3)  # empty bytes: a value, not a delete
        lefts.pipe_input("a", b"\xff\x02", 4)  # a new value, the same foreign key
        rights.pipe_input("00", b"\xfe", 5)
        return driver.create_output_topic("out").read_key_values_to_list()


def test_an_inner_foreign_key_join_of_bytes_values_gives_the_joiner_bytes():
    assert _run("inner") == [
        ("a", b"\x80:\xff\x01"),
        ("a", b":\xff\x01"),
        ("a", b":\xff\x02"),
        ("b", b"\xfe:\x00"),
    ]


def test_a_left_foreign_key_join_of_bytes_values_gives_the_joiner_bytes_or_none():
    assert _run("left") == [
        ("a", b"\x80:\xff\x01"),
        ("b", b"-:\x00"),
        ("a", b":\xff\x01"),
        ("a", b":\xff\x02"),
        ("b", b"\xfe:\x00"),
    ]
