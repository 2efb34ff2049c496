"""Exactly-once for the newer operators, in one app (apps/all_new_ops.py: a stream-stream
outer join into a Processor-API processor with a store and a stream-time punctuator, a
cogroup, and a foreign-key join on the cogroup's table), through each transport: the
engine process is SIGKILLed at every step of a batch's commit (after the progress commit,
after each sink, after each store's changelog in the commit's order, after all tables, in
the middle of the local commits), with the local state wiped before some reruns; the last
rerun leaves the sinks and every store as one uninterrupted run leaves them, and that is
what the test driver gives for the same input.

One app for all the operators keeps the Spark chain to one (each killed Spark run costs
tens of seconds). Every input has one partition (the two sub-topologies run one task
each, so the middle of the local commits exists; the per-operator engine tests cover
several partitions); a task's
inputs are processed in timestamp order whatever the batches (runtime/plan.py), so the
joined and punctuated output is the driver's record by record. The FK join's output
depends on where batches end (its answers come back through a cycle of topics), as in
Kafka on timing; its result converges (test_fk_join_engine), so for it the driver is
compared on each order's last output and the stores."""

from __future__ import annotations

import heapq
import json
import random
import shutil
from pathlib import Path

import pytest
from engine_helpers import APPS, topic_rows
from lakestate.app import load_app
from lakestate.checkpoint.layout import ensure_layout
from lakestate.io import topics as io_topics
from lakestate.read.spark_engine import state_frame
from lakestate.runtime.executor_stores import executor_state_dir
from lakestate.testing import TopologyTestDriver
from lakestate.warehouse import Warehouse
from test_exactly_once import _run_in_subprocess

pytestmark = pytest.mark.integration

APP_FILE = "all_new_ops.py"
APP = load_app(APPS / APP_FILE)
KEYS = ("u1", "u2", "u3", "u4")
WAITING = "pairs-outer-shared-join-store"
MAX_RECORDS = 10
# Clicks and views: 7 batches, one past the chain's last kill point (mid_local_commit@6).
# The kill points are the same as with 80 (11 batches); the 4 batches more only lengthened
# each chain's last run (in Spark, 7-22 s a batch).
EVENTS = 32
# The transports of a batch's processing (runtime/inprocess.py): inprocess_max_records.
TRANSPORTS = {"spark": 0, "in_process": 10**9}
# The stores whose rows the driver is compared on (the join's window stores are compared
# with the uninterrupted run only; the shared store's waiting records with the driver).
SUBSCRIPTIONS = next(s for s in APP.topology.stores if "SUBSCRIPTION-STATE-STORE" in s)
FK_OUTPUT = next(s for s in APP.topology.stores if "FK-JOIN-OUTPUT-STATE-STORE" in s)
KV_STORES = ("activity", "orders", "seen", SUBSCRIPTIONS, FK_OUTPUT)


def _inputs(seed: int) -> dict[str, list[dict]]:
    """Orders first in time (each names a user, some one without activity or none; some
    change user or are deleted), then ``EVENTS`` clicks and views over one time span, out
    of order within each input, a few null values; every timestamp distinct (no ties in
    the merge)."""
    rng = random.Random(seed)
    orders = []
    for i in range(16):
        user = rng.choice((*KEYS, "u9", None))  # u9: no activity
        # Keys in sorted order, as the engine's topics serialize them: the subscription
        # store holds a hash of the serialized row (processors/fk_join.value_hash).
        value = None if rng.random() < 0.1 else {"item": f"i{i}", "user": user}
        orders.append({"key": f"o{rng.randrange(8)}", "value": value, "timestamp": 100 + i})
    stamps = rng.sample(range(1_000, 1_000 + 10 * EVENTS), EVENTS)
    streams: dict[str, list[dict]] = {"clicks": [], "views": []}
    for i, ts in enumerate(sorted(stamps)):
        topic = "clicks" if i % 8 in (0, 3, 5) else "views"
        value = None if rng.random() < 0.1 else f"{topic[0]}{i}"
        streams[topic].append({"key": rng.choice(KEYS), "value": value, "timestamp": ts})
    for records in streams.values():  # out of order, by swapping neighbours
        for n in range(0, len(records) - 1, 3):
            a, b = records[n]["timestamp"], records[n + 1]["timestamp"]
            records[n]["timestamp"], records[n + 1]["timestamp"] = b, a
    return {"orders": orders, **streams}


def _produce(wh: Warehouse, inputs: dict[str, list[dict]]) -> None:
    for topic, records in inputs.items():
        io_topics.topic(wh, topic).create(1)
        io_topics.topic(wh, topic).append(records)


