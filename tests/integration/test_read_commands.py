"""The read-only commands without a JVM: `lakestate sql`, `consume` and `describe`, each in
a fresh process, import no pyspark (so start no JVM) and answer as their Spark paths do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest
from engine_helpers import APPS, CLI_PROBE, events, produce
from lakestate import run_app
from lakestate.io import topics as io_topics
from lakestate.warehouse import Warehouse

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]

# Runs the CLI in this fresh process, then says whether pyspark was imported.
_PROBE = CLI_PROBE


def _env(wh: Warehouse) -> dict[str, str]:
    return dict(os.environ, LAKESTATE_WAREHOUSE=wh.root, PYTHONPATH=str(REPO / "lib"))


def _cli(wh: Warehouse, *args: str) -> tuple[list[str], bool]:
    """stdout lines of `lakestate ARGS` in a fresh process, and whether it imported pyspark."""
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=_env(wh),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines(), "PYSPARK True" in proc.stderr


def _cli_on_spark(wh: Warehouse, spark, capsys, monkeypatch, *args: str) -> list[str]:
    """stdout lines of `lakestate ARGS --engine spark` run in this process, on the session's
    Spark (a fresh process would start a JVM of its own: ~50 s here); asserts that it ran
    Spark jobs."""
    from lakestate.cli import main

    monkeypatch.setenv("LAKESTATE_WAREHOUSE", wh.root)
    group = f"read-commands-{len(args)}-{hash(args)}"
    spark.sparkContext.setJobGroup(group, "the CLI's Spark path")
    capsys.readouterr()
    try:
        assert main([*args, "--engine", "spark"]) == 0
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    assert spark.sparkContext.statusTracker().getJobIdsForGroup(group), "no Spark job ran"
    return capsys.readouterr().out.splitlines()


@pytest.fixture(scope="module")
def wh(spark, tmp_path_factory) -> Warehouse:
    root = tmp_path_factory.mktemp("read")
    wh = Warehouse(root / "warehouse")
    produce(spark, wh, "events", events(120, seed=5), partitions=2)
    for app in ("counts.py", "regroup.py"):
        run_app(
            str(APPS / app),
            warehouse=wh.root,
            state_dir=str(root / "state"),
            until_caught_up=True,
            say=lambda _: None,
        )
    return wh


def test_sql_table_and_json_lines_without_pyspark(wh, spark, capsys, monkeypatch):
    query = "SELECT key, value, task FROM regroup__per_user ORDER BY key"
    lines, imported = _cli(wh, "sql", query)
    assert not imported
    assert lines[0] == "key\tvalue\ttask"
    expected = Counter(json.dumps(r["value"]["user"]) for r in events(120, seed=5))
    assert {line.split("\t")[0]: int(line.split("\t")[1]) for line in lines[1:]} == expected
    rows, imported = _cli(wh, "--json", "sql", query)
    assert not imported
    assert [json.loads(r) for r in rows] == [
        {"key": line.split("\t")[0], "value": line.split("\t")[1], "task": int(line.split("\t")[2])}
        for line in lines[1:]
    ]
    # The same on Spark (--engine spark imports it, of course).
    assert _cli_on_spark(wh, spark, capsys, monkeypatch, "sql", query) == lines
    cells, _ = _cli(wh, "sql", "SELECT NULL AS nothing, raw_key FROM counts__counts__changelog")
    nothing, raw_key = cells[1].split("\t")
    assert nothing == "NULL" and bytes.fromhex(raw_key)  # binary values print as hex


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--partition", "1"],
        ["--max-messages", "7"],
        ["--partition", "1", "--partition", "0", "--max-messages", "50"],
    ],
)
def test_consume_prints_what_spark_s_path_prints_without_pyspark(
    wh, spark, capsys, monkeypatch, args
):
    fast, imported = _cli(wh, "consume", "per-user-out", *args)
    assert not imported
    assert _cli_on_spark(wh, spark, capsys, monkeypatch, "consume", "per-user-out", *args) == fast
    records = [json.loads(line) for line in fast]
    ends = io_topics.topic(wh, "per-user-out").end_offsets()
    wanted = [int(v) for k, v in zip(args, args[1:], strict=False) if k == "--partition"]
    total = sum(e for p, e in ends.items() if p in (wanted or ends))
    limit = int(args[args.index("--max-messages") + 1]) if "--max-messages" in args else total
    assert len(records) == min(limit, total) > 0
    assert {r["partition"] for r in records} <= set(wanted or ends)
    keys = [(r["partition"], r["offset"]) for r in records]
    assert keys == sorted(keys)


def test_consume_refuses_a_partition_the_topic_does_not_have(wh):
    proc = subprocess.run(
        [sys.executable, "-m", "lakestate.cli", "consume", "events", "--partition", "2"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=_env(wh),
        timeout=300,
    )
    assert proc.returncode == 1
    assert "topic 'events' has 2 partitions (0..1); no partition 2" in proc.stderr


def test_describe_an_app_its_tasks_topics_and_stores_without_pyspark(wh):
    lines, imported = _cli(wh, "--json", "describe", str(APPS / "regroup.py"))
    assert not imported
    (doc,) = [json.loads(line) for line in lines]
    assert doc["app"] == "regroup"
    assert [s["id"] for s in doc["subtopologies"]] == [0, 1]
    assert [t["task"] for t in doc["tasks"]] == ["0_0", "0_1", "1_0", "1_1"]
    assert doc["tasks"][2]["reads"] == ["regroup-per-user-repartition[0]"]
    topics = {t["topic"]: t for t in doc["topics"]}
    assert {t: topics[t]["role"] for t in topics} == {
        "events": "source",
        "regroup-per-user-repartition": "repartition",
        "per-user-out": "sink",
    }
    for name, t in topics.items():
        ends = io_topics.topic(wh, name).end_offsets()
        assert t["end_offsets"] == {str(p): e for p, e in ends.items()}
        assert t["records"] == sum(ends.values()) > 0
    (store,) = doc["stores"]
    assert store["store"] == "per-user" and store["kind"] == "timestamped_key_value"
    assert store["sql_view"] == "regroup__per_user"
    assert store["changelog_view"] == "regroup__per_user__changelog"
    assert store["changelog"] == wh.changelog_path("regroup", "per-user")
    assert doc["config"]["processing.guarantee"] == {"value": "exactly_once_v2", "default": True}
    assert "Sub-topology: 1" in doc["topology"]
    # The text form says the same; an app before its first run: its topics not created yet.
    text, _ = _cli(wh, "describe", "jobs/clicks.py")
    assert text[0].startswith("app clicks ")
    assert any("clicks" in line and "(not created yet)" in line for line in text)
    assert any("tasks unknown until its input topics exist" in line for line in text)


def test_describe_an_app_by_name_and_a_topic(wh):
    lines, imported = _cli(wh, "describe", "demo")  # jobs/demo.py, found by its app name
    assert not imported
    assert lines[0].startswith("app demo ")
    assert any(line.split() == ["0_1", "events[1]"] for line in lines)
    lines, imported = _cli(wh, "--json", "describe", "events")
    assert not imported
    doc = json.loads(lines[0])
    ends = io_topics.topic(wh, "events").end_offsets()
    assert doc["partitions"] == 2 and doc["records"] == 120 == sum(ends.values())


def test_the_demo_prints_the_sinks_last_records_oldest_first(tmp_path):
    """`lakestate demo`'s printer: the sink's 10 newest records by timestamp, in the order
    they happened (then by partition and offset), each with its time."""
    import io
    import re

    from lakestate.app import load_module
    from lakestate.cli import Context, demo_printers

    demo = load_module(REPO / "jobs" / "demo.py")
    wh = Warehouse(tmp_path / "warehouse")
    io_topics.topic(wh, demo.INPUT_TOPIC).create(2)
    sample = [{"key": k, "value": v, "timestamp": t} for k, v, t in demo.sample_events(60)]
    io_topics.topic(wh, demo.INPUT_TOPIC).append(sample)
    run_app(str(REPO / "jobs" / "demo.py"), warehouse=wh.root, state_dir=str(tmp_path / "s"),
            until_caught_up=True, say=lambda _: None)  # fmt: skip
    out = io.StringIO()
    demo_printers.show_counts(Context(wh, stdout=out), demo)

    shown = [
        (int(m[1]), int(m[2]), m[3])
        for m in re.finditer(
            r"^  partition (\d+) offset (\d+) at (\d\d:\d\d:\d\d): ", out.getvalue(), re.M
        )
    ]
    sink = [
        (r["timestamp"], r["partition"], r["offset"])
        for t in io_topics.topic(wh, demo.OUTPUT_TOPIC).read_partitions()
        for r in t.to_pylist()
    ]
    newest = sorted(sink)[-10:]
    assert len(sink) > 10 and len(newest) == 10
    assert [(p, o) for p, o, _ in shown] == [(p, o) for _, p, o in newest], out.getvalue()
    assert [t for _, _, t in shown] == [
        datetime.fromtimestamp(ts / 1000, UTC).strftime("%H:%M:%S") for ts, _, _ in newest
    ]
