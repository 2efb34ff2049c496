"""The demo app's table maintenance (compaction, OPTIMIZE, VACUUM) as an Airflow DAG:
``lakestate_demo_maintenance``, daily, beside ``lakestate_demo``."""

from pathlib import Path

from lakestate.airflow import make_maintenance_dag

REPO = Path(__file__).resolve().parent.parent

dag = make_maintenance_dag(REPO / "jobs" / "demo.py")
