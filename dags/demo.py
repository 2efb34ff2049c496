"""The demo app (jobs/demo.py) as an Airflow DAG: ``lakestate_demo``."""

from pathlib import Path

from lakestate.airflow import make_dag

REPO = Path(__file__).resolve().parent.parent

dag = make_dag(REPO / "jobs" / "demo.py")
