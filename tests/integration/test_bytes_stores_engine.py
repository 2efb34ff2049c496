"""Stores with Bytes serdes in the engine, in process and in Spark (tests/integration/apps/
bytes_stores.py): the reducer, the count and the join's value getter see the bytes they
were given, after each commit, through the record cache, after a restore from the
changelog with the local state wiped, and after a SIGKILL in the middle of a commit; the
stores' SQL views show BINARY keys and values equal to a model's."""

from __future__ import annotations

import base64
import random
import shutil
from collections import Counter

import pytest
from engine_helpers import APPS, topic_rows
from lakestate import run_app
from lakestate.io import topics
from lakestate.read import duckdb_engine, spark_engine
from lakestate.warehouse import Warehouse
from test_exactly_once import _run_in_subprocess

pytestmark = pytest.mark.integration

APP = "bytes_stores.py"
# Empty, NUL, non-UTF-8 and ASCII keys; the values are random bytes, empty ones too.
KEYS = [b"", b"\x00", b"\xff\xfe", b"\x80abc", b"k"]
TRANSPORTS = {"in_process": 10**9, "spark": 0}  # inprocess_max_records per transport
MAX_RECORDS = 10


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _blobs(n: int, seed: int, start: int) -> list[tuple[bytes, bytes, int]]:
    rng = random.Random(seed)
    return [
        (rng.choice(KEYS), rng.randbytes(rng.randrange(5)), 1_000 + start + i) for i in range(n)
    ]


def _append(wh: Warehouse, topic: str, records: list[tuple[bytes, bytes, int]]) -> None:
    """A log table holds Bytes as base64 text (the serde's JSON form)."""
    rows = [{"key": _b64(k), "value": _b64(v), "timestamp": ts} for k, v, ts in records]
    topics.topic(wh, topic).append(rows)


def _setup(wh: Warehouse, blobs: list) -> None:
    for topic in ("blobs", "labels"):
        topics.topic(wh, topic).create(2)
    _append(wh, "labels", [(k, b"L" + bytes([i]), i) for i, k in enumerate(KEYS)])
    _append(wh, "blobs", blobs)


def _model(blobs: list) -> tuple[dict, dict, Counter]:
    tails: dict[bytes, bytes] = {}
    for k, v, _ in blobs:
        tails[k] = v if k not in tails else (tails[k] + v)[-6:]
    labelled = Counter((k, b"L" + bytes([KEYS.index(k)]) + b":" + v) for k, v, _ in blobs)
    return tails, dict(Counter(k for k, _, _ in blobs)), labelled


def _run(wh: Warehouse, state, limit: int) -> None:
    run_app(
        str(APPS / APP),
        warehouse=wh.root,
        state_dir=str(state),
        max_records=MAX_RECORDS,
        until_caught_up=True,
        inprocess_max_records=limit,
        say=lambda _: None,
    )


def _view(wh: Warehouse, store: str) -> dict:
    rows = duckdb_engine.sql(wh, f"SELECT key, value FROM bytes_stores__{store}").rows
    return {bytes(k): v if isinstance(v, int) else bytes(v) for k, v in rows}


def _check(spark, wh: Warehouse, blobs: list) -> None:
    tails, counts, labelled = _model(blobs)
    assert _view(wh, "tails") == tails
    hexed = duckdb_engine.sql(wh, "SELECT hex(key) FROM bytes_stores__tails").rows
    assert sorted(r[0] for r in hexed) == sorted(k.hex().upper() for k in tails)
    # The same view on Spark: BINARY columns, the same bytes.
    frame = spark_engine.sql(spark, wh, "SELECT key, value, hex(key) FROM bytes_stores__tails")
    assert {f.name: f.dataType.simpleString() for f in frame.schema.fields}["key"] == "binary"
    assert {bytes(k): bytes(v) for k, v, _ in frame.collect()} == tails
    assert _view(wh, "bcounts") == counts
    decoded = lambda k, v: (base64.b64decode(k), base64.b64decode(v))  # noqa: E731
    last = {}
    for _, _, k, v, _ in topic_rows(spark, wh, "tails-out"):
        key, value = decoded(k, v)
        last[key] = value
    assert last == tails  # the cache coalesces, the last update per key is the state
    joined = Counter(decoded(k, v) for _, _, k, v, _ in topic_rows(spark, wh, "labelled"))
    assert joined == labelled


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
def test_bytes_stores_round_trip_through_commits_and_a_wiped_restore(spark, tmp_path, transport):
    limit = TRANSPORTS[transport]
    first, second = _blobs(40, seed=3, start=0), _blobs(30, seed=4, start=100)
    wh = Warehouse(tmp_path / "wh")
    _setup(wh, first)
    _run(wh, tmp_path / "state", limit)
    _check(spark, wh, first)
    # The local state wiped: the next run restores every store from its changelog, and
    # the reducer folds the new values into restored bytes (a str would fail it).
    shutil.rmtree(tmp_path / "state")
    _append(wh, "blobs", second)
    _run(wh, tmp_path / "state", limit)
    _check(spark, wh, first + second)


def test_a_bytes_store_killed_mid_commit_reruns_exactly_once(spark, tmp_path):
    blobs = _blobs(60, seed=5, start=0)
    wh = Warehouse(tmp_path / "wh")
    _setup(wh, blobs)
    state = tmp_path / "state"
    for point in ("after_changelog:tails@2", "after_tables@3"):
        proc = _run_in_subprocess(
            wh, state, point, app=APP, max_records=MAX_RECORDS, inprocess_max_records=10**9
        )
        assert proc.returncode == -9, (point, proc.returncode, proc.stderr[-3000:])
    proc = _run_in_subprocess(
        wh, state, None, app=APP, max_records=MAX_RECORDS, inprocess_max_records=10**9
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    _check(spark, wh, blobs)


JSON_STORE_APP = """
import lakestate as ls

B, J = ls.Serdes.Bytes(), ls.Serdes.Json()
b = ls.StreamsBuilder()
blobs = b.stream("blobs", ls.Consumed.with_(B, B))
blobs.to("copied", ls.Produced.with_(B, B))
blobs.group_by_key(ls.Grouped.with_(J, J)).count(ls.Materialized.as_("counts"))
app = ls.App("json_store", b.build())
"""


def test_a_json_store_given_bytes_keys_fails_before_anything_is_written(tmp_path):
    from lakestate.errors import StreamsException

    wh = Warehouse(tmp_path / "wh")
    _setup(wh, _blobs(10, seed=6, start=0))
    (tmp_path / "app.py").write_text(JSON_STORE_APP)
    state = tmp_path / "state"
    with pytest.raises(StreamsException) as err:
        run_app(
            str(tmp_path / "app.py"),
            warehouse=wh.root,
            state_dir=str(state),
            until_caught_up=True,
            inprocess_max_records=10**9,
            say=lambda _: None,
        )
    message = str(err.value)
    assert "store 'counts' (key serde Serdes.Json())" in message
    assert "KSTREAM-AGGREGATE-" in message and "Grouped.with_(Serdes.Bytes()" in message
    # Nothing half-applied: no sink rows, no changelog, nothing staged or stored locally.
    assert (
        not topics.topic(wh, "copied").exists()
        or sum(topics.topic(wh, "copied").end_offsets().values()) == 0
    )
    assert not list((tmp_path / "wh").rglob("changelog/counts/*.parquet"))
    assert not list(state.rglob("staged/*.pkl"))
