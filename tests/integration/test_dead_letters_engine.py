"""Exception handlers and the dead-letter topic in the engine, with each transport: records
that fail in processing or cannot be decoded are skipped as if they never arrived and land
in the dead-letter topic with the error, exactly once with their batch (SIGKILL at each
commit step, the dead-letter topic's included); the engine equals the test driver;
log-and-fail commits nothing; an unknown handler is refused before anything is written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable
from engine_helpers import APPS, FAST_TEST_CONF, events, produce, state_rows
from lakestate import run_app
from lakestate.app import App, load_app
from lakestate.checkpoint.layout import ensure_layout
from lakestate.errors import StreamsException
from lakestate.io.partitioner import partition_for
from lakestate.testing import TopologyTestDriver
from lakestate.warehouse import Warehouse

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
APP = str(APPS / "dead_letters.py")
N = 120
MAX_RECORDS = 15
TRANSPORTS = {"spark": 0, "in_process": 10**9}
SINKS = ("copy", "sums-out")
DLQ = "bad-events"
# Records that are not JSON, appended to partition 0 after the generated ones.
BAD = [("'\"k1\"'", "'{not json'"), ("'not json'", "'{\"amount\": 1}'")]


def _records():
    return events(N, seed=21)


def _produce(spark, wh: Warehouse) -> int:
    """The generated records, then the bad ones at the end of partition 0; returns the
    offset of the first bad one."""
    records = _records()
    produce(spark, wh, "events", records, partitions=2)
    first = sum(1 for r in records if partition_for(r["key"], 2) == 0)
    path = wh.topic_path("events")
    values = ", ".join(
        f"(0, {first + i}, {50_000 + i}, {key}, {value}, NULL)"
        for i, (key, value) in enumerate(BAD)
    )
    spark.sql(f"INSERT INTO delta.`{path}` VALUES {values}")
    return first


def _rows(wh: Warehouse, topic: str) -> list[dict]:
    """A topic's rows in partition, offset order (headers decoded)."""
    table = DeltaTable(wh.topic_path(topic)).to_pyarrow_table().to_pylist()
    for row in table:
        row["headers"] = None if row["headers"] is None else json.loads(row["headers"])
    return sorted(table, key=lambda r: (r["partition"], r["offset"]))


def _run(wh: Warehouse, state: Path, transport: str, **kw):
    return run_app(
        APP,
        warehouse=wh.root,
        state_dir=str(state),
        max_records=MAX_RECORDS,
        until_caught_up=True,
        inprocess_max_records=TRANSPORTS[transport],
        say=lambda _: None,
        **kw,
    )


def _results(spark, wh: Warehouse) -> tuple:
    sinks = tuple(
        [(r["partition"], r["offset"], r["key"], r["value"], r["timestamp"]) for r in _rows(wh, t)]
        for t in SINKS
    )
    letters = [
        (r["partition"], r["offset"], r["key"], r["value"], r["timestamp"], _error(r["headers"]))
        for r in _rows(wh, DLQ)
    ]
    return (*sinks, letters, state_rows(spark, wh, "dead_letters", "sums"))


