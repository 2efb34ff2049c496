"""Spark on a warehouse on a bucket (``s3://``, the S3-compatible server of ``s3_server.py``):
Spark reads through its S3A connector (``spark_session.S3A_PACKAGES``), configured from the
same ``AWS_*`` environment as delta-rs. A run through the Spark transport gives on the
bucket what the in-process run gives on a local folder, and ``lakestate sql --engine spark``
over the bucket (in the run's process, and alone in a fresh one) answers as DuckDB does over
the folder.

The Spark side runs in a process of its own (``_SPARK_SIDE``): this one may already hold a
SparkSession started without S3A (the session-wide ``spark`` fixture), to which jars cannot
be added."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from engine_helpers import APPS, FAST_TEST_CONF, events, produce
from lakestate import run_app
from lakestate.cli import main
from lakestate.warehouse import Warehouse

pytestmark = pytest.mark.integration

QUERIES = (
    "SELECT key, value FROM counts__counts ORDER BY key",
    "SELECT key, value FROM counts__sums ORDER BY key",
    "SELECT count(*) AS n, sum(length(value)) AS chars FROM events",
    "SELECT partition, offset, key, value FROM counts_out ORDER BY partition, offset",
)

#: Runs the app through the Spark transport on the bucket, then each query through ``lakestate
#: sql --engine spark``, in one process (one JVM); prints the run's lines, then the queries'
#: outputs as one JSON list.
_SPARK_SIDE = """
import io, json, sys
from contextlib import redirect_stdout
from lakestate import run_app
from lakestate.cli import main
app, root, state, queries = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
run_app(app, warehouse=root, state_dir=state, max_records=100, until_caught_up=True,
        transport="spark")
answers = []
for query in queries:
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["sql", "--engine", "spark", query, "--warehouse", root])
    answers.append([code, out.getvalue()])
print(json.dumps(answers))
"""


def _fast_env() -> dict[str, str]:
    """This process's environment (the bucket's ``AWS_*``) with the tests' Spark settings
    for tiny data (``FAST_TEST_CONF``: JVM options, no code generation)."""
    return {**os.environ, "LAKESTATE_SPARK_CONF": json.dumps(FAST_TEST_CONF)}


def _sql(capsys, root: str, query: str) -> str:
    capsys.readouterr()
    assert main(["sql", query, "--warehouse", root]) == 0
    return capsys.readouterr().out


def _consume(capsys, root: str, topic: str) -> list[str]:
    capsys.readouterr()
    assert main(["consume", topic, "--from-beginning", "--warehouse", root]) == 0
    return capsys.readouterr().out.splitlines()


def test_a_spark_run_and_spark_sql_on_a_bucket_give_the_in_process_run(
    s3_warehouse, tmp_path: Path, capsys
) -> None:
    records = events(300, seed=17)
    reference = Warehouse(tmp_path / "reference")
    produce(None, reference, "events", records, partitions=2)
    run_app(
        str(APPS / "counts.py"),
        warehouse=reference.root,
        state_dir=str(tmp_path / "ref-state"),
        max_records=100,
        until_caught_up=True,
        transport="inprocess",
        say=lambda _: None,
    )
    produce(None, s3_warehouse, "events", records, partitions=2)

    proc = subprocess.run(
        [sys.executable, "-c", _SPARK_SIDE, str(APPS / "counts.py"), s3_warehouse.root]
        + [str(tmp_path / "state"), json.dumps(QUERIES)],
        capture_output=True,
        text=True,
        timeout=1200,
        env=_fast_env(),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    *said, answers = proc.stdout.splitlines()
    assert said[0].startswith("transport: in Spark (--transport spark; 300 records pending"), said
    assert sum("batch " in line for line in said) >= 2, said  # at most 100 records a task

    for topic in ("counts-out", "sums-out"):
        expected = _consume(capsys, reference.root, topic)
        assert _consume(capsys, s3_warehouse.root, topic) == expected and expected
    for query, (code, out) in zip(QUERIES, json.loads(answers), strict=True):
        assert code == 0, (query, out)
        assert out == _sql(capsys, reference.root, query), query

    # The command alone, as typed, in a fresh process: its own Spark, with S3A.
    command = [sys.executable, "-m", "lakestate.cli", "sql", "--engine", "spark", QUERIES[1]]
    proc = subprocess.run(
        [*command, "--warehouse", s3_warehouse.root],
        capture_output=True,
        text=True,
        timeout=900,
        env=_fast_env(),
    )
    assert proc.returncode == 0, proc.stderr[-5000:]
    assert proc.stdout == _sql(capsys, reference.root, QUERIES[1])
