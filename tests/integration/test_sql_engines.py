"""`lakestate sql`'s two engines give the same rows: DuckDB in process (the default: the
views over Arrow datasets read by delta-rs, the query transpiled from Spark SQL) and Spark.

One warehouse from real runs of apps with every store kind (key-value, dedup, window,
session, suppression buffers in memory and on disk, versioned, a stream-stream join's
buffers and waiting records), one of them compacted and
run again (snapshot rows and a tail), then the same queries on both engines: every SQL
query of README.md and docs/guide.md (its examples moved there) and of the demo printers (cli/demo_printers.py), every view and changelog
of the warehouse as a whole, and Spark functions users write (JSON, time, casts,
aggregates, joins, window functions). Rows are compared as multisets of plain values
(``result.plain``: Spark's bytearray and Row as DuckDB's bytes and dict), floats within
1e-9; an ORDER BY query's rows also in order, by the columns it sorts on.
"""

from __future__ import annotations

import io
import math
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from engine_helpers import APPS, produce
from lakestate import rebalance, run_app
from lakestate.app import load_app, load_module
from lakestate.checkpoint.layout import ensure_layout
from lakestate.cli import Context, demo_printers, sql
from lakestate.io import topics
from lakestate.ops import compaction
from lakestate.read.result import plain
from lakestate.read.views import CHANGELOG_SUFFIX, list_views, view_name
from lakestate.warehouse import Warehouse

pytestmark = pytest.mark.integration

JOBS = Path(__file__).resolve().parents[2] / "jobs"
README = Path(__file__).resolve().parents[2] / "README.md"
GUIDE = README.parent / "docs" / "guide.md"  # the DSL examples the README links to
MIN = 60_000


def _events(n: int, start: int = 0) -> list[dict]:
    """Events 20 s apart (hours of them: hourly windows close), amounts 0-3."""
    return [
        {
            "key": f"k{i % 7}",
            "value": {"user": f"u{i % 5}", "amount": i % 4, "txn": f"txn-{i % 50}"},
            "timestamp": 1_000_000 + i * 20_000 - (7_000 if i % 9 == 0 else 0),
        }
        for i in range(start, start + n)
    ]


