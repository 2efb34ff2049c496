"""Which topics an app partitions by its keys' serialized bytes (``key_serdes_of``), and
``output_rows`` placing records there: an app on Kafka hashes the bytes of its Kafka sinks'
and internal topics' key serdes (Kafka Streams' default partitioner for every topic it
writes); an app on log tables hashes every key's JSON text, the bytes a log table holds."""

from __future__ import annotations

import lakestate as ls
from lakestate.io.partitioner import murmur2
from lakestate.processors.output import outputs_of
from lakestate.records import Record
from lakestate.runtime.batch_rows import Rows, key_serdes_of, output_rows
from lakestate.serdes import TopicSerdes

S = ls.Serdes.String()


def _app(config: dict[str, str]) -> ls.App:
    b = ls.StreamsBuilder()
    customers = b.table("customers", ls.Consumed.with_(S, S))
    orders = b.stream("orders", ls.Consumed.with_(S, ls.Serdes.Json()))
    (
        orders.select_key(lambda k, v: v["customer"])
        .repartition(ls.Repartitioned.as_("by-customer").with_key_serde(S))
        .join(customers, lambda order, name: name)
        .to("joined", ls.Produced.with_(S, S))
    )
    orders.group_by(lambda k, v: v["customer"]).count().to_stream().to("counts")
    orders.to_table().join(customers, lambda v: v["customer"], lambda o, c: c).to_stream().to(
        "fk", ls.Produced.with_(ls.Serdes.Long(), S)
    )
    return ls.App("copart", b.build(), config)


def test_an_app_on_kafka_hashes_its_sinks_and_internal_topics_by_their_key_serdes():
    found = key_serdes_of(_app({"bootstrap.servers": "localhost:1"}))
    # Json-keyed topics ("counts" and the unnamed group_by's repartition topic) hash JSON text.
    assert {name: serde.name for name, serde in found.items()} == {
        "joined": "Serdes.String()",
        "fk": "Serdes.Long()",
        "copart-by-customer-repartition": "Serdes.String()",
        "copart-KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-0000000018-topic": "Serdes.String()",
        "copart-KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-0000000024-topic": "Serdes.String()",
    }


def test_an_app_on_log_tables_hashes_every_key_by_its_json_text():
    assert key_serdes_of(_app({})) == {}


def test_output_rows_puts_a_string_key_where_kafka_puts_its_bytes():
    keys = [f"c{i}" for i in range(12)]
    outputs = outputs_of("t", [Record(k, "v", 0) for k in keys], TopicSerdes(S, S))
    by_bytes, by_text = Rows(), Rows()
    output_rows(by_bytes, list(outputs), 0, 0, {"t": 2}, {"t": S})
    output_rows(by_text, list(outputs), 0, 0, {"t": 2})
    bytes_partitions = by_bytes.table().column("partition").to_pylist()
    text_partitions = by_text.table().column("partition").to_pylist()
    assert bytes_partitions == [(murmur2(k.encode()) & 0x7FFFFFFF) % 2 for k in keys]
    assert text_partitions == [(murmur2(f'"{k}"'.encode()) & 0x7FFFFFFF) % 2 for k in keys]
    assert bytes_partitions != text_partitions
