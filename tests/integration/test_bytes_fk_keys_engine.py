"""A foreign-key left join of tables keyed by Bytes in the engine (tests/integration/apps/
bytes_fk_keys.py), in process and through Spark: row keys and foreign keys b"", NUL, 0xff
and keys extending them, through the subscription and response topics (a cycle answered
in later batches) in small batches, then with the local state wiped (the subscription
store restored from its changelog) labels change, appear and are deleted and rows change:
each row's last output, the result store's view (BINARY keys and values) and the
subscription store's view (BINARY keys: Kafka's CombinedKeySchema bytes; values the hash
of the row's bytes) equal a model's, on DuckDB and on Spark. A label change reaches the
rows of its own foreign key only (b"" is not b"\\x00")."""

from __future__ import annotations

import base64
import json
import random
import shutil
import struct
import sys

import pytest
from engine_helpers import APPS, topic_rows
from lakestate import run_app
from lakestate.app import load_app
from lakestate.io import topics
from lakestate.processors.fk_join import value_hash
from lakestate.read import duckdb_engine, spark_engine
from lakestate.runtime.executor_stores import executor_state_dir
from lakestate.serdes import Serdes
from lakestate.warehouse import Warehouse
from test_exactly_once import _run_in_subprocess

sys.path.insert(0, str(APPS))
from bytes_fk_keys import FOREIGN_KEYS, foreign_key, joined  # noqa: E402

pytestmark = pytest.mark.integration

APP = APPS / "bytes_fk_keys.py"
TRANSPORTS = {"in_process": 10**9, "spark": 0}  # inprocess_max_records per transport
ROW_KEYS = [b"", b"\x00", b"\x00\x00", b"\xff", b"\xff\x00", b"\x80", b"r"]


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def _append(wh: Warehouse, topic: str, records: list[tuple[bytes, bytes | None, int]]) -> None:
    """A log table holds Bytes as base64 text (the serde's JSON form)."""
    rows = [{"key": _b64(k), "value": _b64(v), "timestamp": ts} for k, v, ts in records]
    topics.topic(wh, topic).append(rows)


def _rows(rng: random.Random, n: int, start: int) -> list[tuple[bytes, bytes | None, int]]:
    out = []
    for i in range(n):
        value = None if rng.random() < 0.1 else bytes([rng.randrange(256)]) + rng.randbytes(2)
        out.append((rng.choice(ROW_KEYS), value, start + i))
    return out


def _phases() -> list[dict[str, list]]:
    """Labels for every foreign key but b"\\xff\\x00", then rows; then (after the wipe)
    the label of b"" changed, b"\\x00"'s deleted, b"\\xff\\x00"'s added, and more rows."""
    rng = random.Random(11)
    labels = [(fk, b"L" + bytes([i]), i) for i, fk in enumerate(FOREIGN_KEYS[:4])]
    first = {"labels": labels, "rows": _rows(rng, 40, 100)}
    changed = [(b"", b"\xfe\x00", 500), (b"\x00", None, 501), (b"\xff\x00", b"\x00", 502)]
    second = {"labels": changed, "rows": _rows(rng, 15, 600)}
    return [first, second]


def _model(phases: list[dict[str, list]]) -> tuple[dict, dict]:
    """Each row key's result (None: deleted) and the subscription store's entries, keyed
    as Kafka's store keys them: the foreign key's length (4 bytes), its bytes, the row's."""
    labels: dict[bytes, bytes | None] = {}
    rows: dict[bytes, bytes | None] = {}
    for phase in phases:
        for fk, label, _ in phase["labels"]:
            labels[fk] = label
        for key, value, _ in phase["rows"]:
            rows[key] = value
    labels = {fk: label for fk, label in labels.items() if label is not None}
    results = {
        k: None if v is None else joined(v, labels.get(foreign_key(v))) for k, v in rows.items()
    }
    subscriptions = {}
    for key, value in rows.items():
        fk = None if value is None else foreign_key(value)
        if fk is not None:
            combined = struct.pack(">i", len(fk)) + fk + key
            subscriptions[combined] = value_hash(value, Serdes.Bytes())
    return results, subscriptions


def _run(wh: Warehouse, state, limit: int) -> None:
    run_app(
        str(APP),
        warehouse=wh.root,
        state_dir=str(state),
        max_records=9,
        until_caught_up=True,
        inprocess_max_records=limit,
        say=lambda _: None,
    )


