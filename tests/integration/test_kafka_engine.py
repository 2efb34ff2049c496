"""The engine with Kafka topics on both ends (issue 26 item 1), on the tests' real broker:
an app whose config has bootstrap.servers reads its source topic from Kafka and writes its
sinks there in transactions; read_committed consumers of the sinks see what the test
driver outputs, once, also after a SIGKILL at every step of a batch's commit. The offsets
the app committed are mirrored to its consumer group."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pyarrow as pa
import pytest
from engine_helpers import APPS, driver_outputs, events
from lakestate import run_app
from lakestate.errors import StreamsException, TaskMigratedException
from lakestate.io.kafka import KafkaCluster, KafkaTopic, admin, appends
from lakestate.io.topic_records import RECORD_SCHEMA, records_of
from lakestate.task_id import TaskId

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
N = 120
MAX_RECORDS = 15  # several batches per task


@pytest.fixture
def kafka_app(kafka_broker, monkeypatch):
    """The kafka_counts app's names for this test, its environment set, its input topic
    (2 partitions) created and filled with N events."""
    test_id = uuid.uuid4().hex[:8]
    monkeypatch.setenv("KAFKA_TEST_BOOTSTRAP", kafka_broker.bootstrap_servers)
    monkeypatch.setenv("KAFKA_TEST_ID", test_id)
    cluster = KafkaCluster.from_config({"bootstrap.servers": kafka_broker.bootstrap_servers})
    source = KafkaTopic(cluster, f"events-{test_id}")
    source.create(2)
    records = events(N, seed=11)
    source.append(records)
    return cluster, test_id, records


def _sink(cluster: KafkaCluster, topic: str) -> list[tuple]:
    """A sink's records as a read_committed consumer sees them: (partition, key, value,
    timestamp) in partition and offset order."""
    rows = [r for table in KafkaTopic(cluster, topic).read_partitions() for r in records_of(table)]
    return [(r.partition, r.key, r.value, r.timestamp) for r in rows]


def _expected(records: list[dict], test_id: str) -> dict[str, list[tuple]]:
    os.environ["KAFKA_TEST_ID"] = test_id
    outs = [f"counts-out-{test_id}", f"sums-out-{test_id}"]
    return driver_outputs(
        "kafka_counts.py", records, 2, outs, with_partition=True, in_topic=f"events-{test_id}"
    )


def _baked_app(folder: Path, pids: Path | None = None) -> str:
    """The kafka_counts app with this test's id and broker written in: Spark's Python
    workers, started with the test session's Spark, do not see the environment set here.
    With ``pids``: processed in two worker processes whatever the batch's size, each
    noting its process id there (a file per process)."""
    source = (APPS / "kafka_counts.py").read_text()
    for name in ("KAFKA_TEST_ID", "KAFKA_TEST_BOOTSTRAP"):
        source = source.replace(f'os.environ["{name}"]', repr(os.environ[name]))
    if pids is not None:
        note = f"lambda k, v: __import__('pathlib').Path({str(pids)!r}, str(os.getpid())).touch()"
        source = source.replace("b.stream(INPUT)", f"b.stream(INPUT).peek({note})")
        workers = '"lakestate.inprocess.workers": 2, "lakestate.inprocess.workers.min.records": 0,'
        source = source.replace('"statestore.uncommitted.max.records"', f'{workers} "statestore.uncommitted.max.records"')
    path = folder / "kafka_counts.py"
    path.write_text(source)
    return str(path)


# The transports of a batch's processing: inprocess_max_records (Spark's reads of a Kafka
# topic go through the driver's reader; worker processes read their tasks' own).
TRANSPORTS = {"spark": 0, "in_process": 10**9, "in_process_workers": 10**9}


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
def test_a_kafka_to_kafka_count_app_equals_the_test_driver(kafka_app, tmp_path, transport, request):
    cluster, test_id, records = kafka_app
    if transport == "spark":
        request.getfixturevalue("spark")  # the session's Spark, as run_app would start it
    pids = tmp_path / "pids" if transport == "in_process_workers" else None
    if pids is not None:
        pids.mkdir()
    app_path = _baked_app(tmp_path, pids)
    result = run_app(
        app_path,
        warehouse=str(tmp_path / "wh"),
        state_dir=str(tmp_path / "state"),
        max_records=MAX_RECORDS,
        until_caught_up=True,
        inprocess_max_records=TRANSPORTS[transport],
        say=lambda _: None,
    )
    assert result.transport == transport.removesuffix("_workers")
    assert len(result.batches) >= 4 and result.records == N
    if pids is not None:  # two worker processes read and processed the tasks
        assert len({p.name for p in pids.iterdir()} - {str(os.getpid())}) == 2
    expected = _expected(records, test_id)
    for topic, rows in expected.items():
        assert rows and _sink(cluster, topic) == sorted(rows, key=lambda r: r[0]), topic
    # The committed offsets are mirrored to the consumer group application.id.
    group = admin.group_offsets(cluster, f"kcounts-{test_id}", f"events-{test_id}")
    assert group == KafkaTopic(cluster, f"events-{test_id}").end_offsets()
    # A second run finds nothing new and writes nothing.
    again = run_app(
        app_path,
        warehouse=str(tmp_path / "wh"),
        state_dir=str(tmp_path / "state"),
        until_caught_up=True,
        say=lambda _: None,
    )
    assert again.caught_up and not again.batches
    for topic, rows in expected.items():
        assert len(_sink(cluster, topic)) == len(rows)


def _run_killed_at(wh: Path, state: Path, fault: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESTATE_")}
    if fault:
        env["LAKESTATE_FAULT"] = fault
    code = (
        "from lakestate import run_app; "
        f"run_app({str(APPS / 'kafka_counts.py')!r}, warehouse={str(wh)!r}, "
        f"state_dir={str(state)!r}, max_records={MAX_RECORDS}, until_caught_up=True, "
        "inprocess_max_records=10**9)"
    )
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600, cwd=REPO
    )


def test_kill_at_every_commit_step_then_rerun_gives_each_sink_record_once(kafka_app, tmp_path):
    cluster, test_id, records = kafka_app
    counts, sums = f"counts-out-{test_id}", f"sums-out-{test_id}"
    points = [
        "after_progress@2",
        f"after_sink:{counts}@2",
        f"after_sink:{sums}@2",
        "after_changelog:counts@2",
        "after_changelog:sums@2",
        "after_tables@3",
        "mid_local_commit@4",
    ]
    said = []
    for point in points:
        proc = _run_killed_at(tmp_path / "wh", tmp_path / "state", point)
        assert proc.returncode == -9, (point, proc.returncode, proc.stderr[-3000:])
        said.append(proc.stdout)
    proc = _run_killed_at(tmp_path / "wh", tmp_path / "state", None)
    assert proc.returncode == 0, proc.stderr[-3000:]
    said.append(proc.stdout)
    assert "replaying the recorded batches" in said[points.index("after_progress@2") + 1]
    expected = _expected(records, test_id)
    for topic, rows in expected.items():
        assert _sink(cluster, topic) == sorted(rows, key=lambda r: r[0]), topic


def _rows(values: list[str]) -> pa.Table:
    n = len(values)
    return pa.table(
        {
            "partition": [0] * n,
            "offset": list(range(n)),
            "timestamp": [1_000 + i for i in range(n)],
            "key": ['"k"'] * n,
            "value": [f'"{v}"' for v in values],
            "headers": [None] * n,
        },
        schema=RECORD_SCHEMA,
    )


def test_a_sink_write_by_a_fenced_producer_fails_and_the_new_owner_writes_it_once(kafka_broker):
    """A newer producer of the task's transactional.id (another run took the task over)
    fences the cached one: its write fails with TaskMigratedException and leaves nothing a
    read_committed consumer sees; the next write (a new producer) writes the batch once, and
    a replay of a held batch writes nothing."""
    from confluent_kafka import Producer

    cluster = KafkaCluster.from_config({"bootstrap.servers": kafka_broker.bootstrap_servers})
    sink = KafkaTopic(cluster, f"sink-{uuid.uuid4().hex[:8]}")
    sink.create(1)
    task = TaskId(0, 0)
    written = sink.append_batch("fenced", {task: 1}, lambda todo, ends: _rows(["a"]), {})
    assert not written.skipped and sink.holds("fenced", task) == 1
    newer = Producer(
        cluster.client_config(transactional_id=appends.transactional_id("fenced", task, sink.name))
    )
    newer.init_transactions(30)
    with pytest.raises(TaskMigratedException, match="fenced"):
        sink.append_batch("fenced", {task: 2}, lambda todo, ends: _rows(["b"]), {})
    assert sink.holds("fenced", task) == 1
    sink.append_batch("fenced", {task: 2}, lambda todo, ends: _rows(["b"]), {})
    replay = sink.append_batch("fenced", {task: 2}, lambda todo, ends: _rows(["b"]), {})
    assert replay.skipped and sink.holds("fenced", task) == 2
    assert [(r[1], r[2]) for r in _sink(cluster, sink.name)] == [("k", "a"), ("k", "b")]


def test_a_missing_kafka_source_topic_is_an_error_naming_the_cluster(
    kafka_broker, monkeypatch, tmp_path
):
    monkeypatch.setenv("KAFKA_TEST_BOOTSTRAP", kafka_broker.bootstrap_servers)
    monkeypatch.setenv("KAFKA_TEST_ID", "missing")
    with pytest.raises(StreamsException) as raised:
        run_app(
            str(APPS / "kafka_counts.py"),
            warehouse=str(tmp_path / "wh"),
            state_dir=str(tmp_path / "state"),
            say=lambda _: None,
        )
    message = str(raised.value)
    assert "input topic 'events-missing'" in message
    assert f"Kafka cluster {kafka_broker.bootstrap_servers}" in message
    assert "kafka-topics.sh --create --topic events-missing" in message


def test_two_instances_share_one_kafka_topic_and_write_each_record_once(kafka_app, tmp_path):
    """The kafka_counts app with two configured instances: a rebalance gives each one of the
    source topic's partitions' tasks; the two runs, side by side in their own processes and
    state directories, read their partitions of the one Kafka topic, and the sinks hold what
    the test driver outputs, once, with the group's offsets at the topic's end."""
    cluster, test_id, records = kafka_app
    app_path = Path(_baked_app(tmp_path))
    instances = [{"name": n, "state_dir": str(tmp_path / f"state-{n}")} for n in ("a", "b")]
    source = app_path.read_text().replace(
        '"statestore.uncommitted.max.records": 100_000,',
        f'"statestore.uncommitted.max.records": 100_000, "lakestate.instances": {instances!r},',
    )
    assert source != app_path.read_text()
    app_path.write_text(source)
    wh = str(tmp_path / "wh")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESTATE_")}
    cli = [sys.executable, "-m", "lakestate.cli"]
    done = subprocess.run(
        [*cli, "rebalance", str(app_path), "--warehouse", wh],
        env=env, capture_output=True, text=True, timeout=300, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    runs = [
        subprocess.Popen(
            [
                *cli,
                "run",
                str(app_path),
                "--warehouse",
                wh,
                "--instance",
                name,
                "--until-caught-up",
                "--max-records",
                str(MAX_RECORDS),
                "--transport",
                "inprocess",
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )  # fmt: skip
        for name in ("a", "b")
    ]
    said = []
    for run in runs:
        out, err = run.communicate(timeout=600)
        assert run.returncode == 0, err[-3000:]
        said.append(out)
    # Each instance ran one task: its partition of the topic.
    assert "instance a (generation 1): active 0_0\n" in said[0], said[0]
    assert "instance b (generation 1): active 0_1\n" in said[1], said[1]
    assert sum(int(out.split(" records, caught up")[0].split()[-1]) for out in said) == N
    expected = _expected(records, test_id)
    for topic, rows in expected.items():
        assert rows and _sink(cluster, topic) == sorted(rows, key=lambda r: r[0]), topic
    group = admin.group_offsets(cluster, f"kcounts-{test_id}", f"events-{test_id}")
    assert group == KafkaTopic(cluster, f"events-{test_id}").end_offsets()
