"""SQL over the changelogs: each store's current state (latest row per key, tombstones
removed), all stores of an app pinned together, `--batch N` for the app a query names, and
the raw changelog beside it."""

from __future__ import annotations

import json

import pytest
from engine_helpers import APPS, events, produce
from lakestate.cli import main
from lakestate.engine.inspect import sql, state_frame
from lakestate.engine.runner import run_app
from lakestate.warehouse import Warehouse

pytestmark = pytest.mark.integration


def _run(wh, state, **kwargs):
    return run_app(
        str(APPS / "counts.py"),
        warehouse=wh.root,
        state_dir=str(state),
        max_records=10,
        say=lambda _: None,
        **kwargs,
    )


def _state(spark, wh, view, batch=None):
    rows = sql(spark, wh, f"SELECT key, value FROM {view}", batch).collect()
    return {json.loads(r["key"]): json.loads(r["value"]) for r in rows}


def test_views_show_current_state_pinned_per_app_and_the_raw_changelog(spark, tmp_path):
    records = events(60, seed=31)
    # The reference: the same app stopped after two batches.
    two = Warehouse(tmp_path / "two")
    produce(spark, two, "events", records, partitions=2)
    _run(two, tmp_path / "s2", max_batches=2)
    wh = Warehouse(tmp_path / "wh")
    produce(spark, wh, "events", records, partitions=2)
    result = _run(wh, tmp_path / "s", until_caught_up=True)
    assert len(result.batches) > 2

    assert _state(spark, wh, "counts__counts", batch=2) == _state(spark, two, "counts__counts")
    assert _state(spark, wh, "counts__sums", batch=2) == _state(spark, two, "counts__sums")
    # The last batch: every positive record counted once.
    counts: dict = {}
    for r in records:
        if r["value"]["amount"] > 0:
            counts[r["key"]] = counts.get(r["key"], 0) + 1
    assert _state(spark, wh, "counts__counts") == counts
    # The helper for plain Spark gives the same rows as the view.
    helper = {
        json.loads(r["key"]): json.loads(r["value"])
        for r in state_frame(spark, wh, "counts", "counts").collect()
    }
    assert helper == counts
    # The raw changelog: every row each batch appended, one per changed key per task batch.
    raw = sql(spark, wh, "SELECT task, batch_id, key FROM counts__counts__changelog").collect()
    assert len(raw) >= len(counts) and {r["batch_id"] for r in raw} >= {1, 2, 3}
    # --batch applies to the one app a query names.
    with pytest.raises(ValueError, match="applies to one app"):
        sql(spark, wh, "SELECT * FROM counts_out", batch=2)
    with pytest.raises(ValueError, match="no committed batch 99"):
        sql(spark, wh, "SELECT * FROM counts__counts", batch=99)


def test_cli_sql_with_a_batch(spark, tmp_path, capsys):
    wh = Warehouse(tmp_path / "wh")
    produce(spark, wh, "events", events(40, seed=32), partitions=2)
    _run(wh, tmp_path / "s", until_caught_up=True)
    query = "SELECT count(*) AS n FROM counts__counts WHERE batch_id <= 1"
    assert main(["sql", query, "--batch", "1", "--warehouse", wh.root]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "n" and int(out[1]) > 0


def test_a_last_batch_that_changed_nothing_keeps_the_view(spark, tmp_path):
    """Each task's last batch filters every record out (no changelog rows): the view still
    shows the state of the batches before it (a store's tasks are known from every
    progress row, not only the last)."""
    from lakestate.io import logtable

    wh = Warehouse(tmp_path / "wh")
    records = events(40, seed=33)
    produce(spark, wh, "events", records, partitions=2)
    _run(wh, tmp_path / "s", until_caught_up=True)
    before = _state(spark, wh, "counts__counts")
    assert before
    zeros = [
        {"key": r["key"], "value": {"user": "u0", "amount": 0}, "timestamp": 99_000 + i}
        for i, r in enumerate(records)
    ]
    logtable.append_records(spark, wh, "events", zeros)
    result = _run(wh, tmp_path / "s", max_batches=1)
    assert {t for b in result.batches for t in b} == {"0_0", "0_1"}
    assert _state(spark, wh, "counts__counts") == before


def test_cli_status_shows_every_task_its_batch_and_lag(spark, tmp_path, capsys):
    wh = Warehouse(tmp_path / "wh")
    produce(spark, wh, "events", events(40, seed=34), partitions=2)
    _run(wh, tmp_path / "s", max_batches=1)
    capsys.readouterr()
    args = ["status", "counts", "--warehouse", wh.root, "--state-dir", str(tmp_path / "s")]
    assert main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [line.split("\t") for line in lines if line.startswith("0_")]
    assert sorted(r[0] for r in rows) == ["0_0", "0_1"]
    for _task, batch, topic, _p, committed, end, lag, _t, local in rows:
        assert (batch, topic, committed, local) == ("1", "events", "10", "10")
        assert int(lag) == int(end) - 10 > 0