@pytest.fixture(scope="module")
def wh(spark, tmp_path_factory) -> Warehouse:
    root = tmp_path_factory.mktemp("engines")
    wh = Warehouse(root / "warehouse")

    def run(path, **kwargs) -> None:
        kwargs.setdefault("until_caught_up", True)
        run_app(
            str(path),
            warehouse=wh.root,
            state_dir=str(root / "state"),
            say=lambda _: None,
            **kwargs,
        )

    produce(spark, wh, "events", _events(300), partitions=2)
    run(JOBS / "demo.py", max_records=60)
    compaction.compact(wh, "demo")  # snapshot rows ...
    topics.topic(wh, "events").append(_events(200, start=300))
    run(JOBS / "demo.py", max_records=60)  # ... and a tail after them
    # The demo's scale-out tables: a generation, and each instance's lag reports.
    rebalance(load_app(JOBS / "demo.py"), wh, say=lambda _: None)
    for name in ("a", "b"):
        run_app(
            str(JOBS / "demo.py"),
            warehouse=wh.root,
            instance=name,
            state_dir=str(root / "instances" / name),
            say=lambda _: None,
        )
    for app in ("alerts.py", "dedup.py", "windowed.py"):
        run(APPS / app, max_records=150)
    # A typed Delta sink, as the README's order totals (its `__latest` view is queried).
    typed = root / "order_totals_typed.py"
    typed.write_text(
        "import lakestate as ls\n"
        f"totals = ls.DeltaSink('customer-totals-typed', {str(root / 'gold')!r}, "
        "key='customer', schema={'customer': 'string', 'total': 'long'})\n"
        "b = ls.StreamsBuilder()\n"
        "b.stream('events').group_by_key().aggregate(lambda: 0, lambda k, v, t: t + v['amount'])"
        ".to_stream().map_values(lambda t: {'total': t}).to(totals)\n"
        "app = ls.App('order-totals-typed', b.build(), {})\n"
    )
    run(typed, max_records=150)
    produce(
        spark,
        wh,
        "payments",
        [
            {
                "key": f"p{i % 3}",
                "value": {"txn": f"txn-{i % 60}", "amount": i},
                "timestamp": i * 1000,
            }
            for i in range(120)
        ],
        partitions=2,
    )
    run(APPS / "payments.py")
    # A stream-stream join's buffers and waiting records (README's ads example).
    produce(
        spark,
        wh,
        "impressions",
        [
            {"key": f"u{i % 6}", "value": {"ad": f"ad{i % 4}"}, "timestamp": i * MIN}
            for i in range(40)
        ],
        partitions=2,
    )
    produce(
        spark,
        wh,
        "ad-clicks",
        [
            {"key": f"u{i % 6}", "value": {"page": "checkout"}, "timestamp": i * 3 * MIN + 30_000}
            for i in range(10)
        ],
        partitions=2,
    )
    run(APPS / "ads.py", max_records=15)
    tiers = [
        (42, "silver", 0),
        (7, "bronze", 1),
        (42, "gold", 10),
        (42, "platinum", 20),
        (42, "silver-plus", 5),
        (7, None, 12),
    ]
    produce(
        spark,
        wh,
        "tier-updates",
        [{"key": k, "value": v, "timestamp": m * MIN} for k, v, m in tiers],
        partitions=1,
    )
    run(APPS / "versioned_tiers.py", max_records=2)
    clicks = load_module(JOBS / "clicks.py")
    produce(
        spark,
        wh,
        clicks.INPUT_TOPIC,
        [{"key": k, "value": v, "timestamp": t} for k, v, t in clicks.sample_clicks(400)],
        partitions=2,
    )
    run(JOBS / "clicks.py", max_records=100)
    orders = load_module(JOBS / "orders.py")
    produce(
        spark,
        wh,
        orders.CUSTOMERS_TOPIC,
        [{"key": k, "value": v, "timestamp": t} for k, v, t in orders.sample_customers(20)],
        partitions=2,
    )
    topics.topic(wh, orders.INPUT_TOPIC).create(2)
    run(JOBS / "orders.py")  # the tier history first, as the demo loads it
    produce(
        spark,
        wh,
        orders.INPUT_TOPIC,
        [{"key": k, "value": v, "timestamp": t} for k, v, t in orders.sample_orders(300, 20)],
        partitions=2,
    )
    run(JOBS / "orders.py")
    return wh


def _readme_queries() -> list[str]:
    """Every SQL query of README.md and docs/guide.md: the ```sql blocks' statements and
    `lakestate sql`'s argument in the ```bash blocks (a time T made a number)."""
    text = README.read_text() + "\n" + GUIDE.read_text()
    found = []
    for block in re.findall(r"```sql\n(.*?)```", text, re.S):
        # Statements end at a `;` or at a comment line (the README's blocks use both).
        chunk: list[str] = []
        for line in block.splitlines() + ["--"]:
            if not line.strip().startswith("--"):
                chunk.append(line.strip())
                continue
            found += [q.strip() for q in " ".join(chunk).split(";") if q.strip()]
            chunk = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for q in re.findall(r'lakestate sql "((?:[^"\\]|\\.)*)"', block):
            found.append(q.replace('\\"', '"'))
    return [q.replace(" T ", " 660000 ").replace("> T)", "> 660000)") for q in found]


