"""docker-compose.yml's Kafka demo, run for real outside Compose, on the tests' broker: its
one-shot ``kafka-demo-init`` script (as written in the file) fills the topic "events" with the
demo's sample, and kept it when run again; then a run of the DAG ``lakestate_kafka_demo``
(``dag.test()`` in an isolated Airflow), whose Kafka settings come only from the connection
``kafka_default`` as the file defines it (``AIRFLOW_CONN_KAFKA_DEFAULT``, its address the
tests' broker's), reads that topic and writes the per-user counts of positive-amount events to
the Kafka topic "event-counts"; the warehouse holds no "events" log table."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
DAG_ID = "lakestate_kafka_demo"
CONNECTION = "AIRFLOW_CONN_KAFKA_DEFAULT"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """A real single-node KRaft broker (tests/integration/kafka_broker.py); fails, never
    skips, without Kafka's jars."""
    sys.path.insert(0, str(REPO / "tests" / "integration"))
    from kafka_broker import BrokerJarsMissing, start_broker

    try:
        started = start_broker(tmp_path_factory.mktemp("kafka-demo-broker"))
    except BrokerJarsMissing as exc:
        pytest.fail(str(exc), pytrace=False)
    yield started
    started.stop()


def _run(args: list[str], env: dict[str, str]) -> str:
    proc = subprocess.run(args, env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{args[:3]} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def test_the_compose_kafka_demo_reads_its_topic_through_the_connection(
    airflow, broker, tmp_path: Path
) -> None:
    from lakestate.app import load_module

    services = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]
    init = services["kafka-demo-init"]
    inside = init["environment"]["KAFKA_BOOTSTRAP"]  # kafka:9092, the containers' address
    env = airflow.environ(
        {
            "LAKESTATE_WAREHOUSE": str(tmp_path / "warehouse"),
            "LAKESTATE_STATE_DIR": str(tmp_path / "state"),
            "LAKESTATE_LOG_DIR": str(tmp_path / "logs"),
            "PYTHONPATH": str(REPO / "lib"),
            "KAFKA_BOOTSTRAP": broker.bootstrap_servers,
        }
    )
    # The seeder's script as Compose runs it ($$ is Compose's escape of $), twice.
    script = init["command"][2].replace("$$", "$")
    start = time.monotonic()
    first = _run(["bash", "-c", script], env)
    assert "created topic events" in first, first
    again = _run(["bash", "-c", script], env)
    assert "kafka-demo-init: topic events is there, kept" in again
    seeded = time.monotonic()

    # The DAG's run: Kafka settings from the connection alone (the app's own config names
    # localhost:9094, where no broker listens).
    value = services["airflow-scheduler"]["environment"][CONNECTION]
    assert inside in value
    run_env = {**env, CONNECTION: value.replace(inside, broker.bootstrap_servers)}
    run_env.pop("KAFKA_BOOTSTRAP")
    result = airflow.run("test", DAG_ID, "{}", env=run_env, timeout=900)
    ran = time.monotonic()
    tasks = {"rebalance": "success", "run_batches": "success"}
    assert result["state"] == "success" and result["task_states"] == tasks, (
        f"{result}\n{airflow.task_logs()[-20000:]}"
    )

    demo = load_module(REPO / "jobs" / "kafka_demo.py")
    events = list(demo.sample_events(1000))
    expected = Counter(key for key, value, _ in events if value["amount"] > 0)
    out = _run(
        [sys.executable, "-m", "lakestate.cli", "consume", demo.OUTPUT_TOPIC]
        + ["--bootstrap-servers", broker.bootstrap_servers],
        env,
    )
    records = [json.loads(line) for line in out.splitlines() if line.strip()]
    final: dict[str, int] = {}
    for r in sorted(records, key=lambda r: (r["partition"], r["offset"])):
        final[r["key"]] = r["value"]
    assert final == dict(expected)
    assert not (tmp_path / "warehouse" / "topics" / demo.INPUT_TOPIC).exists()
    print(f"\nseed x2 {seeded - start:.1f}s, dag.test {ran - seeded:.1f}s", file=sys.stderr)
