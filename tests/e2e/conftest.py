"""Fixtures for the e2e tests: an isolated Airflow (its own AIRFLOW_HOME and SQLite database,
the repository's dags/ and plugins/) that the tests drive through subprocesses.

Airflow reads its configuration when it is imported, so nothing here imports Airflow: every
Airflow action runs in a fresh interpreter with the fixture's environment
(``tests/e2e/airflow_actions.py``), and so does the lakestate CLI.

The environment provides the Spark connection the DAGs use by default, as deployments do:
``AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type": "spark", "host": "local[*]"}'``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
ACTIONS = Path(__file__).resolve().with_name("airflow_actions.py")
SPARK_DEFAULT_CONN = json.dumps({"conn_type": "spark", "host": "local[*]"})

#: Variables of the developer's shell that would leak into the isolated Airflow or the jobs.
_DROPPED_PREFIXES = ("AIRFLOW_", "AIRFLOW__", "_AIRFLOW")
_DROPPED = (
    "LAKESTATE_WAREHOUSE",
    "LAKESTATE_STATE_DIR",
    "LAKESTATE_SPARK_MASTER",
    "PYSPARK_PYTHON",
)


def _tail(text: str, lines: int = 60) -> str:
    return "\n".join(text.splitlines()[-lines:])


@dataclass
class Airflow:
    """An isolated Airflow installation: its home and the environment its processes get."""

    home: Path
    env: dict[str, str]
    timings: dict[str, float] = field(default_factory=dict)

    def environ(self, extra: Mapping[str, str | None] | None = None) -> dict[str, str]:
        """The environment, with ``extra`` applied (a value of None removes the variable)."""
        env = dict(self.env)
        for key, value in (extra or {}).items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        return env

    def run(
        self,
        action: str,
        *args: str,
        env: Mapping[str, str | None] | None = None,
        timeout: float = 600,
    ) -> dict[str, Any]:
        """Runs ``airflow_actions.py ACTION ARGS...`` and returns its JSON result."""
        out = self.home / f"result-{action}-{time.monotonic_ns()}.json"
        proc = subprocess.run(
            [sys.executable, str(ACTIONS), action, *args, str(out)],
            env=self.environ(env),
            cwd=self.home,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if proc.returncode != 0 or not out.is_file():
            raise AssertionError(
                f"airflow action {action} {args} failed (exit {proc.returncode}):\n"
                f"--- stdout ---\n{_tail(proc.stdout)}\n--- stderr ---\n{_tail(proc.stderr)}"
            )
        return json.loads(out.read_text(encoding="utf-8"))

    def task_logs(self) -> str:
        """Every task log written so far (for failure messages)."""
        logs = sorted((self.home / "logs").rglob("*.log"))
        return "\n".join(f"=== {p}\n{p.read_text(errors='replace')}" for p in logs)


def base_env(home: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(_DROPPED_PREFIXES) and k not in _DROPPED
    }
    venv_bin = str(Path(sys.executable).parent)
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs"),
            "AIRFLOW_CONN_SPARK_DEFAULT": SPARK_DEFAULT_CONN,
            # The venv's airflow, spark-submit and python first, activated or not.
            "PATH": os.pathsep.join([venv_bin, env.get("PATH", os.defpath)]),
        }
    )
    return env


@pytest.fixture(scope="session")
def airflow_env(tmp_path_factory: pytest.TempPathFactory) -> Airflow:
    """An isolated AIRFLOW_HOME and its environment; no database (enough to parse DAGs)."""
    home = tmp_path_factory.mktemp("airflow_home")
    return Airflow(home=home, env=base_env(home))


@pytest.fixture(scope="session")
def airflow(airflow_env: Airflow) -> Airflow:
    """``airflow_env`` with its SQLite metadata database migrated (``airflow db migrate``)."""
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"],
        env=airflow_env.env,
        cwd=airflow_env.home,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0:
        raise AssertionError(
            f"airflow db migrate failed (exit {proc.returncode}):\n{_tail(proc.stdout)}\n"
            f"{_tail(proc.stderr)}"
        )
    airflow_env.timings["db_migrate"] = time.monotonic() - start
    return airflow_env
