"""Serdes (lakestate/serdes.py): Kafka's byte layouts (org.apache.kafka.common.serialization)
for known values, nulls, Kafka's size errors, the JSON form a log table holds, a hypothesis
round trip; Consumed/Produced in the DSL; and the engine's per-task decoding
(runtime/record_decoding.py) of a log table's JSON form and of a Kafka topic's raw bytes,
a poison record going to the deserialization handler with its raw bytes."""

from __future__ import annotations

import base64
import json
import math
import struct

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lakestate import (
    App,
    Consumed,
    Produced,
    Serdes,
    SerializationException,
    StreamsBuilder,
    StreamsException,
    TopologyException,
)
from lakestate.processors.task import Task
from lakestate.runtime import task_executor
from lakestate.state.memory import in_memory_store

# Known values in Kafka's layouts (what LongSerializer & co. write, byte for byte).
KNOWN = [
    (Serdes.Long(), 5, b"\x00\x00\x00\x00\x00\x00\x00\x05"),
    (Serdes.Long(), -1, b"\xff" * 8),
    (Serdes.Long(), -(1 << 63), b"\x80" + b"\x00" * 7),
    (Serdes.Long(), (1 << 63) - 1, b"\x7f" + b"\xff" * 7),
    (Serdes.Integer(), 258, b"\x00\x00\x01\x02"),
    (Serdes.Integer(), -2, b"\xff\xff\xff\xfe"),
    (Serdes.Double(), 1.5, b"\x3f\xf8\x00\x00\x00\x00\x00\x00"),
    (Serdes.Double(), -0.0, b"\x80" + b"\x00" * 7),
    (Serdes.String(), "c1", b"c1"),
    (Serdes.String(), "é€", "é€".encode()),
    (Serdes.Bytes(), b"\x00\xff", b"\x00\xff"),
    (Serdes.Json(), {"b": 1, "a": [1, "x"]}, b'{"a":[1,"x"],"b":1}'),
    (Serdes.Json(), "c1", b'"c1"'),
]
ALL = [Serdes.Long(), Serdes.Integer(), Serdes.Double(), Serdes.String(), Serdes.Bytes()]


@pytest.mark.parametrize(("serde", "value", "data"), KNOWN, ids=lambda x: repr(x)[:30])
def test_kafka_byte_layout_of_known_values(serde, value, data):
    assert serde.serialize(value) == data
    assert serde.deserialize(data) == value


@pytest.mark.parametrize("serde", [*ALL, Serdes.Json()], ids=repr)
def test_null_is_null_both_ways(serde):
    assert serde.serialize(None) is None
    assert serde.deserialize(None) is None
    assert serde.to_json(None) is None
    assert serde.from_json(None) is None


@pytest.mark.parametrize(
    ("serde", "message"),
    [
        (Serdes.Long(), "Size of data received by LongDeserializer is not 8"),
        (Serdes.Integer(), "Size of data received by IntegerDeserializer is not 4"),
        (Serdes.Double(), "Size of data received by DoubleDeserializer is not 8"),
    ],
    ids=repr,
)
def test_wrong_sizes_fail_with_kafkas_message(serde, message):
    for data in (b"", b"\x01\x02\x03", b"\x00" * 9):
        with pytest.raises(SerializationException, match=message):
            serde.deserialize(data)


def test_string_decodes_malformed_utf8_to_replacement_characters_as_java_does():
    assert Serdes.String().deserialize(b"a\xffb") == "a\ufffdb"


def test_double_nan_has_java_canonical_bits_but_no_json_form():
    assert Serdes.Double().serialize(math.nan) == struct.pack(">q", 0x7FF8000000000000)
    with pytest.raises(SerializationException, match="no JSON form"):
        Serdes.Double().to_json(math.nan)


@pytest.mark.parametrize(
    ("serde", "bad"),
    [
        (Serdes.Long(), "5"),
        (Serdes.Long(), True),
        (Serdes.Long(), 1 << 63),
        (Serdes.Integer(), 1 << 31),
        (Serdes.Double(), "1.5"),
        (Serdes.String(), 5),
        (Serdes.Bytes(), "ab"),
    ],
    ids=repr,
)
def test_a_value_of_the_wrong_type_is_refused_naming_the_serde(serde, bad):
    with pytest.raises(SerializationException, match=r"Serdes\.\w+\(\)"):
        serde.serialize(bad)
    with pytest.raises(SerializationException):
        serde.to_json(bad)


def test_json_forms_a_log_table_holds():
    assert json.dumps(Serdes.Long().to_json(5)) == "5"
    assert json.dumps(Serdes.String().to_json("c1")) == '"c1"'
    assert Serdes.Double().to_json(2) == 2.0
    assert Serdes.Bytes().to_json(b"\x00\xff") == "AP8="
    assert Serdes.Bytes().from_json("AP8=") == b"\x00\xff"
    with pytest.raises(SerializationException, match="not base64"):
        Serdes.Bytes().from_json("not base64!")


