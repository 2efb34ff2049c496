"""A warehouse on object storage through the S3 API (``s3://bucket/prefix``), against a real
S3-compatible server on 127.0.0.1 (``s3_server.py``): the server refuses a second
conditional create (what delta-rs's lock-free commit rests on); every command gives on the
bucket what it gives on a local folder; a wrong endpoint, a missing bucket or refused
credentials fail at once with one line naming the setting."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from engine_helpers import APPS, events, produce
from lakestate import run_app
from lakestate.checkpoint import rewind_intent
from lakestate.cli import main
from lakestate.errors import TaskMigratedException
from lakestate.io import delta_commits
from lakestate.task_id import TaskId
from lakestate.warehouse import Warehouse

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def _boto3_client(server):
    import boto3

    env = server.env()
    return boto3.client(
        "s3",
        endpoint_url=env["AWS_ENDPOINT_URL"],
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        region_name=env["AWS_REGION"],
    )


def _bucket(server) -> str:
    name = f"lakestate-{uuid.uuid4().hex[:12]}"
    server.create_bucket(name)
    return name


# -- the server: conditional create ---------------------------------------------------------


def test_the_server_refuses_a_second_conditional_put_of_a_key(s3_server):
    from botocore.exceptions import ClientError

    client, bucket = _boto3_client(s3_server), _bucket(s3_server)
    key = "t/_delta_log/00000000000000000001.json"
    client.put_object(Bucket=bucket, Key=key, Body=b"first", IfNoneMatch="*")
    with pytest.raises(ClientError) as refused:
        client.put_object(Bucket=bucket, Key=key, Body=b"second", IfNoneMatch="*")
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    assert refused.value.response["Error"]["Code"] == "PreconditionFailed"
    assert client.get_object(Bucket=bucket, Key=key)["Body"].read() == b"first"


def test_of_writers_racing_to_create_one_key_exactly_one_wins(s3_server):
    from botocore.exceptions import ClientError

    client, bucket = _boto3_client(s3_server), _bucket(s3_server)

    def put(i: int, key: str) -> bool:
        try:
            client.put_object(Bucket=bucket, Key=key, Body=str(i).encode(), IfNoneMatch="*")
        except ClientError as exc:
            assert exc.response["Error"]["Code"] == "PreconditionFailed"
            return False
        return True

    with ThreadPoolExecutor(8) as pool:
        for round_ in range(20):
            key = f"race/{round_:020d}.json"
            won = [i for i, ok in enumerate(pool.map(put, range(8), [key] * 8)) if ok]
            assert len(won) == 1, (round_, won)
            body = client.get_object(Bucket=bucket, Key=key)["Body"].read()
            assert body == str(won[0]).encode()


def test_two_delta_rs_writers_of_one_version_both_land_in_turn(s3_warehouse):
    # Both see version 0 and append: a store that let the second commit file overwrite the
    # first would lose a row; with the conditional put delta-rs retries at version 2.
    assert "AWS_S3_ALLOW_UNSAFE_RENAME" not in os.environ
    path = s3_warehouse.resolve("plain")
    write_deltalake(path, pa.table({"x": [0]}))
    first, second = DeltaTable(path), DeltaTable(path)
    write_deltalake(first, pa.table({"x": [1]}), mode="append")
    write_deltalake(second, pa.table({"x": [2]}), mode="append")
    table = DeltaTable(path)
    assert table.version() == 2
    assert sorted(table.to_pyarrow_table().column("x").to_pylist()) == [0, 1, 2]


def test_a_task_s_txn_committed_by_two_writers_at_once_lands_once(s3_warehouse):
    path = s3_warehouse.resolve("fenced")
    delta_commits.create_table(path, pa.schema([("x", pa.int64())]), [], "fenced", "test")
    task = TaskId(0, 0)
    first, second = delta_commits.open_table(path), delta_commits.open_table(path)
    delta_commits.append(first, pa.table({"x": [1]}), "app", {task: 1}, {})
    with pytest.raises(TaskMigratedException):
        delta_commits.append(second, pa.table({"x": [2]}), "app", {task: 1}, {})
    table = delta_commits.open_table(path)
    assert table.to_pyarrow_table().column("x").to_pylist() == [1]
    assert delta_commits.txn_versions(table, "app", [task]) == {task: 1}


def test_a_topic_s_end_offsets_on_a_bucket_come_from_its_commits_not_a_scan(
    s3_warehouse, monkeypatch
):
    # A scan reads every data file's offsets over the network, and a topic gains files
    # every run: the newest commit's recorded end offsets serve instead, as on a folder.
    from lakestate.io import topics
    from lakestate.io.logtable import ends

    topic = topics.topic(s3_warehouse, "clicks")
    topic.create(3)
    for n in range(4):
        topic.append([{"key": f"k{i}", "value": i, "timestamp": n} for i in range(n * 5)])
    scanned = ends.scan_end_offsets(delta_commits.open_table(topic.path), 3)
    assert sum(scanned.values()) == 30

    def no_scan(path: str, num_partitions: int) -> dict[int, int]:
        raise AssertionError(f"{path} scanned")

    monkeypatch.setattr(ends, "_scan_end_offsets", no_scan)
    assert topic.end_offsets() == scanned
    assert topics.topic(s3_warehouse, "clicks").describe().end_offsets == scanned


# -- listing ---------------------------------------------------------------------------------


def test_a_bucket_lists_its_topics_apps_and_state_tables_as_a_folder_does(s3_warehouse):
    from lakestate import object_store

    wh = s3_warehouse
    assert wh.list_topics() == [] and wh.list_apps() == [] and wh.list_state_tables() == []
    store = object_store.filesystem()
    bucket_root = wh.root.removeprefix("s3://")
    for key in [
        "topics/b/_delta_log/00000000000000000000.json",
        "topics/a/_delta_log/00000000000000000000.json",
        "topics/not_a_table/part-0.parquet",
        "topics/.b.lock",
        "apps/shop/changelog/s2/_delta_log/00000000000000000000.json",
        "apps/shop/changelog/s1/_delta_log/00000000000000000000.json",
        "apps/x/changelog/not_a_table/part-0.parquet",
        "apps/shop/_progress/_delta_log/00000000000000000000.json",
    ]:
        with store.open_output_stream(f"{bucket_root}/{key}") as out:
            out.write(b"{}")
    assert wh.list_topics() == ["a", "b"]
    assert wh.list_apps() == ["shop", "x"]
    tables = wh.list_state_tables()
    assert [(t.app, t.store) for t in tables] == [("shop", "s1"), ("shop", "s2")]
    assert [t.path for t in tables] == [wh.changelog_path("shop", s) for s in ("s1", "s2")]
    assert wh.list_state_tables("x") == []


def test_a_warehouse_on_another_object_store_says_listing_it_is_not_supported():
    wh = Warehouse("gs://bucket/warehouse")
    wh.check()  # nothing to check: delta-rs alone speaks to it
    with pytest.raises(ValueError, match="listing a warehouse at gs://bucket/warehouse"):
        wh.list_topics()


# -- every command, on a bucket as on a folder ------------------------------------------------


# When a batch committed (today), not the records' stream times (near 1970).
_WHEN = re.compile(r"20\d\d-\d\d-\d\d \d\d:\d\d:\d\d( UTC)?")


def _cli(capsys, wh: Warehouse, *args: str) -> list[str]:
    """stdout lines of ``lakestate ARGS --warehouse ROOT`` run in this process, the root
    written ``<wh>`` and times ``<when>`` (so that a bucket's and a folder's answers
    compare)."""
    capsys.readouterr()
    code = main([*args, "--warehouse", wh.root])
    out, err = capsys.readouterr()
    assert code == 0, (args, err)
    return _WHEN.sub("<when>", out.replace(wh.root, "<wh>")).splitlines()


class Pair:
    """The same records, app and runs on a local warehouse and on a bucket."""

    def __init__(self, local: Warehouse, s3: Warehouse, root: Path) -> None:
        self.local, self.s3, self.root = local, s3, root

    def both(self, capsys, *args: str) -> tuple[list[str], list[str]]:
        return _cli(capsys, self.local, *args), _cli(capsys, self.s3, *args)


@pytest.fixture(scope="module")
def pair(s3_server, tmp_path_factory) -> Iterator[Pair]:
    root = tmp_path_factory.mktemp("s3-pair")
    records = root / "events.jsonl"
    records.write_text("".join(json.dumps(r) + "\n" for r in events(300, seed=21)))
    with pytest.MonkeyPatch.context() as patch:
        for name, value in s3_server.env().items():
            patch.setenv(name, value)
        patch.setenv("LAKESTATE_LOG_DIR", str(root / "logs"))
        s3 = Warehouse(f"s3://{_bucket(s3_server)}/warehouse")
        made = Pair(Warehouse(root / "local"), s3, root)
        for name, wh in (("local", made.local), ("s3", made.s3)):
            assert (
                main(
                    ["produce", "events", str(records), "--partitions", "2"]
                    + ["--warehouse", wh.root]
                )
                == 0
            )
            # Three batches of at most 100 records, each its own commits.
            run = ["run", str(APPS / "counts.py"), "--transport", "inprocess"]
            run += ["--max-records", "100", "--until-caught-up"]
            run += ["--state-dir", str(root / f"state-{name}"), "--warehouse", wh.root]
            assert main(["--quiet", *run]) == 0
        yield made


def test_consume_gives_the_same_records(pair, capsys):
    for topic in ("events", "counts-out", "sums-out"):
        local, s3 = pair.both(capsys, "consume", topic, "--from-beginning")
        assert local == s3
        assert len(local) == (300 if topic == "events" else len(local)) and local


def test_sql_lists_and_answers_the_same(pair, capsys):
    local, s3 = pair.both(capsys, "sql", "--list")
    assert local == s3 and any("counts__counts" in line for line in local)
    query = "SELECT key, value FROM counts__sums ORDER BY key"
    local, s3 = pair.both(capsys, "sql", query)
    assert local == s3 and len(local) > 3
    local, s3 = pair.both(capsys, "sql", "SELECT count(*) AS n FROM events")
    assert local == s3 and any("300" in line for line in local)


def test_status_and_describe_say_the_same(pair, capsys):
    local = _cli(
        capsys, pair.local, "status", "counts", "--state-dir", str(pair.root / "state-local")
    )
    s3 = _cli(capsys, pair.s3, "status", "counts", "--state-dir", str(pair.root / "state-s3"))
    assert local == s3
    for name in (str(APPS / "counts.py"), "events", "counts-out"):
        local, s3 = pair.both(capsys, "describe", name)
        assert local == s3


def test_compact_and_maintain_then_the_same_state(pair, capsys):
    query = "SELECT key, value FROM counts__counts ORDER BY key"
    before = _cli(capsys, pair.local, "sql", query)
    local, s3 = pair.both(capsys, "compact", "counts")
    assert local == s3 and local
    local, s3 = pair.both(capsys, "maintain", "counts")
    assert local == s3 and local
    local, s3 = pair.both(capsys, "sql", query)
    assert local == s3 == before


# -- a store that cannot be used fails at once, naming the setting ---------------------------


def _fails(capsys, root: str) -> tuple[str, float]:
    """The one error line of ``lakestate status`` on ``root``, and how long it took."""
    capsys.readouterr()
    started = time.monotonic()
    code = main(["status", "counts", "--warehouse", root])
    took = time.monotonic() - started
    err = capsys.readouterr().err
    assert code == 1, err
    lines = [line for line in err.splitlines() if not line.startswith("full log:")]
    assert len(lines) == 1, err
    return lines[0], took


def test_a_wrong_endpoint_fails_at_once_naming_it(s3_warehouse, capsys, monkeypatch):
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    line, took = _fails(capsys, s3_warehouse.root)
    assert f"AWS_ENDPOINT_URL=http://127.0.0.1:{port}" in line and "cannot reach" in line, line
    assert took < 10, took


def test_a_missing_bucket_fails_at_once_naming_it(s3_warehouse, capsys):
    line, took = _fails(capsys, "s3://no-such-bucket-here/warehouse")
    assert "bucket 'no-such-bucket-here'" in line and "does not exist" in line, line
    assert took < 10, took


def test_plain_http_without_allow_http_fails_naming_the_setting(s3_warehouse, capsys, monkeypatch):
    monkeypatch.delenv("AWS_ALLOW_HTTP")
    line, _ = _fails(capsys, s3_warehouse.root)
    assert "AWS_ALLOW_HTTP=true" in line, line


@pytest.fixture
def checking_server(tmp_path) -> Iterator[object]:
    """A second server that checks credentials (moto's IAM: every request authenticated)."""
    from s3_server import start_server

    server = start_server(tmp_path / "checking", authenticate=True)
    yield server
    server.stop()


def test_refused_credentials_fail_at_once_naming_them(checking_server, capsys, monkeypatch):
    for name, value in checking_server.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAWRONGWRONGWRONG1")
    line, took = _fails(capsys, "s3://any-bucket/warehouse")
    assert "AWS_ACCESS_KEY_ID=AKIAWRONGWRONGWRONG1" in line, line
    assert "AWS_SECRET_ACCESS_KEY" in line, line
    assert took < 10, took


def test_the_command_in_a_fresh_process_says_one_line(s3_warehouse, tmp_path):
    env = dict(os.environ, AWS_ENDPOINT_URL="http://127.0.0.1:9", PYTHONPATH=str(REPO / "lib"))
    proc = subprocess.run(
        [sys.executable, "-m", "lakestate.cli", "sql", "--list", "--warehouse", s3_warehouse.root],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        cwd=REPO,
    )
    assert proc.returncode == 1
    first = proc.stderr.splitlines()[0]
    assert first.startswith("lakestate sql: error: cannot reach the object store"), proc.stderr


# -- exactly once on a bucket: a SIGKILL at every commit step ---------------------------------


def test_kill_at_every_commit_step_on_a_bucket_then_rerun_gives_the_uninterrupted_result(
    s3_warehouse, tmp_path, capsys
):
    from test_exactly_once import FAULT_POINTS, MAX_RECORDS, N, _run_in_subprocess

    records = events(N, seed=11)
    reference = Warehouse(tmp_path / "reference")
    produce(None, reference, "events", records, partitions=2)
    run_app(
        str(APPS / "counts.py"),
        warehouse=reference.root,
        state_dir=str(tmp_path / "ref"),
        max_records=MAX_RECORDS,
        until_caught_up=True,
        say=lambda _: None,
    )
    wh, state = s3_warehouse, tmp_path / "state"
    produce(None, wh, "events", records, partitions=2)
    said = []
    for point in [*FAULT_POINTS, None]:
        proc = _run_in_subprocess(wh, state, point, inprocess_max_records=10**9)
        assert proc.returncode == (-9 if point else 0), (point, proc.stderr[-3000:])
        said.append(proc.stdout)
    assert all("transport: in this process" in out for out in said), said
    assert "replaying the recorded batches" in said[FAULT_POINTS.index("after_progress@2") + 1]
    for point, batch in (("after_changelog:sums@2", 2), ("after_tables@3", 3)):
        staged = f"applied the staged transaction of batch {batch}"
        assert staged in said[FAULT_POINTS.index(point) + 1]
    assert "applied the staged transaction of batch 4" in said[-1]
    for topic in ("counts-out", "sums-out"):
        expected = _cli(capsys, reference, "consume", topic, "--from-beginning")
        assert _cli(capsys, wh, "consume", topic, "--from-beginning") == expected and expected
    for store in ("counts", "sums"):
        query = f"SELECT key, value FROM counts__{store} ORDER BY key"
        expected = _cli(capsys, reference, "sql", query)
        assert _cli(capsys, wh, "sql", query) == expected and len(expected) > 3


def test_a_rewind_then_a_rerun_give_the_same_on_both(pair, capsys):
    """A rewind on a bucket restores what it restores on a folder (sinks, state, the
    progress), and the rerun after it reprocesses to the same records and state."""
    outputs = "SELECT count(*) AS n FROM counts_out"
    before, _ = pair.both(capsys, "sql", outputs)
    local, s3 = pair.both(capsys, "rewind", "counts", "--to-batch", "1", "--yes")
    assert local == s3 and local
    for query in ("SELECT key, value FROM counts__counts ORDER BY key", outputs):
        local, s3 = pair.both(capsys, "sql", query)
        assert local == s3 and local
    assert local != before  # batch 1's outputs only: fewer rows than three batches'
    for name, wh in (("local", pair.local), ("s3", pair.s3)):
        run = ["run", str(APPS / "counts.py"), "--transport", "inprocess"]
        run += ["--max-records", "100", "--until-caught-up"]
        run += ["--state-dir", str(pair.root / f"state-{name}"), "--warehouse", wh.root]
        assert main(["--quiet", *run]) == 0
    for topic in ("counts-out", "sums-out"):
        local, s3 = pair.both(capsys, "consume", topic, "--from-beginning")
        assert local == s3 and local
    local, s3 = pair.both(capsys, "sql", "SELECT key, value FROM counts__sums ORDER BY key")
    assert local == s3 and local


def test_a_bucket_s_rewind_intent_stops_runs_until_removed(s3_warehouse):
    """The intent is one object on a bucket: while it is there the app is mid-rewind (runs
    and readers refuse); once removed, it is not."""
    assert rewind_intent.read(s3_warehouse, "counts") is None
    rewind_intent.write(s3_warehouse, "counts", {"target_text": "batch 1"})
    assert rewind_intent.read(s3_warehouse, "counts") == {"target_text": "batch 1"}
    with pytest.raises(rewind_intent.MidRewindError, match="mid-rewind to batch 1"):
        rewind_intent.refuse_if_mid_rewind(s3_warehouse, "counts")
    rewind_intent.remove(s3_warehouse, "counts")
    rewind_intent.refuse_if_mid_rewind(s3_warehouse, "counts")
    rewind_intent.remove(s3_warehouse, "counts")  # twice: a resumed rewind's second removal


def test_kill_after_each_rewind_step_on_a_bucket_then_resume_gives_the_folder_s_rewind(
    s3_warehouse, tmp_path, capsys
):
    """A rewind on a bucket SIGKILLed after each of its steps (test_rewind's chain): while
    mid-rewind runs refuse, naming the command to complete it; the completed rewind, and
    the rerun after it, give what a folder's uninterrupted rewind and rerun give."""
    from test_rewind import REWIND_FAULTS

    records = tmp_path / "events.jsonl"
    records.write_text("".join(json.dumps(r) + "\n" for r in events(300, seed=23)))
    local = Warehouse(tmp_path / "local")
    both = {"local": local, "s3": s3_warehouse}

    def run(name: str) -> int:
        args = ["--quiet", "run", str(APPS / "counts.py"), "--transport", "inprocess"]
        args += ["--max-records", "100", "--until-caught-up", "--warehouse", both[name].root]
        return main([*args, "--state-dir", str(tmp_path / f"state-{name}")])

    for name, wh in both.items():
        assert (
            main(["produce", "events", str(records), "--partitions", "2", "--warehouse", wh.root])
            == 0
        )
        assert run(name) == 0
    assert main(["--quiet", "rewind", "counts", "--to-batch", "1", "--yes", "--warehouse",
                 local.root, "--state-dir", str(tmp_path / "state-local")]) == 0  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESTATE_")}
    # A killed rewind holds its tables' maintenance leases until they expire: a short lease
    # lets each rerun go on within seconds.
    env["LAKESTATE_LEASE_SECONDS"] = "3"
    state = str(tmp_path / "state-s3")
    for index, point in enumerate([*REWIND_FAULTS, None]):
        target = "resume=True" if index == 2 else "to_batch=1"
        code = (
            "from lakestate.ops.rewind import rewind; "
            f"rewind({s3_warehouse.root!r}, 'counts', {target}, state_dir={state!r})"
        )
        proc = subprocess.run(
            [sys.executable, "-c", code],
            env={**env, **({"LAKESTATE_FAULT": point} if point else {})},
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        if point is None:
            assert proc.returncode == 0, proc.stderr[-3000:]
            assert "completing the interrupted rewind" in proc.stdout
            break
        assert proc.returncode == -9, (point, proc.returncode, proc.stderr[-3000:])
        capsys.readouterr()
        assert run("s3") == 1
        assert "lakestate rewind counts --resume" in capsys.readouterr().err, point
    assert rewind_intent.read(s3_warehouse, "counts") is None
    for rerun in (False, True):
        if rerun:
            assert run("local") == 0 and run("s3") == 0
        for topic in ("counts-out", "sums-out"):
            a = _cli(capsys, local, "consume", topic, "--from-beginning")
            b = _cli(capsys, s3_warehouse, "consume", topic, "--from-beginning")
            assert a == b and a, (rerun, topic)
        query = "SELECT key, value FROM counts__sums ORDER BY key"
        assert _cli(capsys, local, "sql", query) == _cli(capsys, s3_warehouse, "sql", query)