def _merged(*inputs: list[dict]) -> list[tuple[int, dict]]:
    """(input index, record) in the order a task processes them: the input whose next
    record has the lowest timestamp first (Kafka's PartitionGroup)."""
    heads = [(rs[0]["timestamp"], n, 0) for n, rs in enumerate(inputs) if rs]
    heapq.heapify(heads)
    out = []
    while heads:
        _, n, i = heapq.heappop(heads)
        out.append((n, inputs[n][i]))
        if i + 1 < len(inputs[n]):
            heapq.heappush(heads, (inputs[n][i + 1]["timestamp"], n, i + 1))
    return out


def _store_rows(rows) -> list:
    """Key-value rows as their SQL view gives them: a tuple key as a JSON list."""
    return sorted((list(k) if isinstance(k, tuple) else k, v) for k, v in rows)


def _driver(inputs: dict[str, list[dict]]) -> dict:
    """The driver's joined-and-punctuated output, each order's last enriched value, the
    key-value stores and the join's waiting records."""
    with TopologyTestDriver(APP.topology, {"application.id": APP.name}) as d:
        orders = d.create_input_topic("orders")
        for r in inputs["orders"]:
            orders.pipe_input(r["key"], r["value"], timestamp=r["timestamp"])
        sources = [d.create_input_topic("clicks"), d.create_input_topic("views")]
        for n, r in _merged(inputs["clicks"], inputs["views"]):
            sources[n].pipe_input(r["key"], r["value"], timestamp=r["timestamp"])
        out = [
            (x.key, x.value, x.timestamp)
            for x in d.create_output_topic("out").read_records_to_list()
        ]
        last = {x.key: x.value for x in d.create_output_topic("enriched").read_records_to_list()}
        stores = {s: _store_rows(d.get_key_value_store(s).all()) for s in KV_STORES}
        waiting = sorted(
            (key, ts, "left" if left else "right", v)
            for _, ts, left, key, v in d.get_state_store(WAITING).scan()
        )
    return {"out": out, "last": last, "stores": stores, "waiting": waiting}


def _store_view(rows) -> list:
    return sorted((json.loads(r["key"]), json.loads(r["value"])) for r in rows)


def _waiting_view(rows) -> list:
    return sorted((json.loads(r["key"]), r["ts"], r["side"], json.loads(r["value"])) for r in rows)


def _store_rows_of(spark, wh: Warehouse) -> dict:
    """Every store's rows as its SQL view gives them (each view read once)."""
    return {s: state_frame(spark, wh, APP.name, s).collect() for s in APP.topology.stores}


def _results(spark, wh: Warehouse, stores: dict) -> dict:
    """Every sink's records and every store's rows (``stores``: ``_store_rows_of(wh)``)."""
    return {
        "sinks": {t: topic_rows(spark, wh, t) for t in ("out", "enriched")},
        "stores": {s: sorted(map(str, rows)) for s, rows in stores.items()},
    }


def _batch_commits(path: str, app: str) -> list[dict[str, int]]:
    """Per commit of a Delta table (in its log), the batch of each task it carries
    (its ``txn`` actions: io/txn_ids.py)."""
    prefix = f"lakestate/{app}/"
    commits = []
    for log in sorted(Path(path, "_delta_log").glob("*.json")):
        txns = {}
        for line in log.read_text().splitlines():
            txn = json.loads(line).get("txn")
            if txn and txn["appId"].startswith(prefix):
                txns[txn["appId"][len(prefix) :]] = txn["version"]
        if txns:
            commits.append(txns)
    return commits


def _fault_points(wh: Warehouse) -> list[str]:
    """Every step of the commit in an uninterrupted run of ``wh``'s app, each at the first
    batch from 2 on that reaches it (a batch is named by its lowest task batch, as
    checkpoint/faults.py does), in the order of the chain: by batch, then in the commit's
    order (checkpoint/commit.py: progress, the sinks by name, the changelogs by store
    name). Each run replays the batch up to the next table; the last two cut a later
    batch before the local commits and in their middle."""
    batches = _batch_commits(wh.progress_path(APP.name), APP.name)
    first = {tuple(sorted(b.items())): min(b.values()) for b in batches}

    def reached(path: str) -> int:
        """The first batch from 2 on that wrote the table at ``path``."""
        for written in _batch_commits(path, APP.name):
            whole = next(b for b in first if set(written.items()) <= set(b))
            if first[whole] >= 2:
                return first[whole]
        raise AssertionError(f"no batch from 2 on wrote {path}")

    tables = [
        *(
            (f"after_sink:{t}", reached(wh.topic_path(t)))
            for t in sorted(ensure_layout(APP, wh).outputs)
        ),
        *(
            (f"after_changelog:{s}", reached(wh.changelog_path(APP.name, s)))
            for s in sorted(APP.topology.stores)
        ),
    ]
    ordered = sorted(tables, key=lambda point: point[1])  # stable: the commit's order kept
    last = ordered[-1][1]
    assert max(first.values()) >= last + 2, "too few batches for the last two points"
    return [
        "after_progress@2",
        *(f"{point}@{batch}" for point, batch in ordered),
        f"after_tables@{last + 1}",
        f"mid_local_commit@{last + 2}",
    ]


