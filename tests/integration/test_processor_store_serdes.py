"""Processor API stores given serdes in the engine (tests/integration/apps/
processor_serdes.py), in process and in Spark: after a run, and after a second run that
restored every store from its changelog with the local state wiped, the state views show a
String key as text, a Long as BIGINT and Bytes as BINARY, equal to a model's (DuckDB,
``lakestate sql``, Spark SQL); the changelogs stay JSON text. A value its serde cannot
hold fails the run with the DSL store's error before the batch is staged."""

from __future__ import annotations

import json
import shutil
from collections import Counter, defaultdict

import pytest
from engine_helpers import APPS
from lakestate import run_app
from lakestate.cli.main import main
from lakestate.errors import StreamsException
from lakestate.io import topics
from lakestate.read import duckdb_engine, spark_engine
from lakestate.warehouse import Warehouse

pytestmark = pytest.mark.integration

TRANSPORTS = {"in_process": 10**9, "spark": 0}  # inprocess_max_records per transport


def _events(n: int, start: int) -> list[dict]:
    return [
        {"key": f"u{i % 4}", "value": {"amount": 250 + i}, "timestamp": 1_000 + start + 7 * i}
        for i in range(n)
    ]


def _model(events: list[dict]) -> tuple[dict, dict, dict]:
    counts = Counter(e["key"] for e in events)
    tails: dict[bytes, bytes] = defaultdict(bytes)
    windows: Counter = Counter()
    for e in events:
        raw = e["key"].encode() + b"\xff"
        tails[raw] = (tails[raw] + bytes([e["value"]["amount"] % 256]))[-4:]
        windows[(e["key"], e["timestamp"] - e["timestamp"] % 100)] += 1
    return dict(counts), dict(tails), dict(windows)


def _run(wh: Warehouse, state, limit: int, app: str) -> None:
    run_app(
        app,
        warehouse=wh.root,
        state_dir=str(state),
        max_records=25,
        until_caught_up=True,
        inprocess_max_records=limit,
        say=lambda _: None,
    )


def _check_duckdb(wh: Warehouse, events: list[dict]) -> None:
    counts, tails, windows = _model(events)
    sql = lambda q: [tuple(r) for r in duckdb_engine.sql(wh, q).rows]  # noqa: E731
    assert sql("SELECT key, value FROM processor_serdes__counts ORDER BY key") == sorted(
        counts.items()
    )
    assert set(sql("SELECT typeof(key), typeof(value) FROM processor_serdes__counts")) == {
        ("VARCHAR", "BIGINT")
    }
    found = {bytes(k): bytes(v) for k, v in sql("SELECT key, value FROM processor_serdes__tails")}
    assert found == tails
    assert set(sql("SELECT typeof(key), typeof(value) FROM processor_serdes__tails")) == {
        ("BLOB", "BLOB")
    }
    rows = sql("SELECT key, window_start, value, typeof(value) FROM processor_serdes__windows")
    assert {(k, s): v for k, s, v, _ in rows} == windows
    assert {t for *_, t in rows} == {"BIGINT"}
    # The changelogs keep JSON text (a String key quoted, Bytes as base64).
    raw = sql("SELECT DISTINCT key FROM processor_serdes__counts__changelog ORDER BY key")
    assert [r[0] for r in raw] == [json.dumps(k) for k in sorted(counts)]


def _check_spark(spark, wh: Warehouse, events: list[dict]) -> None:
    counts, tails, _ = _model(events)
    frame = spark_engine.sql(spark, wh, "SELECT key, value FROM processor_serdes__counts")
    types = {f.name: f.dataType.simpleString() for f in frame.schema.fields}
    assert types == {"key": "string", "value": "bigint"}
    assert dict(frame.collect()) == counts
    frame = spark_engine.sql(spark, wh, "SELECT key, value FROM processor_serdes__tails")
    types = {f.name: f.dataType.simpleString() for f in frame.schema.fields}
    assert types == {"key": "binary", "value": "binary"}
    assert {bytes(k): bytes(v) for k, v in frame.collect()} == tails


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
def test_typed_processor_stores_survive_a_wiped_restore(request, tmp_path, capsys, transport):
    first, second = _events(40, 0), _events(30, 1_000)
    wh = Warehouse(tmp_path / "wh")
    topics.topic(wh, "events").create(2)
    topics.topic(wh, "events").append(first)
    app = str(APPS / "processor_serdes.py")
    _run(wh, tmp_path / "state", TRANSPORTS[transport], app)
    _check_duckdb(wh, first)
    # Wiped: the second run restores every store from its changelog and keeps appending
    # bytes to restored bytes and counting from restored numbers.
    shutil.rmtree(tmp_path / "state")
    topics.topic(wh, "events").append(second)
    _run(wh, tmp_path / "state", TRANSPORTS[transport], app)
    _check_duckdb(wh, first + second)
    if transport == "spark":
        _check_spark(request.getfixturevalue("spark"), wh, first + second)
    else:  # ``lakestate sql`` prints the String key as text
        capsys.readouterr()
        query = "SELECT key, value FROM processor_serdes__counts WHERE key = 'u1'"
        assert main(["sql", query, "--warehouse", wh.root]) == 0
        out = capsys.readouterr().out
        assert "u1" in out and '"u1"' not in out and "18" in out


WRONG_APP = """
import lakestate as ls


class Labels(ls.Processor):
    def init(self, context):
        self.store = context.get_state_store("labels")

    def process(self, record):
        self.store.put(record.key, "label")  # a str for a Long store


b = ls.StreamsBuilder()
b.add_state_store(
    ls.Stores.key_value_store_builder(
        ls.Stores.persistent_key_value_store("labels"), ls.Serdes.String(), ls.Serdes.Long()
    )
)
events = b.stream("events")
events.to("copied")
events.process(Labels, "labels")
app = ls.App("wrong_serde", b.build())
"""


def test_a_value_its_serde_cannot_hold_fails_before_the_batch_is_staged(tmp_path):
    wh = Warehouse(tmp_path / "wh")
    topics.topic(wh, "events").create(1)
    topics.topic(wh, "events").append(_events(5, 0))
    (tmp_path / "app.py").write_text(WRONG_APP)
    state = tmp_path / "state"
    with pytest.raises(StreamsException) as err:
        _run(wh, state, 10**9, str(tmp_path / "app.py"))
    assert (
        "store 'labels' has value serde Serdes.Long() and cannot hold this value: "
        "Serdes.Long() cannot serialize a str ('label')" in str(err.value)
    )
    assert (
        not topics.topic(wh, "copied").exists()
        or sum(topics.topic(wh, "copied").end_offsets().values()) == 0
    )
    assert not list((tmp_path / "wh").rglob("changelog/labels/*.parquet"))
    assert not list(state.rglob("staged/*.pkl"))
