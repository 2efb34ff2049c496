"""What `lakestate sql` shows a newcomer, without Spark: hints that run when pasted into a
shell, and unnamed columns named as Spark names them (the names below are Spark 4.2's own,
recorded from ``spark.sql(...).columns``; tests/integration/test_sql_engines.py compares
with a live Spark too)."""

from __future__ import annotations

import subprocess

import duckdb
import pytest
from lakestate.cli.shell_hint import sql_command
from lakestate.read import spark_dialect

QUERIES = [
    "SELECT * FROM orders__customers WHERE key = '\"customer-19\"' ORDER BY valid_from",
    "SELECT get_json_object(key, '$.key') AS user, value FROM clicks_per_minute",
    "SELECT '$HOME', '`date`', 'a\\b', '$[1]', \"dq\" FROM t",
    "SELECT 1 WHERE 'a' != 'b'",
]


@pytest.mark.parametrize("query", QUERIES)
def test_a_printed_sql_command_gives_bash_the_query_as_it_is(query):
    command = sql_command(query)
    assert command.startswith("lakestate sql ")
    # The command as printed, with `lakestate sql` standing for a function that prints its
    # one argument: what bash hands the CLI.
    script = 'lakestate() { [ "$1" = sql ] && [ "$#" -eq 2 ] && printf %s "$2"; }\n' + command
    ran = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    assert ran.stdout == query


def test_the_old_hint_form_lost_the_inner_quotes():
    """Why: the hint the demos printed before, ``lakestate sql "<query>"``."""
    query = QUERIES[0]
    script = f'lakestate() {{ printf %s "$2"; }}\nlakestate sql "{query}"'
    ran = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    assert ran.stdout != query and "'customer-19'" in ran.stdout


# Expression -> the column name Spark 4.2 gives it (SELECT <expression> FROM t o).
SPARK_NAMES = {
    "count(*)": "count(1)",
    "COUNT(*)": "count(1)",
    "count(x)": "count(x)",
    "COUNT(DISTINCT task)": "count(DISTINCT task)",
    "sum(CAST(value AS BIGINT))": "sum(CAST(value AS BIGINT))",
    "SUM(x)": "sum(x)",
    "max(o.ts)": "max(ts)",
    "avg(x)": "avg(x)",
    "nvl(valid_to, -1)": "nvl(valid_to, -1)",
    "if(valid_to IS NULL, 'a', 'b')": "(IF((valid_to IS NULL), a, b))",
    "get_json_object(value, '$.a')": "get_json_object(value, $.a)",
    "x + 1": "(x + 1)",
    "x DIV 2": "(x div 2)",
    "-x": "(- x)",
    "-1": "-1",
    "x <> 1": "(NOT (x = 1))",
    "x > 1 AND x < 9": "((x > 1) AND (x < 9))",
    "x IS NOT NULL": "(x IS NOT NULL)",
    "UPPER(k)": "upper(k)",
    "concat(k, 'z')": "concat(k, z)",
    "k || 'z'": "concat(k, z)",
    "k LIKE 'u%'": "k LIKE u%",
    "x IN (1, 2)": "(x IN (1, 2))",
    "CASE WHEN valid_to IS NULL THEN 0 ELSE 1 END": "CASE WHEN (valid_to IS NULL) THEN 0 ELSE 1 END",
    "CASE x WHEN 1 THEN 2 END": "CASE WHEN (x = 1) THEN 2 END",
    "CAST(x AS STRING)": "x",
    "CAST(x + 1 AS STRING)": "CAST((x + 1) AS STRING)",
    "'lit'": "lit",
    "NULL": "NULL",
    "count(*) * 2": "(count(1) * 2)",
    "sum(x * 2) / count(*)": "(sum((x * 2)) / count(1))",
    "timestamp_millis(CAST(get_json_object(value, '$.a') AS BIGINT))": (
        "timestamp_millis(CAST(get_json_object(value, $.a) AS BIGINT))"
    ),
}