# Spark functions and SQL users write, beyond the README's.
EXTRA = [
    "SELECT task, count(*) AS n, sum(CAST(value AS BIGINT)) AS total, max(ts) AS newest "
    "FROM demo__event_counts_store GROUP BY task",
    "SELECT key, value, row_number() OVER (PARTITION BY task ORDER BY key) AS rn, "
    "sum(CAST(value AS BIGINT)) OVER (PARTITION BY task) AS task_total FROM demo__event_counts_store",
    "SELECT partition, offset, get_json_object(value, '$') AS whole, "
    "get_json_object(value, '$.user') AS user, get_json_object(value, '$.missing') AS missing, "
    "get_json_object(key, '$.x') AS not_an_object, get_json_object('not json', '$.a') AS bad, "
    "timestamp_millis(timestamp) AS at, timestamp_seconds(timestamp DIV 1000) AS at_s "
    "FROM events ORDER BY partition, offset",
    "SELECT get_json_object(value, '$.amount') AS amount, count(*) AS n FROM events "
    "WHERE get_json_object(value, '$.amount') >= 2 GROUP BY 1",
    "SELECT value FROM event_counts WHERE value >= 20",
    "SELECT e.key, count(*) AS n FROM events e LEFT JOIN unique_events u "
    "ON u.key = e.key AND u.timestamp = e.timestamp WHERE u.key IS NULL GROUP BY e.key",
    "SELECT key, window_start, window_end, value FROM windowed__window_counts "
    "ORDER BY window_start DESC, key LIMIT 5",
    "SELECT get_json_object(key, '$.key') AS k, value, prior_value, buffer_time "
    "FROM windowed__final_spilled_store",
    "SELECT key, window_start, window_end, value FROM windowed__sessions WHERE value > 2",
    "SELECT dedup_id, ts, offset FROM dedup__seen_keys",
    "SELECT * FROM tiers__per_tier",
    "SELECT count(*) AS rows, count(DISTINCT task) AS tasks, max(batch_id) AS last, "
    "sum(CASE WHEN snapshot_through IS NULL THEN 0 ELSE 1 END) AS snapshot_rows "
    "FROM demo__event_counts_store__changelog",
    "SELECT key, coalesce(value, 'deleted') AS value, nvl(valid_to, -1) AS until, "
    "if(valid_to IS NULL, 'latest', 'older') AS which FROM tiers__tiers",
    "SELECT generation, task, active, size(warmup) AS warmups, standby, reason "
    "FROM demo__assignment ORDER BY generation, task",
    "SELECT instance, task, role, lag, local_batch, committed_batch FROM demo__instances",
]


def _views(wh: Warehouse) -> list[str]:
    """SELECT * of every view: every topic, every store's state and changelog."""
    names = [view_name(t) for t in wh.list_topics()]
    for table in wh.list_state_tables():
        name = view_name(f"{table.app}__{table.store}")
        names += [name, name + CHANGELOG_SUFFIX]
    return [f"SELECT * FROM {n}" for n in names]


def _order_columns(query: str, columns: list[str]) -> list[int] | None:
    """The output columns a query's final ORDER BY sorts on (None: no ORDER BY outside a
    window); a sort key that is no output column is left out (the rows' multiset is
    compared anyway)."""
    head, sep, tail = query.rpartition("ORDER BY ")
    if not sep or ")" in tail:
        return None
    tail = re.sub(r"\s+LIMIT\s+\d+\s*$", "", tail, flags=re.I)
    keys = [re.sub(r"\s+(DESC|ASC)$", "", k.strip(), flags=re.I) for k in tail.split(",")]
    return [columns.index(k.split(".")[-1]) for k in keys if k.split(".")[-1] in columns]


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9) or (math.isnan(a) and math.isnan(b))
    return a == b


def _key(row: tuple) -> tuple:
    return tuple(round(v, 6) if isinstance(v, float) else repr(v) for v in row)


