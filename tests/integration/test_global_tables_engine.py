"""Global tables through the engine and Spark: a stream left-joined with a global table
gives what the test driver gives, in one batch, in many small batches, and with the local
state wiped before every fourth batch (a restored store holds no global data: its tasks
read the global topic again from offset 0, within the batch's record budget, so with 7
records a batch the global table takes three batches to rebuild before purchases advance).

Each batch applies the global topic's records up to its planned end before its stream
records, so a stream record is joined with the global table as of that end. Here the
global topic is always written before the stream records that should see it, so the
result does not depend on the batch boundaries (docs/architecture.md, "Global tables").

Exactly-once with a global table: SIGKILL at each commit step, and wiped local state (all
tasks' or one task's), with the global topic written between batches and after a killed
batch was recorded; the reruns equal uninterrupted runs and the test driver."""

from __future__ import annotations

import random
import shutil

import pytest
from engine_helpers import APPS, local_state, state_rows, topic_rows
from lakestate import run_app
from lakestate.app import load_app
from lakestate.checkpoint import progress
from lakestate.io import topics
from lakestate.task_id import TaskId
from lakestate.testing import TopologyTestDriver
from lakestate.warehouse import Warehouse

pytestmark = pytest.mark.integration

APP = str(APPS / "global_join.py")


def _phases(seed: int = 5) -> list[tuple[str, list[dict]]]:
    """Products, purchases, products changed (updates and deletes), more purchases."""
    rng = random.Random(seed)

    def products(n: int, version: str) -> list[dict]:
        return [
            {
                "key": f"p{rng.randrange(8)}",
                "value": rng.choice([{"name": f"{version}{i}", "price": i}, None]),
                "timestamp": 500 + i,
            }
            for i in range(n)
        ]

    def purchases(first: int, n: int) -> list[dict]:
        return [
            {
                "key": f"o{first + i}",
                "value": {"product": f"p{rng.randrange(9)}", "qty": rng.randrange(1, 4)},
                "timestamp": 1_000 + first + i,
            }
            for i in range(n)
        ]

    return [
        ("products", products(10, "a")),
        ("purchases", purchases(0, 30)),
        ("products", products(8, "b")),
        ("purchases", purchases(30, 30)),
    ]


def _run(wh: Warehouse, state, *, max_records: int | None, wipe: bool) -> None:
    for i in range(100):
        result = run_app(
            APP,
            warehouse=wh.root,
            state_dir=str(state),
            max_records=max_records,
            max_batches=1,
            say=lambda _: None,
        )
        if not result.batches:
            return
        if wipe and i % 4 == 3:
            shutil.rmtree(state)
    raise AssertionError("the app did not catch up")


@pytest.mark.parametrize(
    ("max_records", "wipe"), [(None, False), (7, False), (7, True)], ids=["one", "many", "wiped"]
)
def test_global_table_join_matches_the_driver(spark, tmp_path, max_records, wipe):
    wh = Warehouse(tmp_path / "wh")
    topics.topic(wh, "products").create(3)
    topics.topic(wh, "purchases").create(2)
    state = tmp_path / "state"
    phases = _phases()
    if max_records is None:  # one batch: every product before every purchase
        phases = sorted(phases, key=lambda phase: phase[0] != "products")
    app = load_app(APP)
    with TopologyTestDriver(app.topology, {"application.id": app.name}) as driver:
        for topic, records in phases:
            topics.topic(wh, topic).append(records)
            if max_records is not None:
                _run(wh, state, max_records=max_records, wipe=wipe)
            source = driver.create_input_topic(topic)
            for r in records:
                source.pipe_input(r["key"], r["value"], timestamp=r["timestamp"])
        expected = driver.create_output_topic("priced").read_records_to_list()
        products = dict(driver.get_key_value_store("products").all())
    if max_records is None:
        result = run_app(APP, warehouse=wh.root, state_dir=str(state), say=lambda _: None)
        assert len(result.batches) == 1 and result.records == 60
    # One record per purchase key: compared by key (the tasks' output interleaves).
    got = sorted(((k, v, ts) for _p, _o, k, v, ts in topic_rows(spark, wh, "priced")), key=str)
    assert got == sorted(((x.key, x.value, x.timestamp) for x in expected), key=str)
    assert len(got) == 60
    # Some purchases found their product, some did not (deleted or never there).
    found = [v["product"] for _k, v, _ts in got]
    assert None in found and any(found)
    # Every task holds the whole global table in its local store.
    for task in ("0_0", "0_1"):
        held = local_state(state, "global_join", task, "products", "timestamped_key_value")
        assert held == products
    # The global offsets reached are in the progress rows.
    rows = progress.read(wh.progress_path("global_join"), [TaskId(0, 0)], "global_join")
    offsets = rows.last(TaskId(0, 0)).offsets
    assert {k for k in offsets if k.startswith("products@")} == {
        "products@0",
        "products@1",
        "products@2",
    }


