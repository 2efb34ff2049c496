"""A foreign-key table join over Bytes values in the in-process engine (tests/integration/
apps/bytes_fk_join.py): through the subscription and response topics (a cycle answered in
later batches), the joiner gets bytes, and each row's last result is its model's join
(its value's first byte names its label)."""

from __future__ import annotations

import base64
import json
import random

import pytest
from engine_helpers import APPS
from lakestate import run_app
from lakestate.io import topics
from lakestate.read import duckdb_engine
from lakestate.warehouse import Warehouse

pytestmark = pytest.mark.integration

LABELS = [b"", b"\x00", b"\xff", b"\x80\x81"]  # by foreign key "00", "01", "02", "03"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_a_bytes_foreign_key_join_gives_each_row_its_labels_bytes(tmp_path):
    wh = Warehouse(tmp_path / "wh")
    for topic in ("rows", "labels"):
        topics.topic(wh, topic).create(2)
    rng = random.Random(7)
    # A log table holds a String key as its text, a Bytes value as base64 text; the sink
    # writes them as their JSON text.
    labels = [{"key": f"{i:02x}", "value": _b64(v), "timestamp": i} for i, v in enumerate(LABELS)]
    topics.topic(wh, "labels").append(labels)
    rows, last = [], {}
    for i in range(40):
        key, value = f"r{rng.randrange(8)}", bytes([rng.randrange(4)]) + rng.randbytes(3)
        rows.append({"key": key, "value": _b64(value), "timestamp": 10 + i})
        last[key] = value
    topics.topic(wh, "rows").append(rows)
    run_app(
        str(APPS / "bytes_fk_join.py"),
        warehouse=wh.root,
        state_dir=str(tmp_path / "state"),
        max_records=9,
        until_caught_up=True,
        inprocess_max_records=10**9,
        say=lambda _: None,
    )
    found = duckdb_engine.sql(wh, "SELECT key, value, offset FROM joined").rows
    latest = {}
    for key, value, _ in sorted(found, key=lambda r: r[2]):  # a key: one partition
        # A tombstone (an answer before the label was read) is retracted by a later one.
        latest[json.loads(key)] = None if value is None else base64.b64decode(json.loads(value))
    assert latest == {k: LABELS[v[0]] + b":" + v for k, v in last.items()}
