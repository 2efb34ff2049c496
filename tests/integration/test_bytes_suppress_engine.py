"""A suppress over a Bytes table in the in-process engine (tests/integration/apps/
bytes_suppress.py): each window's final bytes come out once, when stream time closes it,
including the windows still buffered when the local state was wiped (the buffer restored
from its changelog gives the bytes back, and the reducer folds new bytes into the
restored aggregates)."""

from __future__ import annotations

import base64
import random
import shutil
from collections import Counter

import pytest
from engine_helpers import APPS
from lakestate import run_app
from lakestate.io import topics
from lakestate.read import duckdb_engine
from lakestate.warehouse import Warehouse

pytestmark = pytest.mark.integration

KEYS = [b"", b"\x00", b"\xff\xfe", b"\x80abc", b"k"]
SIZE = 10  # the app's window size (ms)


def _blobs(n: int, seed: int, start: int) -> list[tuple[bytes, bytes, int]]:
    """In timestamp order (one partition: nothing is late)."""
    rng = random.Random(seed)
    return [(rng.choice(KEYS), rng.randbytes(rng.randrange(5)), start + i) for i in range(n)]


def _append(wh: Warehouse, records: list[tuple[bytes, bytes, int]]) -> None:
    b64 = lambda data: base64.b64encode(data).decode()  # noqa: E731 (a log table's Bytes)
    rows = [{"key": b64(k), "value": b64(v), "timestamp": ts} for k, v, ts in records]
    topics.topic(wh, "blobs").append(rows)


def _model(blobs: list) -> Counter:
    """The final value of each window that the stream time (the last timestamp) closed."""
    tails: dict[tuple[bytes, int], bytes] = {}
    for k, v, ts in blobs:
        window = (k, ts - ts % SIZE)
        tails[window] = (tails[window] + v)[-6:] if window in tails else v
    closed = max(ts for _, _, ts in blobs)
    return Counter(
        (k + b"@" + str(start).encode(), v)
        for (k, start), v in tails.items()
        if start + SIZE <= closed
    )


def _run(wh: Warehouse, state) -> None:
    run_app(
        str(APPS / "bytes_suppress.py"),
        warehouse=wh.root,
        state_dir=str(state),
        max_records=7,
        until_caught_up=True,
        inprocess_max_records=10**9,
        say=lambda _: None,
    )


def _out(wh: Warehouse) -> Counter:
    rows = duckdb_engine.sql(wh, "SELECT key, value FROM finals_out").rows
    return Counter((base64.b64decode(k), base64.b64decode(v)) for k, v in rows)


def test_a_suppressed_bytes_table_emits_each_final_window_once_across_a_wiped_restore(tmp_path):
    wh = Warehouse(tmp_path / "wh")
    topics.topic(wh, "blobs").create(1)
    first, second = _blobs(45, seed=5, start=1_000), _blobs(30, seed=6, start=1_100)
    _append(wh, first)
    _run(wh, tmp_path / "state")
    assert _out(wh) == _model(first)
    buffered = duckdb_engine.sql(wh, "SELECT count(*) FROM bytes_suppress__finals_store").rows
    assert buffered[0][0] > 0  # windows left in the buffer for the restore to bring back
    shutil.rmtree(tmp_path / "state")
    _append(wh, second)
    _run(wh, tmp_path / "state")
    assert _out(wh) == _model(first + second)