def _error(h: dict) -> tuple:
    return tuple(
        h[f"__streams.errors.{k}"]
        for k in ("exception", "message", "topic", "partition", "offset", "node", "handler")
    )


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
def test_failed_records_go_to_the_dead_letter_topic_and_the_engine_equals_the_driver(
    spark, tmp_path, transport
):
    wh = Warehouse(tmp_path / "wh")
    first_bad = _produce(spark, wh)
    result = _run(wh, tmp_path / "state", transport)
    records = _records()
    # The driver, with the app's config, per input partition (each one task).
    app = load_app(APP)
    want: dict[str, list] = {t: [] for t in SINKS}
    expected = []
    for p in range(2):
        with TopologyTestDriver(app.topology, {**app.config, "application.id": app.name}) as d:
            source = d.create_input_topic("events")
            for r in records:
                if partition_for(r["key"], 2) == p:
                    source.pipe_input(r["key"], r["value"], timestamp=r["timestamp"])
            for t in SINKS:
                want[t] += [
                    (p, x.key, x.value, x.timestamp)
                    for x in d.create_output_topic(t).read_records_to_list()
                ]
            for x in d.create_output_topic(DLQ).read_records_to_list():
                expected.append(
                    (p, x.key, x.value, x.timestamp, x.headers["__streams.errors.offset"])
                )
    for topic in SINKS:
        got = [
            (r["partition"], json.loads(r["key"]), json.loads(r["value"]), r["timestamp"])
            for r in _rows(wh, topic)
        ]
        assert got == want[topic], topic
    letters = _rows(wh, DLQ)
    processing = [r for r in letters if r["headers"]["__streams.errors.handler"] == "processing"]
    assert expected, "the input must hold records that fail"
    assert [
        (
            int(r["headers"]["__streams.errors.partition"]),
            json.loads(r["key"]),
            json.loads(r["value"]),
            r["timestamp"],
            r["headers"]["__streams.errors.offset"],
        )
        for r in processing
    ] == sorted(expected, key=lambda x: x[0])
    for r in processing:
        h = r["headers"]
        assert h["__streams.errors.exception"] == "ValueError"
        assert h["__streams.errors.node"].startswith("KSTREAM-MAPVALUES-")
        assert h["__streams.errors.app"] == "dead_letters"
        assert "in checked" in h["__streams.errors.stacktrace"]
        # Partitioned like the source: by the key's hash.
        assert r["partition"] == partition_for(json.loads(r["key"]), 2)
    # The records that are not JSON: as read, with the error.
    bad = [r for r in letters if r["headers"]["__streams.errors.handler"] == "deserialization"]
    assert [(r["key"], r["value"], r["headers"]["__streams.errors.offset"]) for r in bad] == [
        ('"k1"', "{not json", str(first_bad)),
        ("not json", '{"amount": 1}', str(first_bad + 1)),
    ]
    assert all(r["headers"]["__streams.errors.node"] == "KSTREAM-SOURCE-0000000000" for r in bad)
    assert all(
        r["headers"]["__streams.errors.exception"] == "json.decoder.JSONDecodeError" for r in bad
    )
    # Counted: the progress rows' metrics (whether a row holds its batch's counts or the
    # totals so far, the rows of a task that skipped records show them).
    progress = DeltaTable(wh.progress_path("dead_letters")).to_pyarrow_table().to_pylist()
    counted = [_metric(json.loads(row["metrics"]), "dead-letter-records") for row in progress]
    assert sum(counted) >= len(letters) > 0
    assert max(counted) >= 1
    # The run counts them apart from its output records, and says where they went.
    assert (result.dead_letters, result.dead_letter_topic) == (len(letters), DLQ)
    assert sum(f["dead_letters"] for f in result.figures) == len(letters)
    assert sum(f["output_records"] for f in result.figures) == sum(len(_rows(wh, t)) for t in SINKS)


def _metric(metrics, name: str) -> float:
    """``name``'s figures in a metrics document, summed wherever they stand."""
    if isinstance(metrics, dict):
        return sum(
            v if k == name and isinstance(v, (int, float)) else _metric(v, name)
            for k, v in metrics.items()
        )
    return 0


