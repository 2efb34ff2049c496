"""Runs of one app never fail because another run of it is active: a run that finds the
instance's lock held waits for it (``run_app(lock_wait_s=...)``, ``lakestate run --wait``),
then processes what is new or finds nothing; if the other run still holds the lock when the
wait is over, it does nothing and succeeds (``RunResult.busy``).

Which run gets the lock first is not left to timing: the test holds the app's lock itself
(as an active run does) until both runs have said they are waiting, then lets go."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from engine_helpers import APPS, FAST_TEST_CONF, events, produce, state_rows, topic_rows
from lakestate import run_app
from lakestate.runtime.run_lock import instance_lock
from lakestate.warehouse import Warehouse

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
WAITING = "waiting as long as it takes for it to finish"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESTATE_")}
    env.update(LAKESTATE_SPARK_MASTER="local[1]", LAKESTATE_SPARK_CONF=json.dumps(FAST_TEST_CONF))
    return env


def _start(args: list[str], out: Path) -> subprocess.Popen:
    with open(out, "w", encoding="utf-8") as sink:
        return subprocess.Popen(
            [sys.executable, *args], env=_env(), cwd=REPO, stdout=sink, stderr=subprocess.STDOUT
        )


def _until_all_say(text: str, outs: list[Path], procs: list[subprocess.Popen]) -> None:
    """Poll the runs' output until each has printed ``text`` (a safety bound, not a timing
    assertion: a run that exits first fails the test with its output)."""
    for _ in range(3000):
        said = [out.read_text(encoding="utf-8") for out in outs]
        if all(text in s for s in said):
            return
        for proc, s in zip(procs, said, strict=True):
            assert proc.poll() is None, f"a run ended before waiting:\n{s}"
        time.sleep(0.1)
    raise AssertionError(f"the runs never said {text!r}: {said}")


def test_two_runs_that_find_the_app_running_wait_then_both_succeed(spark, tmp_path):
    records = events(60, seed=21)
    reference = Warehouse(tmp_path / "reference")
    produce(spark, reference, "events", records, partitions=2)
    run_app(
        str(APPS / "counts.py"),
        warehouse=reference.root,
        state_dir=str(tmp_path / "ref-state"),
        max_records=20,
        until_caught_up=True,
        say=lambda _: None,
    )

    wh = Warehouse(tmp_path / "wh")
    produce(spark, wh, "events", records, partitions=2)
    state = tmp_path / "state"
    app = str(APPS / "counts.py")
    through_api = [
        "-c",
        "import math; from lakestate import run_app; "
        f"r = run_app({app!r}, warehouse={wh.root!r}, state_dir={str(state)!r}, "
        "max_records=20, until_caught_up=True, lock_wait_s=math.inf); "
        "print('records', r.records, 'busy', r.busy)",
    ]
    through_cli = [
        "-m", "lakestate.cli", "run", app, "--warehouse", wh.root, "--state-dir", str(state),
        "--max-records", "20", "--until-caught-up", "--wait", "inf",
    ]  # fmt: skip
    outs = [tmp_path / "api.out", tmp_path / "cli.out"]
    with instance_lock(str(state), "counts") as held:  # an active run of the app
        assert held
        procs = [_start(through_api, outs[0]), _start(through_cli, outs[1])]
        _until_all_say(WAITING, outs, procs)
    codes = [p.wait(timeout=600) for p in procs]
    said = [out.read_text(encoding="utf-8") for out in outs]
    assert codes == [0, 0], said
    assert all("the other run of app counts finished" in s for s in said), said
    assert "busy False" in said[0] and "another run was active" not in said[1], said
    # One of them processed the input, the other found nothing new (or the rest of it).
    assert any("caught up" in s for s in said)

    # Every record exactly once: the sinks and state equal a single run's.
    for topic in ("counts-out", "sums-out"):
        assert topic_rows(spark, wh, topic) == topic_rows(spark, reference, topic)
    for store in ("counts", "sums"):
        assert state_rows(spark, wh, "counts", store) == state_rows(
            spark, reference, "counts", store
        )
    positive = Counter(r["key"] for r in records if r["value"]["amount"] > 0)
    assert state_rows(spark, wh, "counts", "counts") == dict(positive)


def test_a_run_whose_wait_runs_out_does_nothing_and_succeeds(spark, tmp_path):
    wh = Warehouse(tmp_path / "wh")
    produce(spark, wh, "events", events(20, seed=22), partitions=2)
    state = tmp_path / "state"
    said: list[str] = []
    with instance_lock(str(state), "counts"):  # an active run that outlasts the wait
        result = run_app(
            str(APPS / "counts.py"),
            warehouse=wh.root,
            state_dir=str(state),
            until_caught_up=True,
            lock_wait_s=0.5,
            say=said.append,
        )
    assert result.busy and result.batches == [] and result.records == 0
    text = "\n".join(said)
    assert "is running on this instance" in text and "up to 0.5s" in text
    assert "this run did nothing" in text
    assert not os.path.exists(os.path.join(wh.root, "apps", "counts", "_progress"))
    # The lock is free again: the next run processes everything.
    after = run_app(
        str(APPS / "counts.py"),
        warehouse=wh.root,
        state_dir=str(state),
        until_caught_up=True,
        say=lambda _: None,
    )
    assert after.caught_up and after.records == 20 and not after.busy


def test_without_a_wait_a_busy_run_exits_zero_through_the_cli(spark, tmp_path):
    wh = Warehouse(tmp_path / "wh")
    produce(spark, wh, "events", events(10, seed=23), partitions=2)
    state = tmp_path / "state"
    with instance_lock(str(state), "counts"):
        proc = subprocess.run(
            [sys.executable, "-m", "lakestate.cli", "run", str(APPS / "counts.py"),
             "--warehouse", wh.root, "--state-dir", str(state)],
            env=_env(), cwd=REPO, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        as_json = subprocess.run(
            [sys.executable, "-m", "lakestate.cli", "run", str(APPS / "counts.py"),
             "--warehouse", wh.root, "--state-dir", str(state), "--json"],
            env=_env(), cwd=REPO, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "this run did nothing" in proc.stdout
    assert "ran 0 batch(es), 0 records, another run was active" in proc.stdout
    # --json says why it did nothing.
    assert (as_json.returncode, as_json.stderr) == (0, ""), as_json.stderr
    result = json.loads(as_json.stdout)
    assert (result["skipped"], result["busy"], result["batches"]) == ("locked", True, 0)