def _subscription_store() -> str:
    stores = load_app(APP).topology.stores
    return next(s for s in stores if "SUBSCRIPTION-STATE-STORE" in s)


def _check(spark, wh: Warehouse, phases: list[dict[str, list]]) -> None:
    results, subscriptions = _model(phases)
    last = {}
    for _, _, k, v, _ in topic_rows(spark, wh, "joined"):  # a key: one partition, in order
        last[base64.b64decode(k)] = None if v is None else base64.b64decode(v)
    # A row deleted before it had a value never had an output: None too.
    assert set(last) <= set(results) and {k: last.get(k) for k in results} == results
    live = {k: v for k, v in results.items() if v is not None}
    view = duckdb_engine.sql(wh, "SELECT key, value FROM bytes_fk_keys__joined").rows
    assert {bytes(k): bytes(v) for k, v in view} == live
    store = "bytes_fk_keys__" + _subscription_store().replace("-", "_")
    found = duckdb_engine.sql(wh, f"SELECT key, value FROM {store}").rows
    assert {bytes(k): json.loads(v) for k, v in found} == subscriptions
    # The same views on Spark: BINARY keys, the same bytes.
    frame = spark_engine.sql(spark, wh, f"SELECT key, value FROM {store}")
    assert {f.name: f.dataType.simpleString() for f in frame.schema.fields}["key"] == "binary"
    assert {bytes(k): json.loads(v) for k, v in frame.collect()} == subscriptions
    frame = spark_engine.sql(spark, wh, "SELECT key, value FROM bytes_fk_keys__joined")
    assert {bytes(k): bytes(v) for k, v in frame.collect()} == live


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
def test_a_join_of_bytes_keyed_tables_converges_across_a_wiped_restore(spark, tmp_path, transport):
    limit = TRANSPORTS[transport]
    wh = Warehouse(tmp_path / "wh")
    for topic in ("rows", "labels"):
        topics.topic(wh, topic).create(2)
    first, second = _phases()
    state = tmp_path / "state"
    try:
        for topic in ("labels", "rows"):
            _append(wh, topic, first[topic])
        _run(wh, state, limit)
        _check(spark, wh, [first])
        # The local state wiped (and Spark's executors'): the next run restores the
        # subscription store from its changelog, and the label changes must reach exactly
        # the rows subscribed to their foreign keys.
        shutil.rmtree(state)
        shutil.rmtree(executor_state_dir(wh.root), ignore_errors=True)
        for topic in ("labels", "rows"):
            _append(wh, topic, second[topic])
        _run(wh, state, limit)
        _check(spark, wh, [first, second])
    finally:
        shutil.rmtree(executor_state_dir(wh.root), ignore_errors=True)
    results, subscriptions = _model([first, second])
    # The inputs did what they are for: rows without a label, rows per edge foreign key.
    assert any(v is not None and v.startswith(b"-:") for v in results.values())
    assert {k[4 : 4 + struct.unpack(">i", k[:4])[0]] for k in subscriptions} >= {b"", b"\x00"}


def test_a_bytes_keyed_join_killed_mid_commit_reruns_exactly_once(spark, tmp_path):
    """SIGKILLed after the subscription store's changelog, after the progress commit and
    after all tables (before the local commit), the local state wiped before the last
    rerun (in process): the sink and both stores' views are the model's, as uninterrupted."""
    wh = Warehouse(tmp_path / "wh")
    for topic in ("rows", "labels"):
        topics.topic(wh, topic).create(2)
    phases = _phases()
    for phase in phases:
        for topic in ("labels", "rows"):
            _append(wh, topic, phase[topic])
    state = tmp_path / "state"
    subscriptions = _subscription_store()
    points = (f"after_changelog:{subscriptions}@2", "after_progress@4", "after_tables@6")
    for point in points:
        proc = _run_in_subprocess(
            wh, state, point, app=APP.name, max_records=9, inprocess_max_records=10**9
        )
        assert proc.returncode == -9, (point, proc.returncode, proc.stderr[-3000:])
    shutil.rmtree(state)
    proc = _run_in_subprocess(
        wh, state, None, app=APP.name, max_records=9, inprocess_max_records=10**9
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    _check(spark, wh, phases)
