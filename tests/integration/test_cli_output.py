"""What a person sees on the terminal, through the installed ``lakestate`` command (the
venv's console script, run bare from another directory): Spark's and Ivy's output goes to
the invocation's log file, a failing record is one error line naming it plus the log's path
(the traceback is in the log), ``--quiet`` prints nothing and ``--json`` one JSON result."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable
from engine_helpers import APPS, produce

pytestmark = pytest.mark.integration

LAKESTATE = Path(sys.executable).parent / "lakestate"

# inprocess_max_records per transport: 0 is always Spark.
TRANSPORTS = {"spark": 0, "in_process": 10**9}

FAILING_APP = """
import lakestate as ls


def check(value):
    if value["amount"] == 13:
        raise ValueError("amount 13 is unlucky")
    return value


b = ls.StreamsBuilder()
(
    b.stream("events")
    .map_values(check)
    .group_by_key()
    .count(ls.Materialized.as_("counts"))
    .to_stream()
    .to("counts-out")
)
app = ls.App("fails", b.build(), {{"lakestate.inprocess.max.records": {limit}}})
"""


def _events(n: int, bad_offset: int | None = None) -> list[dict]:
    return [
        {
            "key": f"k{i % 3}",
            "value": {"amount": 13 if i == bad_offset else 1 + i % 4},
            "timestamp": 1_000 + i,
        }
        for i in range(n)
    ]


def _lakestate(cwd: Path, log_dir: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "LAKESTATE_LOG_DIR": str(log_dir)}
    env.pop("LAKESTATE_SPARK_MASTER", None)
    return subprocess.run(
        [str(LAKESTATE), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=900
    )


def _rows(path: Path) -> int:
    if not (path / "_delta_log").is_dir():
        return 0
    return DeltaTable(str(path)).to_pyarrow_table().num_rows


def _logs(log_dir: Path) -> list[Path]:
    return sorted(log_dir.glob("lakestate-*.log"))


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
def test_a_failing_record_is_one_error_line_and_the_log_path(spark, warehouse, tmp_path, transport):
    produce(spark, warehouse, "events", _events(20, bad_offset=11), partitions=1)
    app = tmp_path / "fails.py"
    app.write_text(FAILING_APP.format(limit=TRANSPORTS[transport]))
    log_dir = tmp_path / "logs"
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()

    proc = _lakestate(
        cwd, log_dir, "--warehouse", warehouse.root, "run", str(app),
        "--state-dir", str(tmp_path / "state"), "--master", "local[2]",
    )  # fmt: skip

    assert proc.returncode == 1, proc.stdout + proc.stderr
    where = "in Spark" if transport == "spark" else "in this process, no Spark"
    # Through Spark, its executors own the stores (the default on a local master too).
    state = ["state: on Spark's executors (each brings its tasks' stores up itself)"]
    assert proc.stdout.splitlines() == [
        f"transport: {where} (20 records pending; lakestate.inprocess.max.records "
        f"{TRANSPORTS[transport]})",
        *(state if transport == "spark" else []),
    ]
    error, full_log = proc.stderr.splitlines()
    assert error.startswith(
        "lakestate run: error: app fails: batch of tasks 0_0 failed and committed nothing: "
    ), error
    for part in (
        "node KSTREAM-MAPVALUES-0000000001",
        "topic 'events' partition 0 offset 11",
        "key='k2'",
        "ValueError: amount 13 is unlucky",
        # What to do: the handler's setting and values, and where skipped records would go.
        "processing.exception.handler is log_and_fail",
        "set processing.exception.handler to log_and_continue (values: log_and_fail, "
        "log_and_continue) to skip failing records to the dead-letter topic "
        "'fails-dead-letters' (errors.dead.letter.queue.topic.name)",
    ):
        assert part in error, (part, error)
    [log] = _logs(log_dir)
    assert full_log == f"full log: {log}"
    text = log.read_text()
    assert "Traceback (most recent call last)" in text
    assert 'raise ValueError("amount 13 is unlucky")' in text  # the app's own frame
    if transport == "spark":
        assert "PythonException" in text and "log4j" in text  # Spark's own output
    # Nothing committed: no progress row, no output record.
    apps = Path(warehouse.root) / "apps" / "fails"
    assert _rows(apps / "_progress") == 0
    assert _rows(Path(warehouse.root) / "topics" / "counts-out") == 0


def test_dead_letters_are_counted_apart_and_say_where_they_went(spark, warehouse, tmp_path):
    """Under log_and_continue a skipped record is not an output record: the batch line, the
    run's last line and ``--json`` count it apart and name the dead-letter topic."""
    produce(spark, warehouse, "events", _events(3, bad_offset=1), partitions=1)
    app = tmp_path / "skips.py"
    app.write_text(
        FAILING_APP.format(limit=10**9).replace(
            '{"lakestate.inprocess.max.records": 1000000000}',
            '{"processing.exception.handler": "log_and_continue"}',
        )
    )
    assert "log_and_continue" in app.read_text()
    log_dir = tmp_path / "logs"
    common = ["--warehouse", warehouse.root, "run", str(app)]

    proc = _lakestate(tmp_path, log_dir, *common, "--state-dir", str(tmp_path / "s1"))

    assert proc.returncode == 0 and proc.stderr == "", proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    batch = next(line for line in lines if line.startswith("batch "))
    assert batch.startswith(
        "batch 0_0:1: 3 records, 2 output records, 1 skipped to dead-letter topic "
        "fails-dead-letters, "
    ), batch
    assert lines[-1] == (
        "ran 1 batch(es), 3 records; 1 record skipped to dead-letter topic fails-dead-letters "
        "(lakestate consume fails-dead-letters)"
    )
    topics = Path(warehouse.root) / "topics"
    assert (_rows(topics / "counts-out"), _rows(topics / "fails-dead-letters")) == (2, 1)

    produce(spark, warehouse, "events", _events(3, bad_offset=2), partitions=1)
    as_json = _lakestate(tmp_path, log_dir, *common, "--state-dir", str(tmp_path / "s1"), "--json")
    assert as_json.returncode == 0 and as_json.stderr == "", as_json.stderr
    result = json.loads(as_json.stdout)
    assert (result["dead_letters"], result["dead_letter_topic"], result["skipped"]) == (
        1,
        "fails-dead-letters",
        None,
    )
    [figures] = result["per_batch"]
    assert (figures["records"], figures["output_records"], figures["dead_letters"]) == (3, 2, 1)


