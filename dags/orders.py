"""The orders app (jobs/orders.py: a stream joined with a versioned table as of each order's
time) as an Airflow DAG: ``lakestate_orders``."""

from pathlib import Path

from lakestate.airflow import make_dag

REPO = Path(__file__).resolve().parent.parent

dag = make_dag(REPO / "jobs" / "orders.py")
