"""The demo app on Kafka (jobs/kafka_demo.py) as an Airflow DAG: ``lakestate_kafka_demo``,
whose runs read the Kafka cluster of the Airflow connection ``kafka_default`` (Param
``kafka_conn_id``'s default; docker-compose.yml defines it)."""

from pathlib import Path

from lakestate.airflow import make_dag

REPO = Path(__file__).resolve().parent.parent

dag = make_dag(REPO / "jobs" / "kafka_demo.py", kafka_conn_id="kafka_default")
