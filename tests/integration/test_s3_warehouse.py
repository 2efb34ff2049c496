"""A warehouse on object storage through the S3 API (``s3://bucket/prefix``), against a real
S3-compatible server on 127.0.0.1 (``s3_server.py``): the server refuses a second
conditional create (what delta-rs's lock-free commit rests on); every command gives on the
bucket what it gives on a local folder; a wrong endpoint, a missing bucket or refused
credentials fail at once with one line naming the setting."""

from __future__ import annotations

import os
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from lakestate.errors import TaskMigratedException
from lakestate.io import delta_commits
from lakestate.task_id import TaskId

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
