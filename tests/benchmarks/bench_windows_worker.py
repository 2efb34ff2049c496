"""Windowed final results in process, without Spark: bench_windows.py's input (N records,
10k users, 60 minutes, 2 partitions, 2% late) through the engine's worker function
(``process_task``: decode, process, encode the output and changelog rows; RocksDB store),
both partitions one after another, as an in-process run with one worker.

Run from the repository root (``PYTHONPATH=lib:tests`` picks the lakestate measured)::

    .venv/bin/python tests/benchmarks/bench_windows_worker.py 1000000

Prints wall and CPU seconds, records/s, the rows returned (output plus changelog rows:
equal before and after a change that keeps the semantics), peak RSS and the load average.
"""

from __future__ import annotations

import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_windows as bw  # noqa: E402
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
from lakestate.runtime.task_executor import BatchContext, process_task  # noqa: E402
from lakestate.state.base import isolation_for  # noqa: E402


def partition_table(wl, app, p: int) -> pa.Table:
    idx = np.flatnonzero(wl.partition == p)
    m = len(idx)
    return pa.table(
        {
            "sub": pa.array(np.zeros(m, dtype=np.int32)),
            "task": pa.array(np.full(m, p, dtype=np.int32)),
            "input_index": pa.array(np.zeros(m, dtype=np.int32)),
            "topic": pa.array([app.INPUT_TOPIC] * m, pa.string()),
            "partition": pa.array(np.full(m, p, dtype=np.int32)),
            "offset": pa.array(wl.offset[idx], pa.int64()),
            "timestamp": pa.array(wl.ts[idx], pa.int64()),
            "key": pa.array(wl.keys[wl.key[idx]].tolist(), pa.string()),
            "value": pa.array([f'{{"page":{i % 100}}}' for i in range(m)], pa.string()),
            "headers": pa.nulls(m, pa.string()),
        }
    )


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    wl = bw.make_windows_input(n, 10_000, 60, 42)
    app = bw._load_app_module()
    tables = [partition_table(wl, app, p) for p in range(2)]
    print(f"load before: {os.getloadavg()}", flush=True)
    rows = 0
    tmp = tempfile.mkdtemp(prefix="bench-windows-worker-")
    cpu, wall = time.process_time(), time.perf_counter()
    try:
        for p, table in enumerate(tables):
            task = f"0_{p}"
            ctx = BatchContext(
                bw.APP_PATH,
                app.APP_NAME,
                {task: 1},
                tmp,
                isolation_for(app.app.config),
                {app.OUTPUT_TOPIC: 2},
                {task: {app.INPUT_TOPIC: 0}},
            )
            rows += process_task(table, ctx).num_rows
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    print(
        f"{n:,} records: wall {wall:.1f} s ({n / wall:,.0f} records/s), CPU {cpu:.1f} s "
        f"({n / cpu:,.0f} records per CPU second), rows returned {rows:,}, peak RSS "
        f"{rss:.2f} GB, load after {os.getloadavg()}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
