"""Serdes of the Processor API's store builders (Kafka's ``Stores.keyValueStoreBuilder(
supplier, keySerde, valueSerde)`` and the timestamped, versioned and window ones): the store
is the one ``Materialized.with_(key_serde, value_serde)`` gives a DSL operator: a put its
serdes cannot hold fails with the DSL store's error before anything is written, a Bytes
store gives back the bytes it was given (in byte order of its keys), and None is Json."""

from __future__ import annotations

from datetime import timedelta

import lakestate as ls
import pytest
from lakestate.errors import SerializationException, TopologyException
from lakestate.read.describe import describe_app
from lakestate.serdes import DEFAULT_SERDES, TopicSerdes
from lakestate.testing import TopologyTestDriver
from lakestate.warehouse import Warehouse

S, L, B, J = ls.Serdes.String(), ls.Serdes.Long(), ls.Serdes.Bytes(), ls.Serdes.Json()
St = ls.Stores
TEN = timedelta(milliseconds=10)


class _Puts(ls.Processor):
    """Puts each record's value under its key in every store it is given (a window store:
    in window [0, 10)); the value ``"bad"`` is put as a str, whatever the store."""

    def init(self, context):
        self.stores = [context.get_state_store(n) for n in ("kv", "ts", "versions", "windows")]

    def process(self, record):
        kv, ts, versions, windows = self.stores
        kv.put(record.key, record.value)
        ts.put(record.key, record.value, record.timestamp)
        versions.put(record.key, record.value, record.timestamp)
        windows.put(record.key, ls.Window(0, 10), record.value, record.timestamp)


def _every_store(key_serde, value_serde) -> ls.Topology:
    b = ls.StreamsBuilder()
    b.add_state_store(
        St.key_value_store_builder(St.persistent_key_value_store("kv"), key_serde, value_serde)
    )
    b.add_state_store(
        St.timestamped_key_value_store_builder(
            St.persistent_timestamped_key_value_store("ts"), key_serde, value_serde
        )
    )
    versions = St.persistent_versioned_key_value_store("versions", timedelta(seconds=1))
    b.add_state_store(St.versioned_key_value_store_builder(versions, key_serde, value_serde))
    windows = St.persistent_window_store("windows", TEN, TEN, False)
    b.add_state_store(St.window_store_builder(windows, key_serde, value_serde))
    b.stream("in").process(_Puts, "kv", "ts", "versions", "windows")
    return b.build()


def test_builders_give_their_stores_the_materialized_serdes():
    topology = _every_store(S, L)
    for name in ("kv", "ts", "versions", "windows"):
        assert topology.stores[name].serdes == TopicSerdes(S, L)
    # None (Kafka's null): the default, Json, as a Materialized without serdes.
    b = ls.StreamsBuilder()
    b.add_state_store(St.key_value_store_builder(St.persistent_key_value_store("kv")))
    b.add_state_store(St.window_store_builder(St.persistent_window_store("w", TEN, TEN, False), S))
    assert b._graph.stores["kv"].serdes == DEFAULT_SERDES
    assert b._graph.stores["w"].serdes == TopicSerdes(S, J)


@pytest.mark.parametrize("name", ["kv", "ts", "versions", "windows"])
def test_a_value_the_serde_cannot_hold_fails_as_in_a_dsl_store(name):
    with TopologyTestDriver(_every_store(S, L)) as driver:
        topic = driver.create_input_topic("in")
        topic.pipe_input("a", 1, 1)
        with pytest.raises(SerializationException) as err:
            topic.pipe_input("b", "bad", 2)
        # The first store the processor writes fails; the record wrote nothing anywhere.
        assert "store 'kv' has value serde Serdes.Long() and cannot hold this value" in str(
            err.value
        )
        assert "cannot serialize a str ('bad')" in str(err.value)
        store = driver.get_state_store(name)
        if name == "windows":
            assert [(w.key, v) for w, v in store.all()] == [("a", 1)]
        elif name == "versions":
            assert store.get("a").value == 1 and store.get("b") is None
        else:
            assert list(store.all()) == [("a", 1)]


