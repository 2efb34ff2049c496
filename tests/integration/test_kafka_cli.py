"""The CLI on Kafka topics (issue 26 item 1), against the tests' real broker: `produce`,
`consume` and `describe TOPIC` with --bootstrap-servers, `describe APP` and `status APP`
with the app's own bootstrap.servers; bad addresses and topics fail at once, in one line."""

from __future__ import annotations

import json
import socket
import struct
import time
import uuid

import pytest
from engine_helpers import APPS, events
from lakestate import run_app
from lakestate.app import load_app
from lakestate.cli.main import main
from lakestate.io.kafka import KafkaCluster, KafkaTopic, admin
from lakestate.io.partitioner import partition_for
from lakestate.read.assignment_view import assignment_view
from lakestate.read.describe import app_cluster
from lakestate.warehouse import Warehouse

pytestmark = pytest.mark.integration


def _cli(capsys, *args: str) -> tuple[int, list[str], str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out.splitlines(), err


def _jsonl(path, records: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def _dead_address() -> str:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


def test_produce_then_consume_a_kafka_topic_read_committed(kafka_broker, tmp_path, capsys):
    bootstrap = kafka_broker.bootstrap_servers
    topic = f"cli-{uuid.uuid4().hex[:8]}"
    records = [{"key": f"k{i}", "value": {"n": i}, "timestamp": 1000 + i} for i in range(7)] + [
        {"key": "h", "value": 1, "timestamp": 5, "headers": {"source": "test"}}
    ]
    file = _jsonl(tmp_path / "in.jsonl", records)
    code, out, err = _cli(
        capsys, "produce", topic, file, "--bootstrap-servers", bootstrap, "--partitions", "2"
    )
    assert code == 0, err
    assert out[0] == (
        f"created topic {topic} in the Kafka cluster {bootstrap} (--bootstrap-servers) "
        "with 2 partitions"
    )
    assert out[1] == f"appended 8 records to {topic}"

    # An aborted transaction's records: a read_committed consumer never sees them.
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-txn"})
    producer.init_transactions()
    producer.begin_transaction()
    producer.produce(topic, key=b'"aborted"', value=b"0", partition=0)
    producer.flush()
    producer.abort_transaction()
    del producer

    code, out, err = _cli(capsys, "consume", topic, "--bootstrap-servers", bootstrap)
    assert code == 0, err
    got = [json.loads(line) for line in out]
    assert [g["partition"] for g in got] == sorted(g["partition"] for g in got)

    def row(r: dict) -> str:
        fields = (r.get("partition"), r["key"], r["value"], r["timestamp"], r.get("headers"))
        return json.dumps(fields, sort_keys=True)

    expected = sorted(row({**r, "partition": partition_for(r["key"], 2)}) for r in records)
    assert sorted(map(row, got)) == expected
    assert {g["partition"] for g in got} == {0, 1}
    for p in (0, 1):  # each partition in offset order, in the order produced
        offsets = [g["offset"] for g in got if g["partition"] == p]
        assert offsets == sorted(offsets)

    code, out, _ = _cli(
        capsys, "consume", topic, "--bootstrap-servers", bootstrap, "--max-messages", "3"
    )
    assert code == 0 and [json.loads(line) for line in out] == got[:3]

    code, out, err = _cli(capsys, "--json", "describe", topic, "--bootstrap-servers", bootstrap)
    assert code == 0, err
    doc = json.loads(out[0])
    ends = KafkaTopic(KafkaCluster.from_config({"bootstrap.servers": bootstrap}), topic)
    assert doc["kind"] == "kafka" and doc["partitions"] == 2
    assert doc["end_offsets"] == {str(p): e for p, e in ends.end_offsets().items()}
    # The aborted transaction's record and its marker take offsets of partition 0.
    assert doc["end_offsets"]["0"] == sum(1 for g in got if g["partition"] == 0) + 2
    assert doc["path"] == f"kafka://{bootstrap}/{topic}" and doc["records"] is None


def test_serdes_flags_write_and_read_kafka_bytes(kafka_broker, tmp_path, capsys):
    bootstrap = kafka_broker.bootstrap_servers
    topic = f"cli-serdes-{uuid.uuid4().hex[:8]}"
    records = [{"key": i, "value": f"v{i}", "timestamp": i} for i in range(4)]
    file = _jsonl(tmp_path / "in.jsonl", records)
    flags = ("--bootstrap-servers", bootstrap, "--key-serde", "long", "--value-serde", "string")
    code, _, err = _cli(capsys, "produce", topic, file, *flags)
    assert code == 0, err

    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "cli-serdes-check"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    raw = [consumer.poll(10) for _ in records]
    consumer.close()
    assert [(m.key(), m.value()) for m in raw] == [
        (struct.pack(">q", i), f"v{i}".encode()) for i in range(4)
    ]

    code, out, err = _cli(capsys, "consume", topic, *flags)
    assert code == 0, err
    assert [(r["key"], r["value"]) for r in map(json.loads, out)] == [
        (i, f"v{i}") for i in range(4)
    ]

    # Bytes the serde given cannot read: one line naming the record and the serde.
    code, _, err = _cli(capsys, "consume", topic, *flags[:4], "--value-serde", "long")
    assert code == 1
    assert f"Kafka topic {topic!r} partition 0 offset 0: its value is not Serdes.Long()" in err
    code, _, err = _cli(capsys, "consume", topic, "--bootstrap-servers", bootstrap)
    assert code == 1
    assert f"Kafka topic {topic!r} partition 0 offset 0: its key is not Serdes.Json()" in err
    assert "give the topic's key serde" in err

    # A record the key serde cannot write: nothing is produced.
    bad = _jsonl(tmp_path / "bad.jsonl", [{"key": 1, "value": "a"}, {"key": "x", "value": "b"}])
    code, _, err = _cli(capsys, "produce", topic, bad, *flags)
    assert code == 1 and "line 2: key: " in err
    assert KafkaTopic(
        KafkaCluster.from_config({"bootstrap.servers": bootstrap}), topic
    ).end_offsets() == {0: 4}


def test_bad_kafka_input_fails_at_once_in_one_line(kafka_broker, tmp_path, capsys):
    file = _jsonl(tmp_path / "in.jsonl", [{"key": "a", "value": 1}])
    dead = _dead_address()
    for command in (["produce", "t", file], ["consume", "t"], ["describe", "t"]):
        started = time.monotonic()
        code, out, err = _cli(capsys, *command, "--bootstrap-servers", dead)
        assert code == 1 and not out
        assert time.monotonic() - started < 10, command
        first = err.splitlines()[0]
        assert first.startswith(f"lakestate {command[0]}: error: Kafka cluster {dead} ")
        assert "(--bootstrap-servers) did not answer in 5 s" in first

    bootstrap = kafka_broker.bootstrap_servers
    code, _, err = _cli(capsys, "consume", "no-such-topic", "--bootstrap-servers", bootstrap)
    assert code == 1 and err.splitlines()[0] == (
        "lakestate consume: error: topic 'no-such-topic' does not exist in the Kafka cluster "
        f"{bootstrap} (--bootstrap-servers)"
    )
    code, _, err = _cli(capsys, "consume", "t", "--key-serde", "long", "--warehouse", str(tmp_path))
    assert code == 1 and "--key-serde apply to a Kafka topic: give --bootstrap-servers" in err


def _app(tmp_path, bootstrap: str, test_id: str) -> str:
    """The kafka_counts app with this test's id and broker written in."""
    source = (APPS / "kafka_counts.py").read_text()
    source = source.replace('os.environ["KAFKA_TEST_ID"]', repr(test_id))
    source = source.replace('os.environ["KAFKA_TEST_BOOTSTRAP"]', repr(bootstrap))
    path = tmp_path / "kafka_counts.py"
    path.write_text(source)
    return str(path)


def test_describe_and_status_of_an_app_read_its_kafka_topics(kafka_broker, tmp_path, capsys):
    bootstrap = kafka_broker.bootstrap_servers
    test_id = uuid.uuid4().hex[:8]
    cluster = KafkaCluster.from_config({"bootstrap.servers": bootstrap})
    source = KafkaTopic(cluster, f"events-{test_id}")
    source.create(2)
    source.append(events(40, seed=3))
    app = _app(tmp_path, bootstrap, test_id)
    wh = str(tmp_path / "wh")
    run = {"warehouse": wh, "state_dir": str(tmp_path / "state"), "say": lambda _: None}
    run_app(app, until_caught_up=True, inprocess_max_records=10**9, **run)
    later = events(10, seed=4)
    source.append(later)  # not run: the app's lag

    code, out, err = _cli(capsys, "--json", "describe", app, "--warehouse", wh)
    assert code == 0, err
    found = {t["topic"]: t for t in json.loads(out[0])["topics"]}
    for name in (f"events-{test_id}", f"counts-out-{test_id}", f"sums-out-{test_id}"):
        assert found[name]["kind"] == "kafka" and found[name]["exists"], name
        ends = KafkaTopic(cluster, name).end_offsets()
        assert found[name]["end_offsets"] == {str(p): e for p, e in ends.items()}, name
    assert len(found[f"events-{test_id}"]["end_offsets"]) == 2

    code, out, err = _cli(capsys, "--json", "status", app, "--warehouse", wh)
    assert code == 0, err
    tasks = json.loads(out[0])["tasks"]
    group = admin.group_offsets(cluster, f"kcounts-{test_id}", f"events-{test_id}")
    ends = source.end_offsets()
    inputs = {i["partition"]: i for t in tasks for i in t["inputs"]}
    assert sorted(inputs) == [0, 1]
    for p, i in inputs.items():  # the figures the consumer group application.id shows
        assert (i["committed"], i["end"], i["lag"]) == (group[p], ends[p], ends[p] - group[p])
    assert sum(i["lag"] for i in inputs.values()) == len(later)
    code, out, _ = _cli(capsys, "status", app, "--warehouse", wh)
    assert code == 0 and out[0].startswith("app kcounts-") and f"lag {len(later)}," in out[0]

    # The Airflow plugin's view of the app shows the same lags (its module loaded).
    loaded = load_app(app)
    cluster_of_app, kafka_topics = app_cluster(loaded)
    view = assignment_view(
        Warehouse(wh), loaded.name, loaded.topology, cluster=cluster_of_app,
        kafka_topics=kafka_topics,
    )  # fmt: skip
    lags = {t["task"]: t["input_lag"] for t in view["tasks"]}
    assert len(lags) == 2 and sum(lags.values()) == len(later), lags

    # The app's bootstrap.servers unreachable: one line naming the setting, at once.
    dead = _app(tmp_path / "wh", _dead_address(), test_id)
    for command in ("describe", "status"):
        started = time.monotonic()
        code, _, err = _cli(capsys, command, dead, "--warehouse", wh)
        assert code == 1 and time.monotonic() - started < 10
        assert f"(app kcounts-{test_id}'s bootstrap.servers) did not answer in 5 s" in err


def test_kafka_settings_from_the_environment_override_the_app_s(
    kafka_broker, tmp_path, capsys, monkeypatch
):
    """LAKESTATE_KAFKA_CONFIG (what a DAG's Kafka connection gives its runs) takes the place
    of the app's bootstrap.servers: the app configured with an address nothing answers on
    runs on the broker the variable names."""
    bootstrap = kafka_broker.bootstrap_servers
    test_id = uuid.uuid4().hex[:8]
    cluster = KafkaCluster.from_config({"bootstrap.servers": bootstrap})
    source = KafkaTopic(cluster, f"events-{test_id}")
    source.create(2)
    records = events(30, seed=5)
    source.append(records)
    app = _app(tmp_path, _dead_address(), test_id)
    run = ["run", app, "--warehouse", str(tmp_path / "wh"), "--state-dir", str(tmp_path / "s")]
    run += ["--until-caught-up", "--transport", "inprocess"]

    monkeypatch.setenv("LAKESTATE_KAFKA_CONFIG", "bootstrap.servers=" + bootstrap)
    code, _, err = _cli(capsys, *run)
    assert code == 1 and "LAKESTATE_KAFKA_CONFIG is not JSON" in err, err

    monkeypatch.setenv("LAKESTATE_KAFKA_CONFIG", json.dumps({"bootstrap.servers": bootstrap}))
    code, _, err = _cli(capsys, *run)
    assert code == 0, err
    counts = KafkaTopic(cluster, f"counts-out-{test_id}")
    assert counts.exists() and sum(counts.end_offsets().values()) > 0
    expected = {r["key"] for r in records if r["value"]["amount"] > 0}
    code, out, err = _cli(
        capsys, "consume", f"counts-out-{test_id}", "--from-beginning",
        "--bootstrap-servers", bootstrap,
    )  # fmt: skip
    assert code == 0, err
    assert {json.loads(line)["key"] for line in out} == expected