def test_log_and_fail_with_a_dead_letter_topic_commits_nothing(spark, tmp_path):
    wh = Warehouse(tmp_path / "wh")
    produce(spark, wh, "events", _records(), partitions=2)
    app = load_app(APP)
    config = {k: v for k, v in app.config.items() if "handler" not in k}
    path = tmp_path / "fail_app.py"
    path.write_text(
        Path(APP).read_text().replace("app = ls.App(", "_app = ls.App(")
        + f"\napp = ls.App('dead_letters', b.build(), {config!r})\n"
    )
    with pytest.raises(StreamsException) as err:
        run_app(
            str(path),
            warehouse=wh.root,
            state_dir=str(tmp_path / "s"),
            until_caught_up=True,
            inprocess_max_records=10**9,
            say=lambda _: None,
        )
    message = str(err.value)
    assert "committed nothing" in message and "ValueError: total" in message
    assert "KSTREAM-MAPVALUES-" in message and "'events'" in message and "offset" in message
    assert "\n" not in message
    # What to do: the setting that skips such records, and the topic they would go to.
    assert "processing.exception.handler is log_and_fail" in message
    assert "set processing.exception.handler to log_and_continue" in message
    assert "dead-letter topic 'bad-events'" in message
    # No dead-letter topic: with log-and-fail nothing is ever written there.
    from lakestate.io import topics

    assert not topics.topic(wh, DLQ).exists()


def test_an_unknown_handler_or_a_dead_letter_topic_that_is_an_input_is_refused(spark, tmp_path):
    wh = Warehouse(tmp_path / "wh")
    produce(spark, wh, "events", _records()[:5], partitions=1)
    app = load_app(APP)
    for config, needle in (
        ({"processing.exception.handler": "continue"}, "processing.exception.handler"),
        (
            {
                "processing.exception.handler": "log_and_continue",
                "errors.dead.letter.queue.topic.name": "events",
            },
            "is one of the app's inputs",
        ),
    ):
        with pytest.raises(StreamsException, match=needle):
            ensure_layout(App(app.name, app.topology, config), wh)
    assert not os.path.exists(wh.app_path(app.name))
    topics = os.listdir(os.path.dirname(wh.topic_path("events")))
    assert [t for t in topics if not t.startswith(".")] == ["events"]


# -- exactly once under SIGKILL, with the dead-letter topic -----------------------------------

FAULT_POINTS = [
    "after_progress@2",
    f"after_sink:{DLQ}@2",
    "after_sink:copy@2",
    "after_sink:sums-out@2",
    "after_changelog:sums@2",
    "after_tables@3",
    "mid_local_commit@4",
]
# Through Spark, the kills where the dead-letter topic differs from any sink: the batch
# replayed after its progress row, and after its dead letters were written. The commit's
# other steps run the same driver code on both transports; test_exactly_once.py kills
# every one of them on both (each killed Spark run starts a JVM: ~40 s here).
FAULT_POINTS_BY_TRANSPORT = {"in_process": FAULT_POINTS, "spark": FAULT_POINTS[:2]}


def _run_in_subprocess(wh: Warehouse, state: Path, fault: str | None, limit: int):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESTATE_")}
    env["LAKESTATE_SPARK_MASTER"] = "local[2]"
    env["LAKESTATE_SPARK_CONF"] = json.dumps(FAST_TEST_CONF)
    if fault:
        env["LAKESTATE_FAULT"] = fault
    code = (
        "from lakestate import run_app; "
        f"run_app({APP!r}, warehouse={wh.root!r}, state_dir={str(state)!r}, "
        f"max_records={MAX_RECORDS}, until_caught_up=True, inprocess_max_records={limit})"
    )
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600, cwd=REPO
    )


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
def test_kill_at_every_commit_step_gives_the_dead_letters_exactly_once(spark, tmp_path, transport):
    # The uninterrupted run in process whatever the chain's transport: each transport's
    # uninterrupted run equals the driver (the test above), so equals this one.
    reference = Warehouse(tmp_path / "reference")
    _produce(spark, reference)
    _run(reference, tmp_path / "ref", "in_process")
    expected = _results(spark, reference)
    assert expected[2], "the input must hold records that fail"

    wh = Warehouse(tmp_path / "wh")
    _produce(spark, wh)
    state = tmp_path / "state"
    for point in FAULT_POINTS_BY_TRANSPORT[transport]:
        proc = _run_in_subprocess(wh, state, point, TRANSPORTS[transport])
        assert proc.returncode == -9, (point, proc.returncode, proc.stderr[-3000:])
    proc = _run_in_subprocess(wh, state, None, TRANSPORTS[transport])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _results(spark, wh) == expected