def test_each_store_checks_by_its_own_serdes():
    """A window store's key serde is its windows' keys' (a String key, not a Windowed)."""

    class WindowsOnly(_Puts):
        def init(self, context):
            self.windows = context.get_state_store("windows")

        def process(self, record):
            self.windows.put(record.key, ls.Window(0, 10), record.value, record.timestamp)

    b = ls.StreamsBuilder()
    supplier = St.persistent_window_store("windows", TEN, TEN, False)
    b.add_state_store(St.window_store_builder(supplier, S, L))
    b.stream("in").process(WindowsOnly, "windows")
    with TopologyTestDriver(b.build()) as driver:
        topic = driver.create_input_topic("in")
        topic.pipe_input("a", 3, 1)
        assert driver.get_state_store("windows").fetch("a", 0, 0) is not None
        assert list(driver.get_state_store("windows").fetch("a", 0, 0)) == [(0, 3)]
        with pytest.raises(SerializationException, match="store 'windows' has key serde"):
            topic.pipe_input(7, 3, 2)  # an int key for a String key serde


def test_a_key_the_key_serde_cannot_hold_fails_before_the_write():
    with TopologyTestDriver(_every_store(L, J)) as driver:
        topic = driver.create_input_topic("in")
        topic.pipe_input(5, {"x": 1}, 1)
        with pytest.raises(SerializationException, match="store 'kv' has key serde Serdes.Long"):
            topic.pipe_input("five", {"x": 2}, 2)
        assert list(driver.get_state_store("kv").all()) == [(5, {"x": 1})]


def test_a_bytes_store_gives_back_bytes_in_byte_order():
    keys = [b"\xff\xfe", b"", b"\x00", b"k", b"\x80abc"]
    with TopologyTestDriver(_every_store(B, B)) as driver:
        topic = driver.create_input_topic("in")
        for i, key in enumerate(keys):
            topic.pipe_input(key, bytes([i, 255]), i)
        expected = sorted((k, bytes([i, 255])) for i, k in enumerate(keys))
        kv = driver.get_state_store("kv")
        assert list(kv.all()) == expected  # Kafka's Bytes store: unsigned byte order
        assert list(kv.range(b"\x00", b"k")) == expected[1:3]
        assert kv.get(b"\x80abc") == bytes([4, 255])
        assert driver.get_state_store("ts").get_with_timestamp(b"k") == (bytes([3, 255]), 3)
        assert driver.get_state_store("versions").get(b"").value == bytes([1, 255])
        windows = driver.get_state_store("windows")
        assert [(w.key, v) for w, v in windows.all()] == expected
        with pytest.raises(SerializationException, match="value serde Serdes.Bytes"):
            topic.pipe_input(b"k", "text", 9)


def test_processor_sees_its_bytes_store_values_as_bytes():
    """A processor appending to a Bytes value: a base64 str given back would fail it."""

    class Appends(ls.Processor):
        def init(self, context):
            self.context, self.tails = context, context.get_state_store("tails")

        def process(self, record):
            tail = ((self.tails.get(record.key) or b"") + record.value)[-4:]
            self.tails.put(record.key, tail)
            self.context.forward(record.with_value(tail))

    b = ls.StreamsBuilder()
    b.add_state_store(St.key_value_store_builder(St.persistent_key_value_store("tails"), B, B))
    b.stream("in", ls.Consumed.with_(B, B)).process(Appends, "tails").to(
        "out", ls.Produced.with_(B, B)
    )
    with TopologyTestDriver(b.build()) as driver:
        topic = driver.create_input_topic("in")
        for part in (b"ab", b"\x00\xff", b"cd"):
            topic.pipe_input(b"k", part, 1)
        out = driver.create_output_topic("out").read_values_to_list()
        assert out == [b"ab", b"ab\x00\xff", b"\x00\xffcd"]
        assert driver.get_state_store("tails").get(b"k") == b"\x00\xffcd"


def test_builders_check_their_serdes():
    with pytest.raises(TopologyException, match="Stores.key_value_store_builder value_serde"):
        St.key_value_store_builder(St.persistent_key_value_store("kv"), S, "Long")
    with pytest.raises(TopologyException, match="Stores.window_store_builder key_serde"):
        St.window_store_builder(St.persistent_window_store("w", TEN, TEN, False), 5)
    windowed = ls.WindowedSerdes.time_windowed_serde_from(S, TEN)
    with pytest.raises(TopologyException, match="not a windowed serde"):
        St.window_store_builder(St.persistent_window_store("w", TEN, TEN, False), windowed)


def test_describe_names_a_builder_store_s_serdes(tmp_path):
    app = ls.App("described", _every_store(S, B), {})
    stores = {s["store"]: s for s in describe_app(Warehouse(tmp_path), app)["stores"]}
    assert (stores["kv"]["key_serde"], stores["kv"]["value_serde"]) == (
        "Serdes.String()",
        "Serdes.Bytes()",
    )
