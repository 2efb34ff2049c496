"""A store's SQL view typed by its serdes (Grouped/Materialized, recorded in the app's
layout): a real run of an app counting per String user (Long counts) and summing amounts
(Double), then `lakestate sql` on DuckDB (and the same query on Spark): the key is text
(``u1``, not ``"u1"``), the count a BIGINT, the sum a DOUBLE, each equal to the model's
(a window store's key and value too);
a store without serdes still shows JSON text; the raw changelog stays JSON."""

from __future__ import annotations

import base64
import json
import textwrap
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from lakestate import run_app
from lakestate.cli.main import main
from lakestate.io import topics
from lakestate.read import duckdb_engine
from lakestate.warehouse import Warehouse

pytestmark = pytest.mark.integration

APP = textwrap.dedent(
    """
    from datetime import timedelta

    import lakestate as ls

    S, J = ls.Serdes.String(), ls.Serdes.Json()
    b = ls.StreamsBuilder()
    events = b.stream("events")
    user = lambda k, v: v["user"]  # noqa: E731
    events.group_by(user, ls.Grouped.with_("by-user", S, J)).count(ls.Materialized.as_("counts"))
    events.group_by(user, ls.Grouped.with_(S, J)).aggregate(
        lambda: 0.0,
        lambda k, v, agg: agg + v["amount"],
        ls.Materialized.as_("sums").with_value_serde(ls.Serdes.Double()),
    )
    events.group_by(user).count(ls.Materialized.as_("plain"))
    # Bytes values through a repartition topic with Bytes serdes: the aggregator sees bytes.
    B, L = ls.Serdes.Bytes(), ls.Serdes.Long()
    blobs = b.stream("blobs", ls.Consumed.with_(S, B))
    blobs.group_by(lambda k, v: k.upper(), ls.Grouped.with_(S, B)).aggregate(
        lambda: 0, lambda k, v, n: n + len(v), ls.Materialized.as_("lengths").with_(S, L)
    )
    # No serde given: the Consumed key serde, carried through map_values, types the store.
    blobs.map_values(len).group_by_key().count(ls.Materialized.as_("carried"))
    # A window store: the Grouped key serde and a count's Long, as unwindowed.
    hour = ls.TimeWindows.of_size_with_no_grace(timedelta(hours=1))
    events.group_by(user, ls.Grouped.with_(S, J)).windowed_by(hour).count(
        ls.Materialized.as_("hourly")
    )
    app = ls.App("typed", b.build())
    """
)

BLOBS = [  # a log table holds Bytes as base64 text (the serde's JSON form)
    {"key": "k", "value": base64.b64encode(bytes(range(i))).decode(), "timestamp": 1000 + i}
    for i in range(1, 6)
]
RECORDS = [
    {"key": f"k{i % 3}", "value": {"user": f"u{i % 4}", "amount": i / 2}, "timestamp": 1000 + i}
    for i in range(40)
]
COUNTS = Counter(r["value"]["user"] for r in RECORDS)
SUMS: dict[str, float] = defaultdict(float)
for _r in RECORDS:
    SUMS[_r["value"]["user"]] += _r["value"]["amount"]

QUERY = (
    "SELECT c.key, c.value AS n, s.value AS total FROM typed__counts c "
    "JOIN typed__sums s ON c.key = s.key ORDER BY c.key"
)


@pytest.fixture(scope="module")
def wh(tmp_path_factory) -> Warehouse:
    root = tmp_path_factory.mktemp("typed")
    (root / "app.py").write_text(APP)
    wh = Warehouse(root / "warehouse")
    topics.topic(wh, "events").create(2)
    topics.topic(wh, "events").append(RECORDS)
    topics.topic(wh, "blobs").create(1)
    topics.topic(wh, "blobs").append(BLOBS)
    run_app(
        str(root / "app.py"),
        warehouse=wh.root,
        state_dir=str(root / "state"),
        until_caught_up=True,
        say=lambda _: None,
    )
    return wh


def _expected() -> list[tuple]:
    return [(u, COUNTS[u], SUMS[u]) for u in sorted(COUNTS)]


def test_duckdb_views_have_typed_key_and_value_columns(wh):
    result = duckdb_engine.sql(wh, QUERY)
    assert [tuple(r) for r in result.rows] == _expected()
    assert all(type(k) is str and type(n) is int and type(t) is float for k, n, t in result.rows)
    # Typed columns compute as numbers and compare as text, no JSON functions needed.
    total = duckdb_engine.sql(wh, "SELECT sum(value) FROM typed__counts WHERE key LIKE 'u%'")
    assert total.rows[0][0] == len(RECORDS)
    # A store without serdes shows JSON text, as before; its changelog stays JSON too.
    plain = duckdb_engine.sql(wh, "SELECT key, value FROM typed__plain ORDER BY key")
    assert [tuple(r) for r in plain.rows] == [
        (json.dumps(u), str(COUNTS[u])) for u in sorted(COUNTS)
    ]
    raw = duckdb_engine.sql(wh, "SELECT DISTINCT key FROM typed__counts__changelog ORDER BY key")
    assert [r[0] for r in raw.rows] == [json.dumps(u) for u in sorted(COUNTS)]


def test_lakestate_sql_prints_the_string_key_as_text(wh, capsys):
    capsys.readouterr()
    assert (
        main(["sql", "SELECT key, value FROM typed__counts ORDER BY key", "--warehouse", wh.root])
        == 0
    )
    out = capsys.readouterr().out
    assert "u1" in out and '"u1"' not in out


def test_spark_views_have_the_same_typed_columns(spark, wh):
    from lakestate.read.spark_engine import sql

    df = sql(spark, wh, QUERY)
    types = {f.name: f.dataType.simpleString() for f in df.schema.fields}
    assert types == {"key": "string", "n": "bigint", "total": "double"}
    assert [tuple(r) for r in df.collect()] == _expected()


def test_bytes_cross_a_repartition_topic_as_bytes(wh):
    lengths = duckdb_engine.sql(wh, "SELECT key, value FROM typed__lengths")
    assert [tuple(r) for r in lengths.rows] == [("K", 1 + 2 + 3 + 4 + 5)]  # not base64's


def test_a_consumed_key_serde_carried_to_a_count_types_its_view(wh):
    carried = duckdb_engine.sql(wh, "SELECT key, value FROM typed__carried")
    assert [tuple(r) for r in carried.rows] == [("k", len(BLOBS))]  # text, BIGINT


def test_a_window_store_view_has_typed_key_and_value_columns(wh):
    hourly = duckdb_engine.sql(
        wh, "SELECT key, window_start, window_end, value FROM typed__hourly ORDER BY key"
    )
    assert [tuple(r) for r in hourly.rows] == [(u, 0, 3_600_000, COUNTS[u]) for u in sorted(COUNTS)]
    assert all(type(k) is str and type(n) is int for k, _, _, n in hourly.rows)


def test_describe_names_a_stores_serdes(wh, capsys):
    capsys.readouterr()
    assert main(["describe", str(Path(wh.root).parent / "app.py"), "--warehouse", wh.root]) == 0
    out = capsys.readouterr().out
    assert "(key Serdes.String(), value Serdes.Long())" in out  # counts (and lengths)
    assert "(key Serdes.String(), value Serdes.Double())" in out  # sums
    plain = next(line for line in out.splitlines() if line.strip().startswith("plain "))
    assert "Serdes" not in plain
