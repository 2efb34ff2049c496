"""The clicks app (jobs/clicks.py: windows and suppression) as an Airflow DAG:
``lakestate_clicks``."""

from pathlib import Path

from lakestate.airflow import make_dag

REPO = Path(__file__).resolve().parent.parent

dag = make_dag(REPO / "jobs" / "clicks.py")
