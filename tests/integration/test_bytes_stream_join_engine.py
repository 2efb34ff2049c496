"""Stream-stream joins with Bytes keys and values through the engine (issue 26; app
tests/integration/apps/bytes_stream_joins.py: inner, left and outer joins of Bytes lefts
with String rights under StreamJoined(Bytes, Bytes, String)): in small batches with the
local state wiped before every other batch (the buffers and the shared waiting store
restored from their changelogs), each join gives what the test driver gives, record by
record; the waiting store's SQL view shows what the driver's store holds (bytes on the
left side, text on the right); its changelog holds the left values as base64 JSON text and
the right ones as JSON strings; a buffer's view shows BINARY keys and values.

As in test_stream_joins_engine.py, each phase feeds one side and the engine catches up
before the next, so the order is the phases' whatever the batches."""

from __future__ import annotations

import base64
import json
import random
import shutil

import pytest
from engine_helpers import APPS, topic_rows
from lakestate import run_app
from lakestate.app import load_app
from lakestate.io import topics as io_topics
from lakestate.read.spark_engine import state_frame
from lakestate.testing import TopologyTestDriver
from lakestate.warehouse import Warehouse

pytestmark = pytest.mark.integration

APP = APPS / "bytes_stream_joins.py"
NAME = "bytes_stream_joins"
PARTITIONS = 2
# Empty, NUL, non-UTF-8 and ASCII keys, by partition (given explicitly).
KEYS = {b"": 0, b"\x00": 1, b"\xff\xfe": 0, b"k": 1}
WAITING = "outer-outer-shared-join-store"
OUTS = ("inner-out", "left-out", "outer-out")
# inprocess_max_records per transport, and each phase's batch size: Spark starts slowly.
TRANSPORTS = {"in_process": (10**9, 4), "spark": (0, 12)}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _phases(seed: int) -> list[tuple[str, list[tuple[bytes, object, int]]]]:
    """Alternating sides, timestamps walking forward with some out of order, random bytes
    (empty, NUL, not UTF-8) on the left and text on the right, a few null values, and a
    last right record for two keys far ahead (closes most windows; they wait, as does a
    last left record after them)."""
    rng = random.Random(seed)
    phases, now = [], 1_000
    for n, topic in enumerate(["lefts", "rights", "lefts", "rights", "lefts"]):
        records = []
        for i in range(10):
            now += rng.randrange(12)
            if topic == "lefts":
                value: object = rng.choice([b"", b"\x00", b"\xff\x80"]) + rng.randbytes(2)
            else:
                value = f"r{n}.{i}é"
            value = None if rng.random() < 0.1 else value
            records.append((rng.choice(list(KEYS)), value, now - rng.randrange(50)))
        phases.append((topic, records))
    phases.append(("rights", [(k, "end", now + 500) for k in list(KEYS)[:2]]))
    phases.append(("lefts", [(b"k", b"\xff\x00late", now + 505)]))  # waits, not UTF-8
    return phases


def _append(wh: Warehouse, topic: str, records: list) -> None:
    """A log table holds a Bytes key or value as base64 text, a String as itself."""
    rows = [
        {
            "key": _b64(k),
            "value": _b64(v) if isinstance(v, bytes) else v,
            "timestamp": ts,
            "partition": KEYS[k],
        }
        for k, v, ts in records
    ]
    io_topics.topic(wh, topic).append(rows)


def _driver_model(phases) -> tuple[dict, list[tuple]]:
    """Per output topic and key the driver's output (a key's task runs it in order; the
    sink partitions it by the key's bytes), and the outer join's waiting records."""
    app = load_app(APP)
    outputs: dict = {out: {} for out in OUTS}
    waiting = []
    for p in range(PARTITIONS):
        with TopologyTestDriver(app.topology, {"application.id": app.name}) as d:
            for topic, records in phases:
                source = d.create_input_topic(topic)
                for k, v, ts in records:
                    if KEYS[k] == p:
                        source.pipe_input(k, v, timestamp=ts)
            for out in OUTS:
                for x in d.create_output_topic(out).read_records_to_list():
                    outputs[out].setdefault(x.key, []).append((x.value, x.timestamp))
            store = d.get_state_store(WAITING)
            waiting += [(key, ts, left, v) for _, ts, left, key, v in store.scan()]
    return outputs, sorted(waiting)


def _engine_outputs(spark, wh: Warehouse) -> dict:
    got: dict = {out: {} for out in OUTS}
    for out in OUTS:
        for _partition, _offset, key, value, ts in topic_rows(spark, wh, out):
            got[out].setdefault(base64.b64decode(key), []).append((base64.b64decode(value), ts))
    return got


def _waiting_view(spark, wh: Warehouse) -> list[tuple]:
    """The waiting records as the store's SQL view shows them: the key BINARY (the key
    serde's), the value the JSON text of its side's form (base64 for the Bytes left)."""
    found = []
    for r in state_frame(spark, wh, NAME, WAITING).collect():
        left = r["side"] == "left"
        held = json.loads(r["value"])
        value = base64.b64decode(held, validate=True) if left else held
        found.append((bytes(r["key"]), r["ts"], left, value))
    return sorted(found)


def _run(wh: Warehouse, state, limit: int, batch: int):
    return run_app(
        str(APP),
        warehouse=wh.root,
        state_dir=str(state),
        inprocess_max_records=limit,
        max_records=batch,
        max_batches=1,
        until_caught_up=False,
        say=lambda _: None,
    )


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
def test_bytes_joins_match_the_driver_in_small_batches_with_state_wiped(spark, tmp_path, transport):
    limit, batch = TRANSPORTS[transport]
    phases = _phases(seed=11)
    wh = Warehouse(tmp_path / "wh")
    for topic in ("lefts", "rights"):
        io_topics.topic(wh, topic).create(PARTITIONS)
    state = tmp_path / "state"
    batches = 0
    for topic, records in phases:
        _append(wh, topic, records)
        while _run(wh, state, limit, batch).records:
            batches += 1
            if batches % 2:
                shutil.rmtree(state)  # the next batch restores every store first
    expected, waiting = _driver_model(phases)
    assert _engine_outputs(spark, wh) == expected
    outer = [v for rows in expected["outer-out"].values() for v, _ in rows]
    assert any(v.startswith(b"L") and v.endswith(b"|-") for v in outer)  # left waited, alone
    assert any(v.startswith(b"-|") for v in outer)  # right alone
    assert any(b"|r" in v and v.startswith(b"L") for v in outer)  # pairs
    assert _waiting_view(spark, wh) == waiting
    assert {left for _, _, left, _ in waiting} == {True, False}  # bytes and text wait
    # A buffer's view: BINARY keys and values (its serdes Bytes, Bytes).
    frame = state_frame(spark, wh, NAME, "left-this-join-store")
    types = {f.name: f.dataType.simpleString() for f in frame.schema.fields}
    assert (types["key"], types["value"]) == ("binary", "binary")
    assert {bytes(r["key"]) for r in frame.collect()} <= set(KEYS)