# Exactly-once with a global table: the app joins purchases with the global products table
# (inner, to the "priced" topic; left, into each customer's "spend" store, which has a
# changelog), so a batch writes a sink and a changelog from the global state it read.
SPEND_APP = "global_spend.py"
CUSTOMERS = [f"c{i}" for i in range(2, 8)]  # c2-c4 in partition 0 of purchases, c5-c7 in 1


def _products(rng: random.Random, n: int, version: str) -> list[dict]:
    """Updates of products p0-p7 (one in four deletes it), at prices under 100."""
    return [
        {
            "key": f"p{rng.randrange(8)}",
            "value": None if rng.random() < 0.25 else {"name": f"{version}{i}", "price": 1 + i},
            "timestamp": 500 + i,
        }
        for i in range(n)
    ]


def _repriced(version: str) -> list[dict]:
    """Every product again, at prices of 100 and more: a purchase joined with these shows
    it (a purchase planned before them must not see them)."""
    return [
        {"key": f"p{i}", "value": {"name": f"{version}{i}", "price": 100 + i}, "timestamp": 900}
        for i in range(8)
    ]


def _purchases(rng: random.Random, first: int, n: int) -> list[dict]:
    """Orders first..first+n-1 of every customer in turn (both tasks get some), of p0-p8
    (p8 is never a product)."""
    return [
        {
            "key": CUSTOMERS[(first + i) % len(CUSTOMERS)],
            "value": {"order": first + i, "product": f"p{rng.randrange(9)}", "qty": 1 + i % 3},
            "timestamp": 1_000 + first + i,
        }
        for i in range(n)
    ]


def _spend_topics(spark, *warehouses: Warehouse) -> None:
    for wh in warehouses:
        topics.topic(wh, "products").create(3)
        topics.topic(wh, "purchases").create(2)


def _append(spark, wh: Warehouse, phase: tuple[list[dict], list[dict]]) -> None:
    products, purchases = phase
    if products:
        topics.topic(wh, "products").append(products)
    topics.topic(wh, "purchases").append(purchases)


def _run_spend(wh: Warehouse, state, say=lambda _: None) -> None:
    run_app(
        str(APPS / SPEND_APP),
        warehouse=wh.root,
        state_dir=str(state),
        until_caught_up=True,
        say=say,
    )


def _spend_results(spark, wh: Warehouse) -> tuple:
    return topic_rows(spark, wh, "priced"), state_rows(spark, wh, "global_spend", "spend")


def _check_against_driver(spark, wh: Warehouse, state, phases) -> None:
    """The engine's results equal the test driver's, fed each phase's products before its
    purchases; every task's local store holds the whole global table."""
    app = load_app(APPS / SPEND_APP)
    with TopologyTestDriver(app.topology, {"application.id": app.name}) as driver:
        products_in = driver.create_input_topic("products")
        purchases_in = driver.create_input_topic("purchases")
        for products, purchases in phases:
            for r in products:
                products_in.pipe_input(r["key"], r["value"], timestamp=r["timestamp"])
            for r in purchases:
                purchases_in.pipe_input(r["key"], r["value"], timestamp=r["timestamp"])
        expected = driver.create_output_topic("priced").read_records_to_list()
        spend = dict(driver.get_key_value_store("spend").all())
        products = dict(driver.get_key_value_store("products").all())
    priced, got_spend = _spend_results(spark, wh)

    def by_key(rows) -> dict:  # a key's records stay in offset order; tasks interleave
        out: dict = {}
        for key, value, ts in rows:
            out.setdefault(key, []).append((value, ts))
        return out

    assert by_key((k, v, ts) for _p, _o, k, v, ts in priced) == by_key(
        (x.key, x.value, x.timestamp) for x in expected
    )
    assert got_spend == spend
    for task in ("0_0", "0_1"):
        held = local_state(state, "global_spend", task, "products", "timestamped_key_value")
        assert held == products