def test_without_a_dead_letter_topic_continue_writes_to_the_apps_default_one(spark, tmp_path):
    wh = Warehouse(tmp_path / "wh")
    first_bad = _produce(spark, wh)
    app = load_app(APP)
    config = {k: v for k, v in app.config.items() if k != "errors.dead.letter.queue.topic.name"}
    path = tmp_path / "default_app.py"
    path.write_text(
        Path(APP).read_text().replace("app = ls.App(", "_app = ls.App(")
        + f"\napp = ls.App('dead_letters', b.build(), {config!r})\n"
    )
    run_app(
        str(path),
        warehouse=wh.root,
        state_dir=str(tmp_path / "s"),
        until_caught_up=True,
        inprocess_max_records=10**9,
        say=lambda _: None,
    )
    letters = _rows(wh, "dead_letters-dead-letters")
    h = [r["headers"] for r in letters]
    offsets = {(x["__streams.errors.partition"], x["__streams.errors.offset"]) for x in h}
    assert ("0", str(first_bad)) in offsets and ("0", str(first_bad + 1)) in offsets
    assert any(r["headers"]["__streams.errors.handler"] == "processing" for r in letters)


_COUNTED_APP = """
import lakestate as ls

CALLS = {calls!r}


def checked(value):
    with open(CALLS, "a") as calls:
        calls.write(".")
    if value % 10 == 3:
        raise ValueError(f"value {{value}} ends in 3")
    return value


b = ls.StreamsBuilder()
b.stream("events").map_values(checked).to("out")
app = ls.App("counted", b.build(), {{"processing.exception.handler": "log_and_continue"}})
"""


def _counted_run(folder: Path, n: int) -> tuple[int, list, list, int]:
    """The counted app over ``n`` records in one task, every tenth failing, until caught
    up in process: its calls, the values out, the dead letters' values and its batches."""
    from lakestate.io import topics

    folder.mkdir()
    calls = folder / "calls"
    app = folder / "counted.py"
    app.write_text(_COUNTED_APP.format(calls=str(calls)))
    wh = Warehouse(folder / "wh")
    topics.topic(wh, "events").create(1)
    topics.topic(wh, "events").append(
        [{"key": f"k{i % 7}", "value": i, "timestamp": i} for i in range(n)]
    )
    result = run_app(
        str(app),
        warehouse=wh.root,
        state_dir=str(folder / "state"),
        until_caught_up=True,
        inprocess_max_records=10**9,
        say=lambda _: None,
    )
    out = [json.loads(r["value"]) for r in _rows(wh, "out")]
    letters = [json.loads(r["value"]) for r in _rows(wh, "counted-dead-letters")]
    return len(calls.read_text()), out, letters, len(result.batches)


def test_log_and_continue_costs_linear_in_the_records_not_in_the_failures(tmp_path):
    """Every tenth record fails: each failure used to replay its batch up to it, so twice
    the records (and failures) cost four times the calls; now the second failure of a batch
    ends it there, and twice the records cost twice the calls. The result is the same: the
    good records in order, every bad one a dead letter, once."""
    small, out, letters, batches = _counted_run(tmp_path / "small", 200)
    assert out == [i for i in range(200) if i % 10 != 3]
    assert letters == [i for i in range(200) if i % 10 == 3]
    assert batches > 1  # cut at failures
    large, out, letters, _ = _counted_run(tmp_path / "large", 400)
    assert out == [i for i in range(400) if i % 10 != 3]
    assert letters == [i for i in range(400) if i % 10 == 3]
    assert large <= 2.2 * small, (small, large)
    assert large <= 5 * 400, large