@pytest.fixture(scope="module")
def con():
    con = duckdb.connect()
    spark_dialect.install(con)
    con.execute(
        "CREATE TABLE t AS SELECT 'k1' AS key, '{\"a\": 1}' AS value, 5 AS x, "
        "CAST(NULL AS BIGINT) AS valid_to, 1000 AS ts, 'u' AS k, 1 AS task"
    )
    yield con
    con.close()


@pytest.mark.parametrize("expression", sorted(SPARK_NAMES))
def test_an_unnamed_column_has_spark_s_name_on_duckdb(con, expression):
    columns, _ = spark_dialect.execute(con, f"SELECT {expression} FROM t o")
    assert columns == [SPARK_NAMES[expression]]


def test_named_columns_stars_and_set_operations(con):
    query = "SELECT count(*) AS n, key FROM t GROUP BY key UNION ALL SELECT 1, 'x'"
    assert spark_dialect.execute(con, query)[0] == ["n", "key"]
    query = "SELECT count(*), max(x) FROM t UNION ALL SELECT 1, 2"
    columns, cursor = spark_dialect.execute(con, query)
    assert columns == ["count(1)", "max(x)"] and sorted(cursor.fetchall()) == [(1, 2), (1, 5)]
    query = "SELECT x + 1, *, upper(k) FROM t"
    columns = spark_dialect.execute(con, query)[0]
    assert (
        columns[0] == "(x + 1)"
        and columns[-1] == "upper(k)"
        and columns[1:4]
        == [
            "key",
            "value",
            "x",
        ]
    )


def test_names_do_not_change_what_order_by_refers_to(con):
    """A top-level CAST of a column is named after the column, as in Spark, but ORDER BY
    still sorts on the column (the query is not given an alias)."""
    con.execute("CREATE TABLE n AS SELECT * FROM (VALUES (9), (10), (100)) AS v(x)")
    columns, cursor = spark_dialect.execute(con, "SELECT CAST(x AS STRING), x FROM n ORDER BY x")
    assert columns == ["x", "x"] and cursor.fetchall() == [("9", 9), ("10", 10), ("100", 100)]


def test_show_tables_like_and_the_error_for_a_name_that_is_no_view(tmp_path):
    from lakestate.io import logtable
    from lakestate.read import catalog
    from lakestate.warehouse import Warehouse

    wh = Warehouse(tmp_path / "warehouse")
    with pytest.raises(ValueError, match=f"warehouse at {wh.root} does not exist"):
        catalog.listing(wh)
    assert "does not exist" in catalog.unknown_view(wh, "events")
    for topic in ("events", "event-counts", "clicks"):
        logtable.create_topic(wh, topic, 1)
    shown = catalog.show_tables(wh, "show tables")
    assert shown.columns == ["namespace", "tableName", "isTemporary"]
    assert shown.rows == [("", n, True) for n in ("clicks", "event_counts", "events")]
    like = catalog.show_tables(wh, "SHOW VIEWS IN default LIKE 'EVENT*|cl.cks';")
    assert like.columns[1] == "viewName" and [r[1] for r in like.rows] == [
        "clicks",
        "event_counts",
        "events",
    ]
    assert [r[1] for r in catalog.show_tables(wh, "SHOW TABLES '*counts'").rows] == ["event_counts"]
    assert catalog.show_tables(wh, "SELECT * FROM events") is None
    assert catalog.listing(wh).rows[0] == ("clicks", "topic", "clicks")
    text = catalog.unknown_view(wh, "event_count")
    assert (
        "did you mean event_counts?" in text and "Its views: clicks, event_counts, events" in text
    )
    assert "did you mean" not in catalog.unknown_view(wh, "zzz")
    hint = catalog.spelled_as_tables(wh, "SELECT * FROM event-counts")
    assert "event-counts is the view event_counts" in hint
    assert catalog.spelled_as_tables(wh, "SELECT * FROM events") == ""