VALUES = {
    "Long": st.integers(-(1 << 63), (1 << 63) - 1),
    "Integer": st.integers(-(1 << 31), (1 << 31) - 1),
    "Double": st.floats(allow_nan=False),
    "String": st.text(),
    "Bytes": st.binary(),
    "Json": st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(),
        lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
        max_leaves=10,
    ),
}


@settings(max_examples=300, deadline=None, database=None)
@given(data=st.data(), name=st.sampled_from(sorted(VALUES)))
def test_round_trip_through_bytes_and_through_the_json_form(data, name):
    serde = getattr(Serdes, name)()
    value = data.draw(VALUES[name])
    assert serde.deserialize(serde.serialize(value)) == value
    if not (name == "Double" and math.isinf(value)):
        text = json.dumps(serde.to_json(value))
        assert serde.from_json(json.loads(text)) == value


# -- the DSL --------------------------------------------------------------------------------


def test_consumed_and_produced_set_a_topics_serdes():
    b = StreamsBuilder()
    b.stream("in", Consumed.with_(Serdes.Long(), Serdes.String())).to(
        "out", Produced.with_(Serdes.Long()).with_value_serde(Serdes.Double())
    )
    b.table("t", Consumed.with_(Serdes.String()))
    topology = b.build()
    assert (topology.serdes_of("in").key, topology.serdes_of("in").value) == (
        Serdes.Long(),
        Serdes.String(),
    )
    assert topology.serdes_of("out").value == Serdes.Double()
    assert topology.serdes_of("t").value == Serdes.Json()
    assert topology.serdes_of("other").is_json


def test_bad_serde_arguments_are_refused():
    with pytest.raises(TopologyException, match="Consumed.with_ key_serde must be a serde"):
        Consumed.with_("Long")
    with pytest.raises(TopologyException, match="expected a Produced"):
        StreamsBuilder().stream("in").to("out", Consumed.with_())
    b = StreamsBuilder()
    b.stream("in", Consumed.with_(Serdes.Long()))
    b.stream("x").to("in", Produced.with_(Serdes.String()))
    with pytest.raises(StreamsException, match="different serdes"):
        b.build().serdes_of("in")


# -- the engine's decoding ------------------------------------------------------------------


def _app(config: dict, value_serde=None, produced=None) -> App:
    b = StreamsBuilder()
    s = b.stream("in", Consumed.with_(Serdes.Long(), value_serde or Serdes.String()))
    s.map_values(lambda v: v + "!" if isinstance(v, str) else v).to("out", produced)
    return App("app", b.build(), {"application.id": "app", **config})


def _run(app: App, keys: list, values: list) -> Task:
    task = Task(app.topology, 0, 0, in_memory_store("t"), app.config, app.name)
    n = len(keys)
    columns = {
        "input_index": [0] * n,
        "topic": ["in"] * n,
        "partition": [0] * n,
        "offset": list(range(n)),
        "timestamp": [1] * n,
        "key": keys,
        "value": values,
        "headers": [None] * n,
    }
    updates = pa.table({c: pa.array([], pa.string()) for c in task_executor.INPUT_COLUMNS[2:]})
    task_executor._process_all(task, app, {}, updates, columns)
    return task


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


KAFKA = {
    "bootstrap.servers": "localhost:1",
    "deserialization.exception.handler": "log_and_continue",
}


def test_a_kafka_topics_raw_bytes_are_deserialized_and_a_poison_record_is_a_dead_letter(caplog):
    app = _app(KAFKA, produced=Produced.with_(Serdes.Long(), Serdes.String()))
    long5 = struct.pack(">q", 5)
    task = _run(app, [_b64(long5), _b64(b"\x01\x02")], [_b64(b"c1"), _b64(b"x")])
    out = task.pending_output_text()
    assert [(o.topic, o.record.key, o.record.value) for o in out if o.topic == "out"] == [
        ("out", 5, "c1!")
    ]
    assert [(o.key_text, o.value_text) for o in out if o.topic == "out"] == [("5", '"c1!"')]
    (letter,) = [o for o in out if o.topic == "app-dead-letters"]
    # The raw bytes, as base64 JSON strings, and the error naming the serde.
    assert (letter.key_text, letter.value_text) == (json.dumps(_b64(b"\x01\x02")), '"eA=="')
    headers = json.loads(letter.headers_text)
    assert headers["__streams.errors.raw.encoding"] == "base64"
    assert headers["__streams.errors.offset"] == "1"
    assert (
        headers["__streams.errors.message"] == "Size of data received by LongDeserializer is not 8"
    )
    assert headers["__streams.errors.exception"].endswith("SerializationException")
    # The records' messages, not caplog.text: on CI the captured text came out through
    # PySpark's JSONFormatter (set up by an earlier test in the worker), escaping the quotes.
    assert (
        "offset 1, key bytes (base64) '\"AQI=\"'): key could not be deserialized by "
        "Serdes.Long()" in "\n".join(r.getMessage() for r in caplog.records)
    )