def test_produce_names_where_a_line_is_wrong(warehouse, tmp_path, capsys):
    """A line cut short is wrong at its end (not at "column 1" of a next line); a lone
    surrogate escape names its field, before the topic is created."""
    from lakestate.cli import main

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"key": "a", "value": 1}\n{"key": "b", "value": \n{"key": "c" "value": 1}\n')
    assert main(["--warehouse", warehouse.root, "--json", "produce", "t", str(bad)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[:3] == [
        "lakestate produce: error: 2 invalid lines, nothing written:",
        "  line 2: not valid JSON: Expecting value at the end of the line",
        "  line 3: not valid JSON: Expecting ',' delimiter at column 13",
    ]
    bad.write_text('{"key": "a", "value": "\\ud800"}\n{"key": "\\udc00", "value": 1}\n')
    assert main(["--warehouse", warehouse.root, "produce", "t", str(bad)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "lakestate produce: error: 2 invalid records, nothing written:"
    assert err[1].startswith("  line 1: value holds a lone surrogate '\\ud800'"), err
    assert err[2].startswith("  line 2: key holds a lone surrogate '\\udc00'"), err
    assert warehouse.list_topics() == []  # no empty topic left behind


def test_a_run_through_spark_prints_only_lakestate_lines(spark, warehouse, tmp_path):
    """Spark starts (log4j warns; Ivy resolves the jars on a first start): the terminal shows
    lakestate's lines only, and ``--json`` makes them one JSON document."""
    produce(spark, warehouse, "events", _events(30), partitions=1)
    app = tmp_path / "counts_spark.py"
    source = (APPS / "counts.py").read_text()
    app.write_text(
        source.replace(
            '{"statestore.uncommitted.max.records": 100_000}',
            '{"statestore.uncommitted.max.records": 100_000, "lakestate.inprocess.max.records": 0}',
        )
    )
    assert app.read_text() != source
    log_dir = tmp_path / "logs"
    common = ["--warehouse", warehouse.root, "--master", "local[2]"]
    state = ["--state-dir", str(tmp_path / "state")]

    proc = _lakestate(tmp_path, log_dir, *common, "run", str(app), *state, "--json")

    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    [line] = proc.stdout.splitlines()
    result = json.loads(line)
    assert result["transport"] == "spark"
    assert (result["batches"], result["records"], result["caught_up"]) == (1, 30, False)
    [batch] = result["per_batch"]
    assert batch["tasks"] == {"0_0": 1} and batch["records"] == 30
    [log] = _logs(log_dir)
    text = log.read_text()
    # log4j's output (Ivy's too on a first start; later ones take the recorded jars)
    assert "log4j" in text
    assert "transport: in Spark (30 records pending" in text  # lakestate's lines too


def test_a_spark_sql_error_is_one_line_and_its_stack_goes_to_the_log(spark, warehouse, tmp_path):
    """pyspark prints a failed query's error and Java stack as JSON on stderr itself: under
    the command, that goes to the log file; the terminal gets the one error line."""
    produce(spark, warehouse, "events", _events(3), partitions=1)
    log_dir = tmp_path / "logs"
    proc = _lakestate(
        tmp_path, log_dir, "--json", "--warehouse", warehouse.root, "--master", "local[1]",
        "sql", "--engine", "spark", "SELECT nope FROM events",
    )  # fmt: skip
    assert (proc.returncode, proc.stdout) == (1, ""), proc.stderr
    error, full_log = proc.stderr.splitlines()
    assert error.startswith("lakestate sql: error: [UNRESOLVED_COLUMN"), error
    [log] = _logs(log_dir)
    assert full_log == f"full log: {log}"
    text = log.read_text()
    assert "ERROR SQLQueryContextLogger: [UNRESOLVED_COLUMN" in text  # pyspark's own record
    assert "\tat org.apache.spark.sql." in text  # the Java stack


def test_spark_from_plain_python_keeps_its_output_off_the_terminal(tmp_path):
    """``get_spark`` outside the command (a script, the README's ``state_frame`` example):
    the JVM's output (Ivy, log4j) goes to a log file of its own."""
    log_dir = tmp_path / "logs"
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESTATE_")}
    env["LAKESTATE_LOG_DIR"] = str(log_dir)
    code = (
        "from lakestate.runtime.spark_session import get_spark\n"
        "print(get_spark('local[1]').range(3).count())\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=900,
    )  # fmt: skip
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "3\n", ""), proc.stderr[-3000:]
    [log] = log_dir.glob("lakestate-spark-*.log")
    text = log.read_text()
    assert "log4j" in text  # (and Ivy's, on a start that resolves the jars)


def test_quiet_and_json(spark, warehouse, tmp_path):
    produce(spark, warehouse, "events", _events(30), partitions=1)
    log_dir = tmp_path / "logs"
    common = ["--warehouse", warehouse.root]
    run = ["run", str(APPS / "counts.py"), "--state-dir", str(tmp_path / "state")]

    quiet = _lakestate(tmp_path, log_dir, *common, "--quiet", *run, "--max-records", "10")
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "", "")

    as_json = _lakestate(
        tmp_path, log_dir, *common, *run, "--json", "--max-records", "10", "--until-caught-up"
    )
    assert as_json.returncode == 0 and as_json.stderr == ""
    [line] = as_json.stdout.splitlines()
    result = json.loads(line)
    assert {k: result[k] for k in ("batches", "records", "caught_up", "busy", "transport")} == {
        "batches": 2,
        "records": 20,
        "caught_up": True,
        "busy": False,
        "transport": "in_process",
    }
    assert [(b["tasks"], b["records"], b["replayed"]) for b in result["per_batch"]] == [
        ({"0_0": 2}, 10, []),
        ({"0_0": 3}, 10, []),
    ]
    assert all(b["output_records"] > 0 and b["seconds"] >= 0 for b in result["per_batch"])

    plain = _lakestate(tmp_path, log_dir, *common, *run)
    assert plain.returncode == 0 and plain.stderr == ""
    assert plain.stdout.splitlines() == [
        "caught up: no new input",
        "ran 0 batch(es), 0 records, caught up",
    ]

    # Errors still show under --quiet, on stderr, with the log's path.
    missing = _lakestate(tmp_path, log_dir, *common, "--quiet", "run", str(tmp_path / "no.py"))
    assert missing.returncode == 1 and missing.stdout == ""
    error, full_log = missing.stderr.splitlines()
    assert error.startswith("lakestate run: error: ") and "no.py" in error, error

    logs = _logs(log_dir)
    assert len(logs) == 4  # one per invocation
    assert Path(full_log.removeprefix("full log: ")) in logs
    quiet_log = next(p for p in logs if "--quiet run" in p.read_text())
    assert "batch 0_0:1: 10 records" in quiet_log.read_text()  # said to the log, not printed


def _on_a_terminal(cwd: Path, log_dir: Path, *args: str) -> tuple[int, str]:
    """Run ``lakestate`` with stdout and stderr on a pseudo-terminal: its exit code and all
    it wrote there."""
    import pty

    master, slave = pty.openpty()
    env = {**os.environ, "LAKESTATE_LOG_DIR": str(log_dir), "COLUMNS": "120", "TERM": "xterm"}
    proc = subprocess.Popen(
        [str(LAKESTATE), *args], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
        stdout=slave, stderr=slave,
    )  # fmt: skip
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return proc.wait(timeout=900), b"".join(chunks).decode(errors="replace")


def test_progress_bars_on_a_terminal_only(spark, warehouse, tmp_path):
    """A restore, a run's records and a compaction draw bars on a terminal; --quiet and a
    pipe draw none."""
    produce(spark, warehouse, "events", _events(30), partitions=1)
    log_dir = tmp_path / "logs"
    common = ["--warehouse", warehouse.root]
    state = tmp_path / "state"
    run = ["run", str(APPS / "counts.py"), "--state-dir", str(state), "--max-records", "10"]
    code, first = _on_a_terminal(tmp_path, log_dir, *common, *run)
    assert code == 0, first
    assert "counts: records" in first  # the run's bar
    assert "ran 1 batch(es), 10 records" in first

    # The local state lost: the next run restores it, with a bar per store.
    import shutil

    shutil.rmtree(state)
    code, second = _on_a_terminal(tmp_path, log_dir, *common, *run)
    assert code == 0, second
    assert "restore counts task 0_0 counts: rows" in second
    assert "task 0_0: restored" in second

    code, compacted = _on_a_terminal(tmp_path, log_dir, *common, "compact", "counts")
    assert code == 0, compacted
    assert "compact counts: store tasks" in compacted

    code, quiet = _on_a_terminal(tmp_path, log_dir, *common, "--quiet", *run)
    assert (code, quiet) == (0, "")
    piped = _lakestate(tmp_path, log_dir, *common, *run)
    assert piped.returncode == 0 and piped.stderr == ""
    assert "records" in piped.stdout and "counts: records" not in piped.stdout