def test_kill_at_each_commit_step_with_a_global_table_gives_the_uninterrupted_result(
    spark, tmp_path
):
    """SIGKILL after the progress commit, after the sink, after the changelog, between the
    tables and the local commit, and in the middle of the local commits (one task's global
    store committed, the other's staged); a rerun gives what uninterrupted runs give, and
    what the test driver gives. Every product is re-priced after the first kill: the
    replays of the killed batch must read the global topic up to the ends it recorded."""
    from test_exactly_once import _run_in_subprocess

    rng = random.Random(7)
    phases = [
        (_products(rng, 10, "a"), _purchases(rng, 0, 12)),
        (_products(rng, 6, "b"), _purchases(rng, 12, 12)),
        (_repriced("c"), _purchases(rng, 24, 12)),
        (_products(rng, 6, "d"), _purchases(rng, 36, 12)),
        (_products(rng, 6, "e"), _purchases(rng, 48, 12)),
    ]
    reference, wh = Warehouse(tmp_path / "reference"), Warehouse(tmp_path / "wh")
    _spend_topics(spark, reference, wh)
    for phase in phases:  # one uninterrupted run per phase: a batch per task each
        _append(spark, reference, phase)
        _run_spend(reference, tmp_path / "ref-state")

    state = tmp_path / "state"
    said: list[str] = []

    def killed(point: str) -> None:
        proc = _run_in_subprocess(wh, state, point, app=SPEND_APP, max_records=10_000)
        assert proc.returncode == -9, (point, proc.returncode, proc.stderr[-3000:])
        said.append(proc.stdout)

    _append(spark, wh, phases[0])
    _run_spend(wh, state)
    _append(spark, wh, phases[1])
    killed("after_progress@2")
    _append(spark, wh, phases[2])  # after batch 2 was planned and recorded
    killed("after_sink:priced@2")  # replays batch 2
    killed("after_changelog:spend@2")  # replays batch 2 again: it is then complete
    killed("after_tables@3")  # batch 3: the re-priced products and their purchases
    _append(spark, wh, phases[3])
    killed("mid_local_commit@4")
    _append(spark, wh, phases[4])
    last: list[str] = []
    _run_spend(wh, state, say=last.append)

    assert "replaying the recorded batches" in said[1] and "replaying" in said[2]
    assert "applied the staged transaction of batch 2" in said[3]
    assert "applied the staged transaction of batch 3" in said[4]
    assert any("applied the staged transaction of batch 4" in line for line in last)
    assert _spend_results(spark, wh) == _spend_results(spark, reference)
    _check_against_driver(spark, wh, state, phases)
    # Batch 2's purchases found products, at the prices before the re-pricing.
    prices = [v["price"] for _p, _o, _k, v, _ts in topic_rows(spark, wh, "priced")]
    orders = [v["order"] for _p, _o, _k, v, _ts in topic_rows(spark, wh, "priced")]
    batch_2 = [p for p, o in zip(prices, orders, strict=True) if 12 <= o < 24]
    assert batch_2 and max(batch_2) < 100


def test_wiped_local_state_reads_the_global_topic_from_zero(spark, tmp_path):
    """A restored store holds no global data: its task reads the global topic again from
    offset 0, up to the ends of the batch it runs. Killed after the progress commit of a
    batch that read no product (every product came in batch 1), with the local state then
    wiped and every product re-priced, the replay must rebuild the global table as batch 1
    left it. Then one task's store alone is wiped: in one batch the two tasks read the
    global topic from different offsets. Results equal uninterrupted runs and the driver."""
    from test_exactly_once import _run_in_subprocess

    rng = random.Random(9)
    phases = [
        (_products(rng, 10, "a"), _purchases(rng, 0, 12)),
        ([], _purchases(rng, 12, 12)),
        (_repriced("c"), _purchases(rng, 24, 12)),
        (_products(rng, 6, "d"), _purchases(rng, 36, 12)),
    ]
    reference, wh = Warehouse(tmp_path / "reference"), Warehouse(tmp_path / "wh")
    _spend_topics(spark, reference, wh)
    for phase in phases:
        _append(spark, reference, phase)
        _run_spend(reference, tmp_path / "ref-state")

    state = tmp_path / "state"
    _append(spark, wh, phases[0])
    _run_spend(wh, state)
    _append(spark, wh, phases[1])
    proc = _run_in_subprocess(wh, state, "after_progress@2", app=SPEND_APP, max_records=10_000)
    assert proc.returncode == -9, proc.stderr[-3000:]
    _append(spark, wh, phases[2])
    shutil.rmtree(state)
    said: list[str] = []
    _run_spend(wh, state, say=said.append)
    assert sum("restored" in line for line in said) == 2, said
    assert any("replaying the recorded batches" in line for line in said), said

    _append(spark, wh, phases[3])
    shutil.rmtree(state / "global_spend" / "0_1")
    _run_spend(wh, state)
    rows = progress.read(wh.progress_path("global_spend"), None, "global_spend")
    starts = {
        task: {k: r[0] for k, r in rows.last(TaskId(0, task)).ranges.items() if "@" in k}
        for task in (0, 1)
    }
    assert rows.last(TaskId(0, 1)).batch_id == 4
    assert any(starts[0].values()) and not any(starts[1].values()), starts

    assert _spend_results(spark, wh) == _spend_results(spark, reference)
    _check_against_driver(spark, wh, state, phases)
