"""The main job (``lakestate demo``, what ``scripts/main.sh`` runs), in both modes: by
default each of the DAG's runs chooses its transport (a few records: in process) and says
so; with ``--spark`` every run goes through Spark (local[*], the DAGs' default connection)
and says so. Each mode's counts are the sample's, per user.

The default mode is checked on the README's own first command, ``bash scripts/main.sh``
(tests/e2e/test_readme.py calls ``check_default_mode`` on its output): that run is the
same command on a new warehouse, so it is not run a second time here."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]

RECORDS = 40
RUNS = ("run_a", "run_b")


def _demo_module():
    spec = importlib.util.spec_from_file_location(
        "lakestate_main_job_demo", REPO / "jobs" / "demo.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _demo(env: dict[str, str], *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "lakestate.cli", "demo", "--records", str(RECORDS), *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert proc.returncode == 0, f"lakestate demo {args} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def _transport_lines(out: str) -> dict[str, str]:
    """Per run task, the transport line the demo printed for it."""
    found = re.findall(r"^  (run_\w+): (transport: .*)$", out, re.MULTILINE)
    return dict(found)


def _counts(out: str) -> dict[str, int]:
    """The per-user counts the demo printed (its store's SQL view)."""
    rows = re.findall(r'^  "(user-\d+)"\t(\d+)\t\(task \d+\)$', out, re.MULTILINE)
    return {user: int(count) for user, count in rows}


def _expected(records: int) -> dict[str, int]:
    """Per user, the positive-amount events of one demo run's sample of ``records`` on a
    new warehouse (a run's sample is seeded with the records already in the topic: 0)."""
    demo = _demo_module()
    counts: Counter[str] = Counter()
    for user, value, _ in demo.sample_events(records, seed=0):
        counts[user] += value["amount"] > 0
    return {user: n for user, n in counts.items() if n}


def check_default_mode(out: str) -> None:
    """``out``, the output of ``lakestate demo`` without ``--spark`` on a new warehouse:
    each run chose the in-process transport (few records) and said so, and the counts are
    the sample's."""
    assert "local Spark" not in out, out
    assert "each run choosing its transport" in out, out
    said = _transport_lines(out)
    assert sorted(said) == list(RUNS), out
    for line in said.values():
        assert re.fullmatch(
            r"transport: in this process, no Spark \(\d+ records pending; "
            r"lakestate\.inprocess\.max\.records 2000000\)",
            line,
        ), out
    produced = re.search(r"^demo: produced (\d+) sample events", out, re.MULTILINE)
    assert produced, out
    assert _counts(out) == _expected(int(produced.group(1))), out


def test_main_job_on_spark_says_each_runs_transport(airflow_env, tmp_path: Path) -> None:
    """(scripts/airflow.sh migrates the isolated Airflow's database on its first use.)"""
    env = airflow_env.environ(
        {
            "LAKESTATE_WAREHOUSE": str(tmp_path / "warehouse"),
            "LAKESTATE_STATE_DIR": str(tmp_path / "state"),
        }
    )
    out = _demo(env, "--spark")
    assert "on the Spark transport (--spark)" in out, out
    said = _transport_lines(out)
    assert sorted(said) == list(RUNS), out
    for line in said.values():
        assert re.fullmatch(
            r"transport: in Spark \(--transport spark; \d+ records pending\), master local\[\*\]",
            line,
        ), out
    assert _counts(out) == _expected(RECORDS), out