def test_log_and_fail_names_topic_partition_offset_and_serde():
    app = _app({"bootstrap.servers": "localhost:1"})
    with pytest.raises(SerializationException) as err:
        _run(app, [_b64(struct.pack(">q", 1)), _b64(b"\x00")], [_b64(b"a"), _b64(b"b")])
    message = str(err.value)
    for part in ("'in'", "partition 0", "offset 1", "by Serdes.Long()", "log_and_fail"):
        assert part in message, message


def test_a_log_table_holds_the_json_form_which_the_serdes_check():
    app = _app({"deserialization.exception.handler": "log_and_continue"})
    task = _run(app, ["5", '"c1"', "7"], ['"a"', '"b"', "3"])
    out = task.pending_output_text()
    assert [(o.record.key, o.record.value) for o in out if o.topic == "out"] == [(5, "a!")]
    letters = [o for o in out if o.topic == "app-dead-letters"]
    # As read: JSON text, no raw bytes.
    assert [(o.key_text, o.value_text) for o in letters] == [('"c1"', '"b"'), ("7", "3")]
    messages = [json.loads(o.headers_text)["__streams.errors.message"] for o in letters]
    assert messages[0] == (
        "Serdes.Long() cannot read a str ('c1'): it takes an int of 64 bits "
        "(the JSON value of a log table)"
    )
    assert messages[1].startswith("Serdes.String() cannot read an int (3): it takes a str")
    assert "__streams.errors.raw.encoding" not in json.loads(letters[0].headers_text)


def test_a_sink_with_serdes_refuses_a_value_of_another_type():
    app = _app(
        {}, value_serde=Serdes.Long(), produced=Produced.with_(Serdes.Long(), Serdes.String())
    )
    with pytest.raises(SerializationException, match=r"Serdes\.String\(\) cannot serialize an int"):
        _run(app, ["5"], ["3"])


# -- the test driver ------------------------------------------------------------------------


def test_the_driver_takes_input_through_the_sources_serdes_and_checks_the_sinks():
    from lakestate.testing.driver import TopologyTestDriver

    b = StreamsBuilder()
    counts = (
        b.stream("in", Consumed.with_(Serdes.Integer(), Serdes.Double()))
        .group_by_key()
        .aggregate(lambda: 0.0, lambda k, v, agg: agg + v)
    )
    counts.to_stream().to("sums", Produced.with_(Serdes.Integer(), Serdes.Double()))
    counts.to_stream().to("as-text", Produced.with_(Serdes.Integer(), Serdes.String()))
    with TopologyTestDriver(b.build(), {"application.id": "app"}) as driver:
        source = driver.create_input_topic("in")
        with pytest.raises(SerializationException, match=r"Serdes\.Integer\(\)"):
            source.pipe_input(1 << 31, 1.0)  # Kafka's TestInputTopic fails in its serializer
        with pytest.raises(SerializationException, match=r"Serdes\.String\(\) cannot serialize"):
            source.pipe_input(1, 2)  # the int 2 arrives as the Double 2.0: a float to String
        assert driver.create_output_topic("sums").read_key_values_to_list() == []

    b = StreamsBuilder()
    b.stream("in", Consumed.with_(Serdes.Integer(), Serdes.Double())).group_by_key().aggregate(
        lambda: 0.0, lambda k, v, agg: agg + v
    ).to_stream().to("sums", Produced.with_(Serdes.Integer(), Serdes.Double()))
    with TopologyTestDriver(b.build(), {"application.id": "app"}) as driver:
        driver.create_input_topic("in").pipe_key_value_list([(1, 2), (1, 0.5), (None, 1.0)])
        sums = driver.create_output_topic("sums").read_key_values_to_list()
        assert sums == [(1, 2.0), (1, 2.5)] and type(sums[0][1]) is float


def test_producers_records_to_a_topic_with_a_key_serde_go_where_kafka_would_put_them():
    from lakestate.io.partitioner import murmur2, partition_for
    from lakestate.io.topic_records import normalize_records

    records = [(k, "v") for k in (3, -7, 1 << 40, 0)]
    by_bytes = normalize_records(records, 2, key_serde=Serdes.Long())
    assert [p for p, *_ in by_bytes] == [
        (murmur2(struct.pack(">q", k)) & 0x7FFFFFFF) % 2 for k, _ in records
    ]
    assert [p for p, *_ in by_bytes] != [partition_for(k, 2) for k, _ in records]
    with pytest.raises(ValueError, match=r"record 0: key: Serdes.Long\(\) cannot read a str"):
        normalize_records([("x", 1)], 2, key_serde=Serdes.Long())