def _compare(ctx: Context, query: str, batch: int | None = None) -> int:
    fast = sql.query(ctx, query, batch, engine="duckdb")
    slow = sql.query(ctx, query, batch, engine="spark")
    assert len(fast.columns) == len(slow.columns), (query, fast.columns, slow.columns)
    if " AS " in query.upper() or query.startswith("SELECT *"):
        assert [c.lower() for c in fast.columns] == [c.lower() for c in slow.columns], query
    rows_fast = [tuple(plain(v) for v in r) for r in fast.rows]
    rows_slow = [tuple(plain(v) for v in r) for r in slow.rows]
    assert Counter(map(_key, rows_fast)) == Counter(map(_key, rows_slow)), query
    for r_fast, r_slow in zip(
        sorted(rows_fast, key=_key), sorted(rows_slow, key=_key), strict=True
    ):
        assert all(map(_same, r_fast, r_slow)), (query, r_fast, r_slow)
    order = _order_columns(query, list(slow.columns))
    if order:
        assert [tuple(r[i] for i in order) for r in rows_fast] == [
            tuple(r[i] for i in order) for r in rows_slow
        ], query
    return len(rows_fast)


def test_readme_queries_give_spark_s_rows(spark, wh):
    queries = _readme_queries()
    assert len(queries) >= 5, queries
    for function in ("get_json_object", "timestamp_millis", "JOIN", "ORDER BY"):
        assert any(function in q for q in queries), function
    ctx = Context(wh)
    counts = {q: _compare(ctx, q) for q in queries}
    assert sum(1 for n in counts.values() if n) >= 6, counts  # most queries have rows


def test_demo_printers_print_the_same_on_both_engines(spark, wh):
    """The demo's printers (what `lakestate demo` shows after its DAG run) print the same
    lines through DuckDB (their default: no Spark) as through Spark."""
    printed = {}
    for engine in ("duckdb", "spark"):
        out = io.StringIO()
        ctx = Context(wh, stdout=out)
        demo_printers.show_counts(ctx, load_module(JOBS / "demo.py"), engine)
        demo_printers.show_clicks(ctx, load_module(JOBS / "clicks.py"), engine)
        demo_printers.show_orders(ctx, load_module(JOBS / "orders.py"), engine)
        printed[engine] = out.getvalue().splitlines()
    assert printed["duckdb"] == printed["spark"]
    lines = printed["duckdb"]
    assert sum(1 for line in lines if line.startswith("  partition ")) == 10
    assert any(" clicks so far, final once " in line for line in lines)
    assert any(line.startswith("  order-") for line in lines)


def test_every_view_of_every_store_kind_gives_spark_s_rows(spark, wh):
    apps = [
        load_module(JOBS / "demo.py").app,
        load_module(JOBS / "clicks.py").app,
        load_module(JOBS / "orders.py").app,
    ] + [
        load_module(APPS / f).app
        for f in (
            "alerts.py",
            "dedup.py",
            "windowed.py",
            "payments.py",
            "versioned_tiers.py",
            "ads.py",
        )
    ]
    tables = {(t.app, t.store) for t in wh.list_state_tables()}
    kinds = {
        spec.kind
        for app in apps
        for name, spec in app.topology.stores.items()
        if (app.name, name) in tables
    }
    assert kinds >= {
        "timestamped_key_value",
        "dedup",
        "window",
        "session",
        "suppression_buffer",
        "versioned",
        "stream_join_buffer",
        "stream_join_waiting",
    }, kinds
    ctx = Context(wh)
    counts = {q: _compare(ctx, q) for q in _views(wh)}
    assert all(counts.values()), [q for q, n in counts.items() if not n]


def test_spark_functions_and_sql_give_spark_s_rows(spark, wh):
    ctx = Context(wh)
    for q in EXTRA:
        _compare(ctx, q)


def test_the_scale_out_tables_are_views_with_spark_s_rows(spark, wh):
    ctx = Context(wh)
    tasks = {str(t) for t in ensure_layout(load_app(JOBS / "demo.py"), wh).tasks()}
    assignment = sql.query(ctx, "SELECT task, active FROM demo__assignment", None, engine="duckdb")
    assert {task for task, _ in assignment.rows} == tasks  # one generation, a row per task
    assert {active for _, active in assignment.rows} <= {"a", "b"}
    reports = sql.query(ctx, "SELECT DISTINCT instance FROM demo__instances", None, engine="duckdb")
    assert sorted(r[0] for r in reports.rows) == ["a", "b"]
    assert _compare(ctx, EXTRA[-2]) == len(assignment.rows)
    assert _compare(ctx, EXTRA[-1]) >= 2


