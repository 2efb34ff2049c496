"""The two transports of a batch's processing (runtime/inprocess.py and
runtime/spark_transport.py) give the same tables: the same sink and repartition records at
the same offsets, the same state, the same progress, over many batches with the local state
lost in between. A small run in a fresh process starts no JVM. The transport a run asks for
(``run_app(transport=...)``, ``lakestate run --transport``, the app's
``lakestate.transport``) is the one it runs on, whatever the threshold says; a bad value is
a clear error."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from engine_helpers import APPS, driver_outputs, events, produce, state_rows, topic_rows
from lakestate import run_app
from lakestate.app import load_app
from lakestate.errors import StreamsException
from lakestate.io import delta_commits
from lakestate.io import topics as io_topics
from lakestate.io.partitioner import partition_for
from lakestate.read.spark_engine import state_frame
from lakestate.runtime import transport as transports
from lakestate.testing import TopologyTestDriver
from lakestate.warehouse import Warehouse

pytestmark = pytest.mark.integration

# inprocess_max_records per transport: 0 is always Spark.
TRANSPORTS = {"spark": 0, "in_process": 10**9}


def _dedup_events(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    return [
        {
            "key": rng.choice([f"k{j}" for j in range(6)] + [None]),
            "value": {"n": i},
            "timestamp": max(0, 100_000 + i * 2_000 + rng.randrange(-25_000, 25_000)),
        }
        for i in range(n)
    ]


def _global_phases() -> list[tuple[str, list[dict]]]:
    rng = random.Random(5)
    products = [
        {"key": f"p{rng.randrange(8)}", "value": {"price": i}, "timestamp": 500 + i}
        for i in range(10)
    ] + [{"key": f"p{rng.randrange(8)}", "value": None, "timestamp": 600}]
    purchases = [
        {
            "key": f"o{i}",
            "value": {"product": f"p{rng.randrange(9)}", "qty": rng.randrange(1, 4)},
            "timestamp": 1_000 + i,
        }
        for i in range(40)
    ]
    return [("products", products[:6]), ("purchases", purchases[:20])] + [
        ("products", products[6:]),
        ("purchases", purchases[20:]),
    ]


# app file -> (its topics as (name, partitions), phases of input, tables to compare).
APP_CASES = {
    # Two sub-topologies: the second reads the repartition topic the first writes.
    "regroup": (
        "regroup.py",
        [("events", 2)],
        [("events", events(80, seed=3))],
        ["per-user-out", "regroup-per-user-repartition"],
        ["per-user"],
    ),
    "global_table": (
        "global_join.py",
        [("products", 3), ("purchases", 2)],
        _global_phases(),
        ["priced"],
        [],
    ),
    # flat_map, split, merge, then a count after the key change: the first sub-topology's
    # records take chunk plans with a merge; two phases, the local state lost between.
    "branching": (
        "branching.py",
        [("events", 2)],
        [("events", events(80, seed=11)[:45]), ("events", events(80, seed=11)[45:])],
        ["routed", "per-tag-out", "branching-per-tag-repartition"],
        ["per-tag"],
    ),
    "dedup": (
        "dedup.py",
        [("events", 2)],
        [("events", _dedup_events(80, seed=21))],
        ["unique-events"],
        ["seen-keys"],
    ),
}


def _run_phases(spark, tmp_path, case: str, transport: str, asked: str | None = None) -> tuple:
    """Run the case's phases on ``transport`` (by the threshold); ``asked``: run_app's
    ``transport`` instead, with the threshold set to choose the other one."""
    app_file, topics, phases, out_topics, stores = APP_CASES[case]
    app_name = app_file.removesuffix(".py")
    wh = Warehouse(tmp_path / f"wh-{transport}")
    limit = TRANSPORTS[transport]
    if asked is not None:
        limit = TRANSPORTS["spark" if asked == transports.IN_PROCESS else "in_process"]
    state = tmp_path / f"state-{transport}"
    for topic, partitions in topics:
        io_topics.topic(wh, topic).create(partitions)
    said: list[str] = []
    for n, (topic, records) in enumerate(phases):
        io_topics.topic(wh, topic).append(records)
        if n == 1:
            shutil.rmtree(state, ignore_errors=True)  # the next run restores from Delta
        run_app(
            str(APPS / app_file),
            warehouse=wh.root,
            state_dir=str(state),
            max_records=7,
            until_caught_up=True,
            inprocess_max_records=limit,
            say=said.append,
            transport=asked,
        )
    lines = {line for line in said if line.startswith("transport:")}
    # Every progress row (metric totals included), but for when and by which run it was
    # written.
    rows = delta_commits.open_table(wh.progress_path(app_name)).to_pyarrow_table()
    same = [c for c in rows.column_names if c not in ("run_id", "at_ms")]
    recorded = sorted(tuple(r.values()) for r in rows.select(same).to_pylist())
    tables = {t: topic_rows(spark, wh, t) for t in out_topics}
    state_of = {
        s: sorted(tuple(r) for r in state_frame(spark, wh, app_name, s).collect()) for s in stores
    }
    return lines, recorded, tables, state_of


@pytest.mark.parametrize("case", sorted(APP_CASES))
def test_in_process_gives_what_spark_gives(spark, tmp_path, case):
    spark_said, *on_spark = _run_phases(spark, tmp_path, case, "spark")
    in_process_said, *in_process = _run_phases(spark, tmp_path, case, "in_process")
    assert spark_said and all("in Spark" in line for line in spark_said)
    assert in_process_said and all("in this process" in line for line in in_process_said)
    recorded, tables, _ = in_process
    assert len(recorded) > 4 and all(tables.values())
    assert in_process == on_spark
    if case == "branching":  # and what the driver gives
        counts_state = state_rows(
            spark, Warehouse(tmp_path / "wh-in_process"), "branching", "per-tag"
        )
        _check_branching(tables, counts_state)
    if case == "dedup":  # and what the driver gives
        got = [(p, k, v, ts) for p, _, k, v, ts in tables["unique-events"]]
        records = APP_CASES[case][2][0][1]
        assert (
            got
            == driver_outputs("dedup.py", records, 2, ["unique-events"], with_partition=True)[
                "unique-events"
            ]
        )


def _interleaves(got: list, one: list, other: list) -> bool:
    """Whether ``got`` is ``one`` and ``other`` interleaved, each in its order."""
    if len(got) != len(one) + len(other):
        return False
    can = [[False] * (len(other) + 1) for _ in range(len(one) + 1)]
    can[0][0] = True
    for i in range(len(one) + 1):
        for j in range(len(other) + 1):
            if i and can[i - 1][j] and one[i - 1] == got[i + j - 1]:
                can[i][j] = True
            if j and can[i][j - 1] and other[j - 1] == got[i + j - 1]:
                can[i][j] = True
    return can[len(one)][len(other)]


def _check_branching(tables: dict, counts_state: dict) -> None:
    """The engine's tables against the test driver: "routed" per input partition (each its
    own task) record for record, in each partition of the topic the two tasks' records
    interleaved, each task's in the driver's order; the counts, whose order across the
    two upstream tasks depends on batch ends, as the set of updates and as final state."""
    records = APP_CASES["branching"][2][0][1] + APP_CASES["branching"][2][1][1]
    routed = driver_outputs("branching.py", records, 2, ["routed"], with_partition=True)
    per_task = [[(k, v, ts) for p, k, v, ts in routed["routed"] if p == task] for task in (0, 1)]
    for part in range(2):
        got = [(k, v, ts) for p, _, k, v, ts in tables["routed"] if p == part]
        assert all(partition_for(k, 2) == part for k, _, _ in got)
        expected = [[r for r in rows if partition_for(r[0], 2) == part] for rows in per_task]
        assert _interleaves(got, *expected), part
    assert any(k is None for _, _, k, _, _ in tables["routed"])  # a null key, kept here
    app = load_app(APPS / "branching.py")
    with TopologyTestDriver(app.topology, {"application.id": app.name}) as d:
        source = d.create_input_topic("events")
        for r in records:
            source.pipe_input(r["key"], r["value"], timestamp=r["timestamp"])
        counts = d.create_output_topic("per-tag-out").read_records_to_list()
        final = dict(d.get_key_value_store("per-tag").all())
    assert sorted((k, v) for _, _, k, v, _ in tables["per-tag-out"]) == sorted(
        (r.key, r.value) for r in counts
    )
    assert counts_state == final and None not in final and len(final) > 3


def test_the_threshold_chooses_the_transport_from_the_pending_input(
    spark, warehouse, tmp_path, monkeypatch
):
    produce(spark, warehouse, "events", events(40, seed=4), partitions=2)
    said: list[str] = []
    # As on a cluster: with a local master a run is in process at any size (below).
    monkeypatch.setattr(transports, "local_master", lambda master: False)

    def run(limit: int | None) -> int:
        return run_app(
            str(APPS / "counts.py"),
            warehouse=warehouse.root,
            state_dir=str(tmp_path / "state"),
            max_records=15,
            max_batches=1,
            inprocess_max_records=limit,
            say=said.append,
        ).records

    first = run(39)  # 40 pending, though this run's one batch reads at most 30 of them
    assert first < 40
    assert run(25) == 40 - first
    run(None)  # nothing pending: no choice to make
    choices = [line for line in said if line.startswith("transport:")]
    assert choices == [
        f"transport: in Spark (40 records pending; {transports.MAX_RECORDS_CONFIG} 39)",
        f"transport: in this process, no Spark ({40 - first} records pending; "
        f"{transports.MAX_RECORDS_CONFIG} 25)",
    ]
    with pytest.raises(Exception, match=transports.MAX_RECORDS_CONFIG):
        run(-1)
    # Spark's master local (the tests' local[2]): in process whatever the pending records.
    monkeypatch.undo()
    assert transports.local_master(None)
    produce(spark, warehouse, "events", events(40, seed=5), partitions=2)
    run(39)
    assert [line for line in said if line.startswith("transport:")][-1] == (
        f"transport: in this process, no Spark (40 records pending; "
        f"{transports.MAX_RECORDS_CONFIG} 39; Spark's master is local: in process at any size)"
    )


def test_a_small_run_in_a_fresh_process_starts_no_jvm(spark, warehouse, tmp_path):
    """A scheduled run with a few new records reads them with delta-rs and processes them
    in the driver: no JVM (the app's first run created its tables, with Spark)."""
    records = events(60, seed=9)
    produce(spark, warehouse, "events", records[:20], partitions=2)
    state = tmp_path / "state"
    run_app(
        str(APPS / "counts.py"),
        warehouse=warehouse.root,
        state_dir=str(state),
        until_caught_up=True,
        say=lambda _: None,
    )
    io_topics.topic(warehouse, "events").append(records[20:])
    code = (
        "import pyspark; from lakestate import run_app; "
        f"r = run_app({str(APPS / 'counts.py')!r}, warehouse={warehouse.root!r}, "
        f"state_dir={str(state)!r}, until_caught_up=True); "
        "print('RUN', r.caught_up, r.records); "
        "print('JVM', pyspark.SparkContext._active_spark_context is not None)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "RUN True 40" in proc.stdout and "JVM False" in proc.stdout, proc.stdout
    assert "transport: in this process" in proc.stdout
    # The same result as one run of everything.
    reference = Warehouse(tmp_path / "reference")
    produce(spark, reference, "events", records, partitions=2)
    run_app(
        str(APPS / "counts.py"),
        warehouse=reference.root,
        state_dir=str(tmp_path / "reference-state"),
        until_caught_up=True,
        say=lambda _: None,
    )
    for store in ("counts", "sums"):
        assert state_rows(spark, warehouse, "counts", store) == state_rows(
            spark, reference, "counts", store
        )


def test_the_transport_asked_for_is_the_one_that_runs(spark, tmp_path):
    """``run_app(transport=...)`` wins over the threshold (set to choose the other one), and
    the two give the same tables and progress."""
    spark_said, *on_spark = _run_phases(spark, tmp_path, "regroup", "spark", asked="spark")
    in_process_said, *in_process = _run_phases(
        spark, tmp_path, "regroup", "in_process", asked="inprocess"
    )
    assert spark_said and all(
        line.startswith("transport: in Spark (--transport spark; ") for line in spark_said
    ), spark_said
    assert in_process_said and all(
        line.startswith("transport: in this process, no Spark (--transport inprocess; ")
        for line in in_process_said
    ), in_process_said
    recorded, tables, state_of = in_process
    assert len(recorded) > 4 and all(tables.values()) and all(state_of.values())
    assert in_process == on_spark


def test_a_bad_transport_is_a_clear_error(spark, warehouse, tmp_path):
    produce(spark, warehouse, "events", events(10, seed=2), partitions=2)
    with pytest.raises(StreamsException, match=r"transport.*one of auto, inprocess, spark.*'gpu'"):
        run_app(str(APPS / "counts.py"), warehouse=warehouse.root, transport="gpu")
    app = tmp_path / "bad_config.py"
    app.write_text(
        (APPS / "counts.py")
        .read_text()
        .replace(
            '{"statestore.uncommitted.max.records"',
            '{"lakestate.transport": "fast", "statestore.uncommitted.max.records"',
        )  # fmt: skip
    )
    with pytest.raises(StreamsException) as caught:
        run_app(str(app), warehouse=warehouse.root, state_dir=str(tmp_path / "state"))
    message = str(caught.value)
    assert "lakestate.transport in the config of app counts" in message and "'fast'" in message
    assert not (tmp_path / "state").exists()  # refused before anything was done


LAKESTATE = Path(sys.executable).parent / "lakestate"


def test_the_cli_option_overrides_the_app_config(spark, warehouse, tmp_path, capsys):
    """``lakestate run --transport inprocess`` on an app configured for Spark runs in
    process (no JVM in the command's process); without the option the app's config says
    (that run in this process, on the session's Spark: a fresh one would start a JVM)."""
    produce(spark, warehouse, "events", events(30, seed=6), partitions=2)
    app = tmp_path / "counts_on_spark.py"
    app.write_text(
        (APPS / "counts.py")
        .read_text()
        .replace(
            '{"statestore.uncommitted.max.records"',
            '{"lakestate.transport": "spark", "statestore.uncommitted.max.records"',
        )  # fmt: skip
    )
    env = {**os.environ, "LAKESTATE_LOG_DIR": str(tmp_path / "logs")}
    command = [str(LAKESTATE), "--warehouse", warehouse.root, "run", str(app),
               "--state-dir", str(tmp_path / "state"), "--max-batches", "1", "--max-records", "5"]  # fmt: skip
    proc = subprocess.run(
        [*command, "--transport", "inprocess"], env=env, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[0] == (
        "transport: in this process, no Spark (--transport inprocess; 30 records pending)"
    )
    log = next((tmp_path / "logs").glob("lakestate-*.log")).read_text()
    assert "log4j" not in log and "SparkContext" not in log  # no JVM started
    from lakestate.cli import main

    capsys.readouterr()
    assert main([*command[1:], "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert (document["transport"], document["batches"]) == ("spark", 1)
