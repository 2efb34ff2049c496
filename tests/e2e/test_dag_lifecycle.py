"""How a new DAG appears in a real Airflow, and the backfill command the README recommends.

A new DAG file is not in ``airflow dags list`` (which lists the metadata database) until the
dag-processor parses it, or until ``airflow dags reserialize`` does at once; lakestate's DAGs
are then unpaused (``is_paused_upon_creation=False``). ``airflow backfill create ...
--dry-run`` lists one run per schedule interval of the range (the runs themselves are tested
in test_demo_dag.py, through ``dag.test`` with run type backfill)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
NEW_DAG = "lakestate_demo_lifecycle"


def _airflow(airflow, env: dict[str, str], *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "airflow", *args],
        env=airflow.environ(env),
        cwd=airflow.home,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, (
        f"airflow {' '.join(args)}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    return proc.stdout


def _listed(airflow, env: dict[str, str]) -> dict[str, str]:
    out = _airflow(airflow, env, "dags", "list", "-o", "json")
    (listing,) = [line for line in out.splitlines() if line.startswith(("[{", "[]"))]
    return {d["dag_id"]: str(d["is_paused"]) for d in json.loads(listing)}


def test_a_new_dag_appears_unpaused_after_reserialize(airflow, tmp_path: Path) -> None:
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "lifecycle.py").write_text(
        "from lakestate.airflow import make_dag\n"
        f"dag = make_dag({str(REPO / 'jobs' / 'demo.py')!r}, dag_id={NEW_DAG!r})\n",
        encoding="utf-8",
    )
    env = {"AIRFLOW__CORE__DAGS_FOLDER": str(dags)}
    assert NEW_DAG not in _listed(airflow, env)  # not parsed yet: not in the database
    _airflow(airflow, env, "dags", "reserialize")
    assert _listed(airflow, env).get(NEW_DAG) == "False"  # there, and not paused

    # The recommended backfill: one run per 5-minute interval, oldest first, one at a time.
    out = _airflow(
        airflow, env, "backfill", "create", "--dag-id", NEW_DAG,
        "--from-date", "2026-11-20T10:00:00+00:00", "--to-date", "2026-11-20T10:15:00+00:00",
        "--max-active-runs", "1", "--dry-run",
    )  # fmt: skip
    assert "max_active_runs = 1" in out
    planned = [
        t for t in ("10:00:00", "10:05:00", "10:10:00", "10:15:00") if f"2026-11-20 {t}" in out
    ]
    assert len(planned) == 4, out