def test_a_pinned_batch_gives_spark_s_rows(spark, wh):
    ctx = Context(wh)
    assert _compare(ctx, "SELECT key, value, batch_id FROM windowed__window_counts", batch=2)
    _compare(ctx, "SELECT * FROM windowed__final_store", batch=2)


def test_errors_name_what_is_wrong(spark, wh):
    ctx = Context(wh)
    with pytest.raises(ValueError, match="no_such_view"):
        sql.query(ctx, "SELECT * FROM no_such_view")
    with pytest.raises(ValueError, match="applies to one app"):
        sql.query(ctx, "SELECT * FROM events", batch=1)


def _bash_sql(wh: Warehouse, command: str) -> subprocess.CompletedProcess:
    """``command`` (a printed ``lakestate sql ...``) run by bash as pasted, ``lakestate``
    being this checkout's CLI over ``wh``."""
    script = f'lakestate() {{ "{sys.executable}" -m lakestate.cli "$@"; }}\n{command}'
    env = dict(os.environ, LAKESTATE_WAREHOUSE=wh.root, PYTHONPATH=str(README.parent / "lib"))
    return subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, env=env, timeout=300
    )


def test_every_printed_sql_hint_returns_rows_when_pasted_into_bash(spark, wh):
    """The `lakestate sql ...` lines the demos print (and README.md's and docs/guide.md's
    shell blocks), run by bash as printed: each exits 0 with rows (the orders demo's
    `key = '"customer-N"'` used to reach the CLI as `'customer-N'`: a header and no rows)."""
    out = io.StringIO()
    ctx = Context(wh, stdout=out)
    demo_printers.show_counts(ctx, load_module(JOBS / "demo.py"))
    demo_printers.show_clicks(ctx, load_module(JOBS / "clicks.py"))
    demo_printers.show_orders(ctx, load_module(JOBS / "orders.py"))
    printed = [re.sub(r"^(demo:)?\s*", "", line) for line in out.getvalue().splitlines()]
    hints = [line for line in printed if line.startswith("lakestate sql ")]
    assert len(hints) == 5 and any('\\"customer-' in h for h in hints), hints
    docs = README.read_text() + "\n" + GUIDE.read_text()
    for block in re.findall(r"```bash\n(.*?)```", docs, re.S):
        hints += [line for line in block.splitlines() if line.startswith("lakestate sql ")]
    assert len(hints) >= 8, hints
    for hint in hints:
        ran = _bash_sql(wh, hint)
        assert ran.returncode == 0, (hint, ran.stderr[-2000:])
        assert len(ran.stdout.splitlines()) >= 2, (hint, ran.stdout)  # a header and rows


@pytest.mark.parametrize("engine", ["duckdb", "spark"])
def test_an_unknown_view_names_the_views_there_are_and_the_nearest(spark, wh, engine):
    ctx = Context(wh)
    with pytest.raises(ValueError) as typo:
        sql.query(ctx, "SELECT * FROM demo__event_count", engine=engine)
    text = str(typo.value)
    assert "pg_" not in text and wh.root in text
    assert "did you mean demo__event_counts_store?" in text
    assert "views of app demo: demo__event_counts_store, " in text and "demo__assignment" in text
    with pytest.raises(ValueError, match=r"no view named no_such_view .* Its views: .*events"):
        sql.query(ctx, "SELECT * FROM no_such_view", engine=engine)
    with pytest.raises(ValueError, match="event-counts is the view event_counts"):
        sql.query(ctx, "SELECT * FROM event-counts", engine=engine)


def test_an_unknown_view_fails_the_cli_with_the_hint(wh, capsys):
    from lakestate.cli import main

    assert main(["--warehouse", wh.root, "sql", "SELECT * FROM evnts"]) == 1
    assert "did you mean events?" in capsys.readouterr().err


