"""The orders app's table maintenance (compaction, OPTIMIZE, VACUUM) as an Airflow DAG:
``lakestate_orders_maintenance``, daily, beside ``lakestate_orders``."""

from pathlib import Path

from lakestate.airflow import make_maintenance_dag

REPO = Path(__file__).resolve().parent.parent

dag = make_maintenance_dag(REPO / "jobs" / "orders.py")
