"""The demo app on Kafka: jobs/demo.py's topology (positive-amount events counted per user)
reading topic "events" from and writing "event-counts" to a Kafka cluster.

Its cluster is ``bootstrap.servers`` below (env ``KAFKA_BOOTSTRAP``, else the port
docker-compose.yml publishes on the host), which its DAG's runs override with Airflow's
Kafka connection ``kafka_default`` (dags/kafka_demo.py; docker-compose.yml defines it:
``kafka:9092``, and its one-shot ``kafka-demo-init`` fills "events" with the demo's sample).
Its repartition topics and changelogs stay in the warehouse, as for every Kafka app. One
instance (no ``lakestate.instances``): the DAG's ``run_batches`` task, on the default queue.
"""

from __future__ import annotations

import os
from pathlib import Path

import lakestate as ls
from lakestate.app import load_module

_demo = load_module(Path(__file__).with_name("demo.py"))

INPUT_TOPIC = _demo.INPUT_TOPIC
OUTPUT_TOPIC = _demo.OUTPUT_TOPIC
STORE = _demo.STORE
#: The sample kafka-demo-init produces to INPUT_TOPIC: ``lakestate demo``'s.
sample_events = _demo.sample_events

app = ls.App(
    "kafka_demo",
    _demo.build_topology(),
    {
        "processing.guarantee": "exactly_once_v2",
        "bootstrap.servers": os.environ.get("KAFKA_BOOTSTRAP", "localhost:9094"),
    },
)