def test_show_tables_and_sql_list_show_every_view(spark, wh, capsys):
    """SHOW TABLES lists every view, on both engines, as Spark lists temporary views (the
    same schema as Spark's own SHOW TABLES); `lakestate sql --list` too, with each one's
    kind."""
    from lakestate.cli import main
    from lakestate.read import spark_engine

    ctx = Context(wh)
    shown = {e: sql.query(ctx, "SHOW TABLES", engine=e) for e in ("duckdb", "spark")}
    assert shown["duckdb"] == shown["spark"]
    names = [r[1] for r in shown["duckdb"].rows]
    assert {
        "events",
        "demo__event_counts_store",
        "demo__event_counts_store__changelog",
        "demo__assignment",
        "demo__instances",
        "orders__customers",
    } <= set(names)
    # A Delta sink's two views (its table, its latest rows) are listed too.
    sinks = {v.name for v in list_views(wh) if v.kind in ("delta_sink", "latest")}
    assert {"customer_totals_typed", "customer_totals_typed__latest"} <= sinks <= set(names)
    assert sorted(q.removeprefix("SELECT * FROM ") for q in _views(wh)) == sorted(
        n for n in names if not n.endswith(("__assignment", "__instances")) and n not in sinks
    )
    assert {r[0] for r in shown["duckdb"].rows} == {""} and {
        r[2] for r in shown["duckdb"].rows
    } == {True}
    spark.range(1).createOrReplaceTempView("lakestate_probe")
    real = spark.sql("SHOW TABLES").schema
    ours = spark_engine.sql(spark, wh, "SHOW TABLES").schema
    assert ours == real and shown["duckdb"].columns == real.names
    spark.catalog.dropTempView("lakestate_probe")
    like = sql.query(ctx, "SHOW VIEWS LIKE 'demo__*|events'")
    assert like.columns[1] == "viewName"
    assert [r[1] for r in like.rows] == sorted(
        [n for n in names if n.startswith("demo__")] + ["events"]
    )

    capsys.readouterr()
    assert main(["--warehouse", wh.root, "sql", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "view\tkind\tof"
    listed = {tuple(line.split("\t")) for line in lines[1:]}
    assert ("events", "topic", "events") in listed
    assert ("demo__event_counts_store", "state", "demo/event-counts-store") in listed
    assert ("demo__event_counts_store__changelog", "changelog", "demo/event-counts-store") in listed
    assert sorted(v for v, _, _ in listed) == sorted(names)


# Unnamed columns: Spark names them by their SQL (count(1), sum(x), (a + 1) ...).
UNNAMED = [
    "SELECT count(*), count(DISTINCT task), sum(CAST(value AS BIGINT)), max(ts), min(key), "
    "avg(CAST(value AS DOUBLE)) FROM demo__event_counts_store",
    "SELECT task, count(*) FROM demo__event_counts_store GROUP BY task ORDER BY count(*) DESC",
    "SELECT get_json_object(value, '$.user'), timestamp_millis(timestamp), partition + 1, "
    "offset DIV 2, key IS NULL, CAST(offset AS STRING), CAST(offset + 1 AS STRING), "
    "CASE WHEN partition = 0 THEN 'a' ELSE 'b' END, if(offset > 3, 'x', 'y'), "
    "coalesce(key, 'none'), upper(key), length(value), key <> 'k1', key LIKE 'k%', "
    "partition IN (0, 1), -1, 'lit', o.offset FROM events o ORDER BY partition, offset LIMIT 5",
    "SELECT get_json_object(o.value, '$.tier'), count(*) * 2 FROM enriched_orders o "
    "GROUP BY get_json_object(o.value, '$.tier')",
]


def test_unnamed_columns_have_spark_s_names(spark, wh):
    ctx = Context(wh)
    for query in UNNAMED:
        fast = sql.query(ctx, query, engine="duckdb")
        slow = sql.query(ctx, query, engine="spark")
        assert fast.columns == list(slow.columns), query
        _compare(ctx, query)
    assert sql.query(ctx, UNNAMED[0]).columns[0] == "count(1)"
