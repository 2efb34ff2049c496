"""The S3 requests of delta-rs's single operations on one table (open, update, write, a txn
version's lookup), counted on the tests' S3 server's request log: what each step of a run
costs per call. A table of 13 commits with a checkpoint at version 10 (lakestate's
``delta.checkpointInterval``), as a scheduled app's tables are between checkpoints.

    .venv/bin/python tests/benchmarks/s3_delta_probe.py
"""

from __future__ import annotations

import collections
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import s3_requests

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="lakestate-s3-probe-"))
    log_path = work / "requests.log"
    os.environ[s3_requests.REQUEST_LOG_ENV] = str(log_path)
    sys.path.insert(0, str(ROOT / "tests" / "integration"))
    from s3_server import start_server

    server = start_server(work / "server")
    os.environ.update(server.env())
    server.create_bucket("probe")
    try:
        probe("s3://probe/t", s3_requests.RequestLog(log_path, {}))
    finally:
        server.stop()
    return 0


def probe(uri: str, log: s3_requests.RequestLog) -> None:
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake
    from lakestate.io import delta_commits

    data = pa.table({"x": [1, 2]})
    delta_commits.append(uri, data, "a", {}, {})  # created with lakestate's table properties
    for _ in range(12):
        write_deltalake(uri, data, mode="append")
    log.take()
    held: dict[str, Any] = {}

    def step(name: str, fn: Callable[[], Any]) -> None:
        fn()
        time.sleep(0.05)  # the server writes its line after answering
        counts = collections.Counter(s3_requests.kind(m, t) for _, _, m, t, _ in log.take())
        print(f"{name}: {sum(counts.values())} requests ({dict(counts)})")

    step("open (version 12, checkpoint at 10)", lambda: held.setdefault("t", DeltaTable(uri)))
    table = held["t"]
    step("update_incremental, nothing new", table.update_incremental)
    step("write_deltalake(table), an append", lambda: write_deltalake(table, data, mode="append"))
    step("update_incremental after the append", table.update_incremental)
    step("transaction_version('x')", lambda: table.transaction_version("x"))
    step("transaction_version('y')", lambda: table.transaction_version("y"))
    step("transaction_version('x') again", lambda: table.transaction_version("x"))
    step("lakestate's txn_version('x'): one pass", lambda: delta_commits.txn_version(table, "x"))
    step("lakestate's txn_version('y'): kept", lambda: delta_commits.txn_version(table, "y"))
    write_deltalake(table, data, mode="append")
    log.take()
    step("lakestate's txn_version('x') a commit later", lambda: delta_commits.txn_version(table, "x"))  # fmt: skip
    step("metadata(), schema(), file_uris()", lambda: (table.metadata(), table.schema(), table.file_uris()))  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
