"""The maintenance lock of a table on a bucket (``ops.table_lease``), against the tests' S3
server: holders in different processes never overlap, a dead holder's lease is overtaken
once it expires, and `compact`/`maintain` from two processes racing a running app on the
bucket lose and double nothing."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from engine_helpers import APPS, events, produce
from lakestate import run_app
from lakestate.io import delta_commits
from lakestate.ops import table_lease
from lakestate.ops.compaction import METADATA_KEY
from lakestate.warehouse import Warehouse
from test_s3_warehouse import _cli

pytestmark = pytest.mark.integration

# One holder process: from the shared start, takes the table's lock ROUNDS times, holding it
# a moment each time, and prints each hold's (start, end).
_HOLDER = """
import json, sys, time
from lakestate.ops.table_lock import table_lock
path, start, rounds = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
time.sleep(max(0.0, start - time.time()))
holds = []
for _ in range(rounds):
    with table_lock(path):
        began = time.time()
        time.sleep(0.2)
        holds.append((began, time.time()))
print(json.dumps(holds))
"""


def test_holders_in_two_processes_never_overlap(s3_warehouse):
    path = s3_warehouse.resolve("apps/app/changelog/store")
    start = time.time() + 4.0
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _HOLDER, path, str(start), "5"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    holds = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
        holds += [tuple(h) for h in json.loads(out)]
    holds.sort()
    assert len(holds) == 10
    for (_, end), (began, _) in zip(holds, holds[1:], strict=False):
        assert end <= began, holds


def test_an_expired_lease_is_overtaken_and_its_release_writes_nothing(s3_warehouse):
    path = s3_warehouse.resolve("leased")
    dead = table_lease.take(path, lease_seconds=1.0)
    with pytest.raises(table_lease.LeaseTimeout, match="held by"):
        table_lease.take(path, wait_seconds=0.0)
    time.sleep(1.2)
    alive = table_lease.take(path, wait_seconds=5.0)
    assert alive.seq == dead.seq + 1
    assert table_lease.give_back(dead) is False  # no longer its: nothing written
    lease = delta_commits.open_table(table_lease.lease_table(path))
    assert lease.transaction_version(table_lease.LEASE_TXN) == alive.seq
    assert table_lease.give_back(alive) is True
    again = table_lease.take(path, wait_seconds=0.0)  # released: free at once
    assert again.seq == alive.seq + 2


def _maintain_loop(wh: Warehouse, until: str) -> subprocess.Popen:
    """A process running `compact` and `maintain` of the counts app from its first batch
    until file ``until`` exists (the run finished), then once more."""
    code = f"""
import os, sys, time
from lakestate.cli import main
while main(["--quiet", "compact", "counts", "--warehouse", {wh.root!r}]) != 0:
    assert not os.path.exists({until!r})  # the app exists once its first batch committed
    time.sleep(0.5)
while True:
    last = os.path.exists({until!r})
    for command in ("compact", "maintain"):
        assert main(["--quiet", command, "counts", "--warehouse", {wh.root!r}]) == 0
    if last:
        break
"""
    return subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_compaction_and_maintenance_racing_a_running_app_lose_and_double_nothing(
    s3_warehouse, tmp_path, capsys
):
    records = events(160, seed=5)
    reference = Warehouse(tmp_path / "reference")
    produce(None, reference, "events", records, partitions=2)
    run_app(
        str(APPS / "counts.py"),
        warehouse=reference.root,
        state_dir=str(tmp_path / "ref"),
        max_records=20,
        until_caught_up=True,
        say=lambda _: None,
    )
    wh = s3_warehouse
    produce(None, wh, "events", records, partitions=2)
    done = tmp_path / "run-done"
    run = [sys.executable, "-m", "lakestate.cli", "--quiet", "run", str(APPS / "counts.py")]
    run += ["--transport", "inprocess", "--max-records", "20", "--until-caught-up"]
    run += ["--state-dir", str(tmp_path / "state"), "--warehouse", wh.root]
    app = subprocess.Popen(run, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    maintainers = [_maintain_loop(wh, str(done)) for _ in range(2)]
    out, err = app.communicate(timeout=900)
    done.write_text("")
    assert app.returncode == 0, err[-3000:]
    for proc in maintainers:
        m_out, m_err = proc.communicate(timeout=900)
        assert proc.returncode == 0, m_err[-3000:]
    for topic in ("counts-out", "sums-out"):
        expected = _cli(capsys, reference, "consume", topic, "--from-beginning")
        assert _cli(capsys, wh, "consume", topic, "--from-beginning") == expected and expected
    for store in ("counts", "sums"):
        query = f"SELECT key, value FROM counts__{store} ORDER BY key"
        expected = _cli(capsys, reference, "sql", query)
        assert _cli(capsys, wh, "sql", query) == expected and len(expected) > 3
        rows = delta_commits.open_table(wh.changelog_path("counts", store)).to_pyarrow_table()
        keys = (
            pa.table({c: rows.column(c) for c in ("task", "raw_key", "batch_id")})
            .group_by(["task", "raw_key", "batch_id"])
            .aggregate([("batch_id", "count")])
        )
        assert pc.max(keys.column("batch_id_count")).as_py() == 1  # no row twice
        history = delta_commits.open_table(wh.changelog_path("counts", store)).history()
        rewrites = [
            c
            for c in history
            if c.get("operation") == "OPTIMIZE" or METADATA_KEY in (c.get("userMetadata") or "")
        ]
        assert rewrites, "no compaction or OPTIMIZE committed during the run"
        print(store, f"{len(rewrites)} rewrites of {len(history)} commits")


def test_a_live_holder_renews_its_lease_past_the_lease_time(s3_warehouse):
    path = s3_warehouse.resolve("renewed")
    with table_lease.held(path, lease_seconds=1.5) as first:
        time.sleep(3.5)  # more than twice the lease: only the renewals keep it
        with pytest.raises(table_lease.LeaseTimeout, match="held by"):
            table_lease.take(path, wait_seconds=0.0)
    lease = delta_commits.open_table(table_lease.lease_table(path))
    # Taken, renewed (every 0.5 s) at least four times, released.
    assert lease.transaction_version(table_lease.LEASE_TXN) >= first.seq + 5
    table_lease.give_back(table_lease.take(path, wait_seconds=0.0))  # released: free at once
