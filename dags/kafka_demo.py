"""The demo app on Kafka (jobs/kafka_demo.py) as an Airflow DAG: ``lakestate_kafka_demo``,
whose runs read the Kafka cluster of the Airflow connection ``kafka_default`` (Param
``kafka_conn_id``'s default; docker-compose.yml defines it)."""

import os
from pathlib import Path

from lakestate.airflow import make_dag

REPO = Path(__file__).resolve().parent.parent
KAFKA_CONN_ID = "kafka_default"

dag = make_dag(
    REPO / "jobs" / "kafka_demo.py",
    kafka_conn_id=KAFKA_CONN_ID,
    # Unpaused where the deployment defines the connection in Airflow's environment
    # (docker-compose.yml); elsewhere (scripts/airflow.sh) every scheduled run would fail
    # without it, so the DAG waits paused until the connection is added and it is unpaused.
    is_paused_upon_creation=f"AIRFLOW_CONN_{KAFKA_CONN_ID.upper()}" not in os.environ,
)
