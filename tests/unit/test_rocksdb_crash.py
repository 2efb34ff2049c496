"""A RocksDB store killed with SIGKILL mid-commit-loop holds exactly its committed data.

The child commits in a loop; commit k writes the value k to N shared keys, adds N keys of
its own (``c<k>-<i>``) and commits offset k, all in one transaction, then prints k. After
the kill the parent reopens the store: data and offset must agree (KIP-892), with no
partial batch.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from lakestate.state.base import TopicPartition
from lakestate.state.rocksdb import rocksdb_store

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")

N = 50
PARTITION = TopicPartition("input", 0)

CHILD = textwrap.dedent(
    f"""
    import sys
    from lakestate.state.base import TopicPartition
    from lakestate.state.rocksdb import rocksdb_store

    store = rocksdb_store("crash", sys.argv[1])
    partition = TopicPartition({PARTITION.topic!r}, {PARTITION.partition})
    start = (store.committed_offset(partition) or 0) + 1
    print("ready", flush=True)
    for k in range(start, 10**9):
        txn = store.new_transaction()
        value = str(k).encode()
        for i in range({N}):
            txn.put("shared", b"s%03d" % i, value)
            txn.put("own", b"c%d-%d" % (k, i), value)
        txn.set_stream_time(k)
        txn.commit({{partition: k}})
        print(k, flush=True)
    """
)


def _spawn(script: Path, db: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(script), str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _kill(child: subprocess.Popen) -> None:
    os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=10)
    assert child.returncode == -signal.SIGKILL, child.stderr.read()
    child.stdout.close()
    child.stderr.close()


def _check(db: Path, printed: int) -> int:
    """Assert the reopened store is consistent; return its committed offset."""
    store = rocksdb_store("crash", db)
    try:
        offset = store.committed_offset(PARTITION)
        committed = offset or 0
        # Everything the child reported as committed is durable.
        assert committed >= printed
        shared = dict(store.iterate("shared"))
        if committed == 0:
            assert shared == {}
        else:
            assert shared == {b"s%03d" % i: str(committed).encode() for i in range(N)}
        assert store.stream_time() == (offset if offset is not None else None)
        own: dict[int, set[bytes]] = {}
        for key, value in store.iterate("own"):
            k = int(key[1:].split(b"-")[0])
            assert value == str(k).encode()
            own.setdefault(k, set()).add(key)
        # All keys of commit k are present iff offset >= k.
        assert sorted(own) == list(range(1, committed + 1))
        assert all(len(keys) == N for keys in own.values())
        return committed
    finally:
        store.close()


def _run_and_kill(script: Path, db: Path, rng: random.Random, mode: str) -> int:
    child = _spawn(script, db)
    try:
        assert child.stdout.readline().strip() == "ready", child.stderr.read()
        printed = 0
        if mode == "lines":
            for _ in range(rng.randint(1, 20)):
                printed = int(child.stdout.readline())
        else:
            time.sleep(rng.uniform(0.0, 0.3))
    finally:
        _kill(child)
    return printed


def test_sigkill_never_leaves_a_partial_commit(tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    rng = random.Random(892)
    deadline = time.monotonic() + 8
    last = 0
    rounds = 0
    for mode in ["lines", "random", "lines", "random", "lines", "random"]:
        printed = _run_and_kill(script, tmp_path / "db", rng, mode)
        committed = _check(tmp_path / "db", printed)
        assert committed >= last  # never goes backwards across crashes
        last = committed
        rounds += 1
        if time.monotonic() > deadline:
            break
    assert rounds >= 2 and last > 0


def test_sigkill_at_a_random_time_after_start(tmp_path: Path) -> None:
    """Killed at any moment, even while the database is being created or opened."""
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    rng = random.Random(441)
    for round_ in range(4):
        db = tmp_path / f"db{round_}"
        child = _spawn(script, db)
        time.sleep(rng.uniform(0.0, 0.6))
        _kill(child)
        _check(db, 0)
