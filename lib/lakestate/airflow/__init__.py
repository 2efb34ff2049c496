"""Airflow integration: ``make_dag("jobs/APP.py")`` turns an app into a scheduled DAG.

Importing this package imports Airflow and the Spark provider; the rest of lakestate does not
need them.
"""

from lakestate.airflow.dag_factory import make_dag

__all__ = ["make_dag"]