def _first_of_each_step(points: list[str]) -> list[str]:
    """The first point of each commit step (``after_sink:...``, ``after_changelog:...``,
    ...), in the chain's order."""
    steps: set[str] = set()
    kept = []
    for point in points:
        step = point.split(":")[0].split("@")[0]
        if step not in steps:
            steps.add(step)
            kept.append(point)
    return kept


def _run(wh: Warehouse, state: Path, fault: str | None, limit: int):
    return _run_in_subprocess(
        wh, state, fault, app=APP_FILE, max_records=MAX_RECORDS, inprocess_max_records=limit
    )


@pytest.fixture(scope="session")
def new_ops_reference(tmp_path_factory) -> Warehouse:
    """One uninterrupted run of the app over ``_inputs(seed=9)`` in a process of its own,
    in process: a transport cannot change a result, so every chain is compared with this
    run (read only; one per pytest process)."""
    root = tmp_path_factory.mktemp("new-ops-reference")
    reference = Warehouse(root / "reference")
    _produce(reference, _inputs(seed=9))
    proc = _run(reference, root / "ref-state", None, TRANSPORTS["in_process"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return reference


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
def test_kill_at_every_commit_step_with_state_wiped_gives_the_uninterrupted_and_driver_result(
    spark, tmp_path, transport, new_ops_reference
):
    inputs = _inputs(seed=9)
    limit = TRANSPORTS[transport]
    reference = new_ops_reference
    said = []
    wh = Warehouse(tmp_path / "wh")
    _produce(wh, inputs)
    state = tmp_path / "state"
    points = _fault_points(reference)
    if transport == "spark":
        # A killed Spark run costs 35-60 s: through Spark, one kill per commit step (the
        # first sink and the first changelog stand for the others, written by the same
        # code); in process, every table's.
        # Spark's executors own the stores (the default on a local master too): the driver
        # has no local commit to kill in; each task's executor applies its staged batch at
        # the start of its next one.
        points = [p for p in _first_of_each_step(points) if not p.startswith("mid_local")]
    executors = executor_state_dir(wh.root)
    try:
        for n, point in enumerate([*points, None]):
            if n % 4 == 3:  # the local state lost: the rerun restores it from the changelogs
                shutil.rmtree(state, ignore_errors=True)
                shutil.rmtree(executors, ignore_errors=True)
            proc = _run(wh, state, point, limit)
            want = 0 if point is None else -9
            assert proc.returncode == want, (point, proc.returncode, proc.stderr[-3000:])
            said.append(proc.stdout)
    finally:
        shutil.rmtree(executors, ignore_errors=True)
    where = "in Spark" if transport == "spark" else "in this process"
    assert all(f"transport: {where}" in out for out in said), said
    if transport == "spark":
        assert all("state: on Spark's executors" in out for out in said), said

    stores = _store_rows_of(spark, wh)
    got = _results(spark, wh, stores)
    assert got == _results(spark, reference, _store_rows_of(spark, reference))
    expected = _driver(inputs)
    out = [(k, v, ts) for _p, _o, k, v, ts in got["sinks"]["out"]]
    assert out == expected["out"]
    assert {k: v for _p, _o, k, v, _ts in got["sinks"]["enriched"]} == expected["last"]
    for store in KV_STORES:
        assert _store_view(stores[store]) == expected["stores"][store], store
    assert _waiting_view(stores[WAITING]) == expected["waiting"]
    # Each operator did its part: pairs, records without a partner, punctuations, waiting
    # records, activity strings and orders joined to them, or to none.
    values = [v for _, v, _ in out]
    assert any("/None" in v or "None/" in v for v in values)
    assert any("/None" not in v and "None/" not in v and "#" in v for v in values)
    assert sum(" by " in v for v in values) > 5
    assert expected["waiting"]
    assert any(v and not v.endswith("after None") for v in expected["last"].values())
    assert any(v and v.endswith("after None") for v in expected["last"].values())
