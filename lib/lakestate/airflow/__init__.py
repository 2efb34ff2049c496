"""Airflow integration: ``make_dag("jobs/APP.py")`` turns an app into a scheduled DAG,
``make_maintenance_dag("jobs/APP.py")`` into its table-maintenance DAG.

Importing this package imports Airflow; the rest of lakestate does not need it.
"""

from lakestate.airflow.dag_factory import make_dag
from lakestate.airflow.maintenance_dag import make_maintenance_dag

__all__ = ["make_dag", "make_maintenance_dag"]
