"""Benchmark of windowed aggregation with final results (KIP-328 ``suppress``) against Spark
Structured Streaming's append-mode windowed count with a watermark (issue 14, item 9).

Run from the repository root::

    .venv/bin/python tests/benchmarks/bench_windows.py            # 1M records, full sizes
    .venv/bin/python tests/benchmarks/bench_windows.py --quick    # small sizes: a check

Both sides run on ``local[2]`` as fresh processes with the same Spark confs
(``lakestate.runtime.spark_session``'s; ``spark.sql.shuffle.partitions`` = 2, ``spark.driver.memory``
= 3g, the RocksDB state store provider for SSS), as ``bench_scheduled.py`` runs them; its
helpers are reused (the instrumented CLI child, phases, tables, the engine snapshot).

The app (``apps/windows_bench.py``): clicks -> group_by_key() -> windowed_by(1-minute
tumbling windows, 30 s grace) -> count -> suppress(until_window_closes(unbounded)) ->
final. The SSS query (``common.windowed_count_query``): the same log table as a Delta stream
-> ``withWatermark(event_time, "30 seconds")`` -> ``groupBy(window(event_time, "1 minute"),
user).count()`` in append mode -> Delta sink, ``Trigger.AvailableNow``, RocksDB provider.

Input (deterministic, ``--seed``): N records (1M) over U users (10k) in 2 partitions (each
user's records in the partition Kafka's partitioner gives its key), timestamps rising
evenly over M minutes (60) per partition; 10% out of order by up to 20 s (within the
grace: never late), 2% late by 90 s to 5 minutes (their window closed 0-4 minutes before
they arrive: late on both sides). Written to the log table in ``--commits`` Delta commits
(slices of both partitions) with delta-rs.

1. **Throughput**: records/s of each side's fresh process (wall time, JVM start included),
   the ratio lakestate / SSS (target >= 1.0); late records dropped by each (lakestate: the
   ``late-record-drop-total`` metric of its progress rows; SSS: ``numRowsDroppedByWatermark``
   of its progress, which counts rows after partial aggregation, and the input records
   that no emitted or open window holds); the final counts per window compared (windows
   agreeing, differing, emitted by one side only), and each side checked against a
   reference of its own semantics computed with numpy. lakestate closes windows per record
   by its partition's stream time; SSS moves its watermark between micro-batches only: in
   one micro-batch (AvailableNow, no rate limit: SSS's measured run) it sees every record
   before its watermark moves and drops none. A second SSS run in ``--sss-batches``
   micro-batches (``maxFilesPerTrigger``) shows its watermark dropping late records: those
   whose window ended by the watermark of the micro-batch before theirs (Spark >= 3.4
   filters late rows by the previous micro-batch's watermark).
2. **Memory**: peak RSS of the process tree (the CLI's Python, the JVM, the Python workers;
   RSS of forked workers counts shared pages in each, so the sum is an upper bound) of a
   lakestate run ending with ``--open-windows`` (1M) windows open and buffered: as many
   distinct keys within one minute (stream time never reaches a window's end + grace), with
   ``BufferConfig.max_records(--spill-max-records).spill_to_disk_when_full()`` against
   ``BufferConfig.unbounded()`` (in-memory mirror of the buffer in each worker).
3. **Where the time goes**: the lakestate runs under ``bench_scheduled``'s timing hooks
   (phases of the main thread), SSS's own progress durations; and a cProfile of the app
   through ``TopologyTestDriver`` (``--profile-records``, 100k, one partition) and through
   the engine's worker function (``process_task``, RocksDB, no Spark), each also unprofiled.

Results go to ``tests/benchmarks/results/windows.json``, with the load average before and
after every measured process. The engine measured is lib/ as committed at HEAD (``--engine
head``), with ``--engine-patch DIFF`` applied to that snapshot (what a change to lib/ would
give, measured before it is made), or the checkout as it
is (``--engine tree``). Everything lives in a temporary directory that is removed at the end
(``--keep`` keeps it). Not a test: pytest collects ``test_*.py`` only.
"""

from __future__ import annotations

import argparse
import cProfile
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from common import log, sibling  # tests/benchmarks/common.py (first on sys.path)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DEFAULT_JSON = HERE / "results" / "windows.json"
APP_PATH = str(HERE / "apps" / "windows_bench.py")
PARTITIONS = 2
SHUFFLE_PARTITIONS = "2"
MINUTE_MS = 60_000
GRACE_MS = 30_000  # the app's grace; SSS's watermark delay
SSS_DELAY = "30 seconds"
T0_MS = 1_700_000_040_000  # a minute boundary
OOO_FRAC, OOO_MAX_MS = 0.10, 20_000
LATE_FRAC, LATE_MIN_MS, LATE_MAX_MS = 0.02, 90_000, 300_000
TARGET_RATIO = 1.0
SPAWNED_AT_ENV = "BENCH_SPAWNED_AT"


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def bs() -> Any:
    return sibling("bench_scheduled")


# -- input ------------------------------------------------------------------------------------


@dataclass
class Workload:
    """Records in partition order, each partition in offset order."""

    partition: Any  # np.int32
    offset: Any  # np.int64
    key: Any  # np.int64: index into keys
    ts: Any  # np.int64, epoch ms
    kind: Any  # np.int8: 0 in order, 1 out of order (within grace), 2 late
    keys: Any  # np object array: the key's JSON text
    names: Any  # np object array: the key itself (the user)

    @property
    def n(self) -> int:
        return len(self.ts)

    def summary(self) -> dict[str, Any]:
        import numpy as np

        return {
            "records": self.n,
            "keys": len(self.keys),
            "per_partition": [int((self.partition == p).sum()) for p in range(PARTITIONS)],
            "out_of_order": int((self.kind == 1).sum()),
            "late_by_construction": int((self.kind == 2).sum()),
            "span_minutes": round(float(np.ptp(self.ts)) / MINUTE_MS, 2),
        }


def _keys(prefix: str, n: int) -> tuple[Any, Any, Any]:
    """Names ``<prefix>-<i>``, their JSON texts and partitions (Kafka's partitioner,
    vectorized; spot-checked against ``partition_for``)."""
    import numpy as np
    from lakestate.io.partitioner import partition_for

    names = np.array([f"{prefix}-{i}" for i in range(n)], dtype=object)
    texts = np.array([f'"{x}"' for x in names], dtype=object)
    parts = bs().bench_engine().partitions_of(texts.tolist(), PARTITIONS)
    for i in range(0, n, max(1, n // 300)):
        if partition_for(names[i], PARTITIONS) != parts[i]:
            raise AssertionError(f"murmur2 mismatch for {names[i]}")
    return names, texts, parts


def make_windows_input(records: int, users: int, minutes: int, seed: int) -> Workload:
    import numpy as np

    rng = np.random.default_rng(seed)
    names, texts, of = _keys("user", users)
    span = minutes * MINUTE_MS
    cols: dict[str, list[Any]] = {k: [] for k in ("partition", "offset", "key", "ts", "kind")}
    for p in range(PARTITIONS):
        n = records // PARTITIONS + (1 if p < records % PARTITIONS else 0)
        pool = np.flatnonzero(of == p)
        key = pool[rng.integers(0, len(pool), n)]
        base = T0_MS + (np.arange(n, dtype=np.int64) * span) // max(n, 1)
        kind = np.zeros(n, dtype=np.int8)
        draw = rng.random(n)
        kind[draw < OOO_FRAC] = 1
        # Late only once a late record can still fall after T0 (every window it lands in
        # then has records of its own before).
        late = (draw >= OOO_FRAC) & (draw < OOO_FRAC + LATE_FRAC)
        late &= base >= T0_MS + LATE_MAX_MS + MINUTE_MS
        kind[late] = 2
        ts = base.copy()
        ts[kind == 1] -= rng.integers(1, OOO_MAX_MS + 1, int((kind == 1).sum()))
        ts[kind == 2] -= rng.integers(LATE_MIN_MS, LATE_MAX_MS + 1, int((kind == 2).sum()))
        cols["partition"].append(np.full(n, p, dtype=np.int32))
        cols["offset"].append(np.arange(n, dtype=np.int64))
        cols["key"].append(key.astype(np.int64))
        cols["ts"].append(ts)
        cols["kind"].append(kind)
    c = {k: np.concatenate(v) for k, v in cols.items()}
    return Workload(c["partition"], c["offset"], c["key"], c["ts"], c["kind"], texts, names)


def make_open_windows_input(records: int) -> Workload:
    """``records`` distinct keys, timestamps rising over 59 s of one minute: every record
    opens its own window and stream time never reaches a window's end + grace."""
    import numpy as np

    names, texts, of = _keys("k", records)
    order = np.argsort(of, kind="stable")
    partition = of[order].astype(np.int32)
    offset = np.zeros(records, dtype=np.int64)
    for p in range(PARTITIONS):
        mask = partition == p
        offset[mask] = np.arange(int(mask.sum()), dtype=np.int64)
    ts = T0_MS + (offset * 59_000) // max(int(offset.max()) + 1 if records else 1, 1)
    kind = np.zeros(records, dtype=np.int8)
    return Workload(partition, offset, order.astype(np.int64), ts, kind, texts, names)


def write_topic(spark, wh, topic: str, wl: Workload, commits: int) -> dict[str, Any]:
    """Create ``topic`` and append ``wl`` in ``commits`` Delta commits (delta-rs), each a
    slice of every partition (one file per partition per commit, so that
    ``maxFilesPerTrigger`` sets SSS's micro-batches); returns the slice size."""
    import numpy as np
    import pyarrow as pa
    from deltalake import CommitProperties, write_deltalake
    from lakestate.io import logtable
    from lakestate.io.topic_records import RECORD_SCHEMA

    path = logtable.create_topic(wh, topic, PARTITIONS)
    started = time.monotonic()
    longest = max(int((wl.partition == p).sum()) for p in range(PARTITIONS))
    per_part = -(-longest // max(commits, 1))
    rng = np.random.default_rng(7)
    pages = rng.integers(0, 100, wl.n)
    ends = dict.fromkeys(range(PARTITIONS), 0)
    written = 0
    for c in range(commits):
        lo, hi = c * per_part, (c + 1) * per_part
        sel = np.flatnonzero((wl.offset >= lo) & (wl.offset < hi))
        if not len(sel):
            continue
        table = pa.table(
            {
                "partition": pa.array(wl.partition[sel], pa.int32()),
                "offset": pa.array(wl.offset[sel], pa.int64()),
                "timestamp": pa.array(wl.ts[sel], pa.int64()),
                "key": pa.array(wl.keys[wl.key[sel]].tolist(), pa.string()),
                "value": pa.array([f'{{"page":{x}}}' for x in pages[sel].tolist()], pa.string()),
                "headers": pa.nulls(len(sel), pa.string()),
            },
            schema=RECORD_SCHEMA,
        )
        for p in range(PARTITIONS):
            ends[p] = max(ends[p], int(wl.offset[sel][wl.partition[sel] == p].max(initial=-1)) + 1)
        write_deltalake(
            path,
            table,
            mode="append",
            commit_properties=CommitProperties(
                custom_metadata={"userMetadata": logtable.ends_metadata(ends)}
            ),
        )
        written += len(sel)
    if written != wl.n:
        raise AssertionError(f"wrote {written} of {wl.n} records")
    return {
        "path": path,
        "commits": commits,
        "records_per_partition_per_commit": per_part,
        "write_s": round(time.monotonic() - started, 2),
    }


# -- references: what each side must output, computed with numpy -------------------------------


def window_starts(ts: Any) -> Any:
    return ts - ts % MINUTE_MS


def lakestate_reference(wl: Workload) -> dict[str, Any]:
    """Kafka Streams' semantics per partition (one task each): a record is late (dropped)
    when its window's end + grace <= the partition's stream time (max timestamp so far, the
    record's own included); a window is emitted once its end + grace <= the stream time of
    the suppress node (the max timestamp of the records it received: the partition's max).
    Returns the late flags and the expected final counts (a pandas frame user, start,
    count)."""
    import numpy as np

    start = window_starts(wl.ts)
    late = np.zeros(wl.n, dtype=bool)
    close = np.zeros(wl.n, dtype=np.int64)
    for p in range(PARTITIONS):
        idx = np.flatnonzero(wl.partition == p)
        seen = np.maximum.accumulate(wl.ts[idx])
        late[idx] = start[idx] + MINUTE_MS + GRACE_MS <= seen
        close[idx] = wl.ts[idx].max() - GRACE_MS
    keep = ~late & (start + MINUTE_MS <= close)
    counts = _counts(wl.names[wl.key[keep]], start[keep])
    return {"late": late, "counts": counts, "late_records": int(late.sum())}


def sss_reference(wl: Workload, batch: Any) -> dict[str, Any]:
    """Structured Streaming's semantics, micro-batch ``batch[i]`` holding record i. The
    watermark of micro-batch b (evicting: a window is written once its end <= it) is the
    max event time of the micro-batches before b, over all partitions, minus the delay; late
    rows are filtered by the previous micro-batch's watermark (Spark >= 3.4): a
    row of micro-batch b is dropped when its window's end <= the max event time of the
    micro-batches before b - 1 minus the delay. So in one or two micro-batches nothing is
    dropped. The last micro-batch (without data) writes the windows ending <= the max event
    time minus the delay."""
    import numpy as np

    start = window_starts(wl.ts)
    low = np.iinfo(np.int64).min
    batches = int(batch.max()) + 1 if wl.n else 0
    max_of = np.full(batches, low, dtype=np.int64)
    np.maximum.at(max_of, batch, wl.ts)
    # Index b: max event time of the micro-batches before b - 1.
    before = np.concatenate([[low, low], np.maximum.accumulate(max_of)])[:batches]
    late_mark = np.where(before == low, 0, before - GRACE_MS)
    dropped = start + MINUTE_MS <= late_mark[batch]
    final = int(wl.ts.max()) - GRACE_MS
    keep = ~dropped & (start + MINUTE_MS <= final)
    counts = _counts(wl.names[wl.key[keep]], start[keep])
    return {
        "dropped": dropped,
        "counts": counts,
        "dropped_records": int(dropped.sum()),
        "final_watermark": final,
        "open_records": int((~dropped & (start + MINUTE_MS > final)).sum()),
    }


def _counts(users: Any, starts: Any) -> Any:
    import pandas as pd

    df = pd.DataFrame({"user": users, "start": starts})
    return df.groupby(["user", "start"], sort=False).size().rename("count").reset_index()


# -- reading results ---------------------------------------------------------------------------


def lakestate_final(wh, topic: str) -> Any:
    """The sink's final counts: (user, start, count)."""
    import orjson
    import pandas as pd
    from deltalake import DeltaTable

    table = DeltaTable(wh.topic_path(topic)).to_pyarrow_table(columns=["key", "value"])
    users, starts, counts = [], [], []
    for key, value in zip(
        table.column("key").to_pylist(), table.column("value").to_pylist(), strict=True
    ):
        k = orjson.loads(key)
        users.append(k["key"])
        starts.append(k["window_start"])
        counts.append(orjson.loads(value))
    return pd.DataFrame({"user": users, "start": starts, "count": counts})


def sss_final(path: str) -> Any:
    """The SSS sink's rows: (user, start, count)."""
    import pandas as pd
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    if not Path(path, "_delta_log").is_dir():
        return pd.DataFrame({"user": [], "start": [], "count": []})
    t = DeltaTable(path).to_pyarrow_table(columns=["window", "user", "count"])
    start = pc.struct_field(t.column("window"), "start")
    start_us = pc.cast(start.cast("timestamp[us]"), "int64")
    return pd.DataFrame(
        {
            "user": t.column("user").to_pylist(),
            "start": (start_us.to_numpy() // 1000).astype("int64"),
            "count": t.column("count").to_numpy(),
        }
    )


def lakestate_metrics(wh, app_name: str) -> dict[str, Any]:
    """The app's task metrics of each task's newest progress row (the windowed
    aggregation's totals are kept over batches, so the newest row holds them), summed over
    tasks; and the batches each task ran."""
    from deltalake import DeltaTable
    from lakestate.processors.metrics import flat

    rows = DeltaTable(wh.progress_path(app_name)).to_pyarrow_table().to_pylist()
    newest: dict[str, dict[str, Any]] = {}
    batches: dict[str, int] = {}
    for row in rows:
        t = row["task"]
        batches[t] = batches.get(t, 0) + 1
        if t not in newest or row["batch_id"] > newest[t]["batch_id"]:
            newest[t] = row
    totals: dict[str, float] = {}
    per_task = {}
    for t, row in sorted(newest.items()):
        m = flat(json.loads(row["metrics"] or "{}"))  # the task's totals, summed over nodes
        per_task[t] = m
        for name, value in m.items():
            if isinstance(value, int | float):
                totals[name] = totals.get(name, 0) + value
    return {"totals": totals, "per_task": per_task, "batches_per_task": batches}


def compare(a: Any, b: Any) -> dict[str, int]:
    """Windows of ``a`` and ``b`` (frames user, start, count): in both and agreeing, in
    both and differing, in one only."""
    m = a.merge(b, on=["user", "start"], how="outer", suffixes=("_a", "_b"), indicator=True)
    both = m["_merge"] == "both"
    agree = both & (m["count_a"] == m["count_b"])
    return {
        "agree": int(agree.sum()),
        "differ": int((both & ~agree).sum()),
        "only_first": int((m["_merge"] == "left_only").sum()),
        "only_second": int((m["_merge"] == "right_only").sum()),
    }


def explain(ls_df: Any, ss_df: Any, wl: Workload, late: Any, sss_dropped: Any) -> dict[str, int]:
    """Why lakestate's and SSS's windows differ: of the windows both emit with other
    counts, how many differ by exactly the late records lakestate dropped and SSS counted
    (by their references) in them; of the windows SSS alone emits, how many hold only such
    records (lakestate never opened them), and how many lie in the last minutes (closed by
    SSS's global watermark, not yet by the partition's stream time, or the other way
    round)."""
    late = late & ~sss_dropped
    lw = _counts(wl.names[wl.key[late]], window_starts(wl.ts[late])).rename(
        columns={"count": "late"}
    )
    m = ls_df.merge(ss_df, on=["user", "start"], how="outer", suffixes=("_ls", "_ss"))
    m = m.merge(lw, on=["user", "start"], how="left")
    m["late"] = m["late"].fillna(0).astype("int64")
    both = m["count_ls"].notna() & m["count_ss"].notna()
    differ = both & (m["count_ls"] != m["count_ss"])
    by_late = differ & (m["count_ss"] - m["count_ls"] == m["late"])
    only_ss = m["count_ls"].isna()
    only_ls = m["count_ss"].isna()
    last = int(wl.ts.max()) - GRACE_MS - 3 * MINUTE_MS
    return {
        "differ": int(differ.sum()),
        "differ_by_late_records": int(by_late.sum()),
        "only_sss": int(only_ss.sum()),
        "only_sss_all_late": int((only_ss & (m["count_ss"] == m["late"])).sum()),
        "only_sss_in_last_minutes": int((only_ss & (m["start"] >= last)).sum()),
        "only_lakestate": int(only_ls.sum()),
        "only_lakestate_in_last_minutes": int((only_ls & (m["start"] >= last)).sum()),
    }


# -- fresh processes --------------------------------------------------------------------------


class TreeSampler(threading.Thread):
    """Peak RSS of a process and its descendants, sampled every ``interval`` s: the root
    (the CLI's or the SSS child's Python), the JVM (java) and the Python workers (the
    other Python processes); short-lived helpers (chmod, ...) are left out. Also the CPU
    seconds (user + system) of each part, as last seen per process (the last interval of
    a process is missed)."""

    def __init__(self, pid: int, interval: float = 0.1) -> None:
        super().__init__(name="tree-sampler", daemon=True)
        import psutil

        self.psutil = psutil
        self.root = psutil.Process(pid)
        self.interval = interval
        self.peak: dict[str, int] = {"driver": 0, "jvm": 0, "workers": 0, "total": 0}
        self.at_peak: dict[str, int] = {}
        self.samples = 0
        self._halt = threading.Event()
        self._procs: dict[int, Any] = {}
        self._cpu: dict[int, tuple[str, float]] = {}

    def _note_cpu(self, proc: Any, part: str) -> None:
        try:
            t = proc.cpu_times()
        except self.psutil.Error:
            return
        self._cpu[proc.pid] = (part, t.user + t.system)

    def cpu_seconds(self) -> dict[str, float]:
        out = {"driver": 0.0, "jvm": 0.0, "workers": 0.0}
        for part, seconds in self._cpu.values():
            out[part] += seconds
        out["total"] = sum(out.values())
        return {k: round(v, 2) for k, v in out.items()}

    def sample(self) -> dict[str, int]:
        ps = self.psutil
        parts = {"driver": self.root.memory_info().rss, "jvm": 0, "workers": 0}
        self._note_cpu(self.root, "driver")
        try:
            children = self.root.children(recursive=True)
        except ps.Error:
            children = []
        for child in children:
            proc = self._procs.setdefault(child.pid, child)
            try:
                rss = proc.memory_info().rss
                name = proc.name().lower()
            except ps.Error:
                continue
            if name == "java":
                parts["jvm"] += rss
                self._note_cpu(proc, "jvm")
            elif name.startswith("python"):
                parts["workers"] += rss
                self._note_cpu(proc, "workers")
        parts["total"] = parts["driver"] + parts["jvm"] + parts["workers"]
        return parts

    def run(self) -> None:
        while not self._halt.is_set():
            try:
                s = self.sample()
            except Exception:  # the process ended or a child vanished mid-sample
                s = None
            if s is not None:
                self.samples += 1
                for k, v in s.items():
                    self.peak[k] = max(self.peak[k], v)
                if s["total"] >= self.at_peak.get("total", 0):
                    self.at_peak = s
            self._halt.wait(self.interval)

    def stop(self) -> dict[str, Any]:
        self._halt.set()
        self.join(timeout=2)
        return {
            "peak": self.peak,
            "at_peak_total": self.at_peak,
            "samples": self.samples,
            "cpu_s": self.cpu_seconds(),
        }


class Commands:
    """Runs the fresh processes of both sides, timed from outside, their process tree's
    memory sampled; keeps their output in ``logs``."""

    def __init__(self, work: Path, master: str) -> None:
        self.master = master
        self.logs = work / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.count = 0

    def _run(self, cmd: list[str], name: str) -> dict[str, Any]:
        self.count += 1
        out_file = self.logs / f"{self.count:03d}-{name}.log"
        before = loadavg()
        env = dict(os.environ)
        started = time.monotonic()
        env[SPAWNED_AT_ENV] = repr(started)
        with open(out_file, "w") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
            sampler = TreeSampler(proc.pid)
            sampler.start()
            rc = proc.wait()
        ended = time.monotonic()
        memory = sampler.stop()
        text = out_file.read_text(errors="replace")
        if rc != 0:
            tail = "\n".join(text.splitlines()[-25:])
            raise RuntimeError(f"{name} exited with {rc}:\n{tail}")
        return {
            "wall_s": round(ended - started, 3),
            "spawned_at": started,
            "ended_at": ended,
            "load_before": before,
            "load_after": loadavg(),
            "memory": memory,
            "log": str(out_file),
            "output": text,
        }

    def lakestate(self, wh_root: str, app_path: str, state_dir: str, name: str) -> dict[str, Any]:
        """``lakestate run APP --until-caught-up`` in a fresh process, under
        ``bench_scheduled``'s timing hooks (its ``_lakestate`` child)."""
        sch = bs()
        events = self.logs / f"events-{self.count + 1:03d}.json"
        cmd = [
            sys.executable,
            sch.__file__,
            "_lakestate",
            "--events",
            str(events),
            "--",
            "--warehouse",
            wh_root,
            "--master",
            self.master,
            "run",
            app_path,
            "--until-caught-up",
            "--state-dir",
            state_dir,
        ]
        run = self._run(cmd, name)
        text = run.pop("output")
        found = sch.RUN_LINE.search(text)
        run["batches"] = int(found.group(1)) if found else None
        run["records"] = int(found.group(2)) if found else None
        run["batch_s"] = [
            float(m.group(4))
            for m in (sch.BATCH_LINE.search(line) for line in text.splitlines())
            if m
        ]
        run["phases"] = sch.lakestate_phases(json.loads(events.read_text()), run)
        return run

    def sss(
        self, topic: str, out: str, checkpoint: str, files_per_trigger: int | None, name: str
    ) -> dict[str, Any]:
        """The SSS query from an empty checkpoint in a fresh process (``_sss`` below)."""
        report = self.logs / f"sss-{self.count + 1:03d}.json"
        cmd = [
            sys.executable,
            __file__,
            "_sss",
            "--topic",
            topic,
            "--out",
            out,
            "--checkpoint",
            checkpoint,
            "--master",
            self.master,
            "--report",
            str(report),
        ]
        if files_per_trigger:
            cmd += ["--files-per-trigger", str(files_per_trigger)]
        run = self._run(cmd, name)
        run.pop("output")
        data = json.loads(report.read_text())
        progress = data["progress"]
        run["records"] = sum(p.get("numInputRows", 0) for p in progress)
        run["micro_batches"] = [summary_of_progress(p) for p in progress]
        run["dropped_by_watermark"] = sum(
            b["dropped_by_watermark"] or 0 for b in run["micro_batches"]
        )
        marks = [b["watermark"] for b in run["micro_batches"] if b["watermark"]]
        run["final_watermark"] = marks[-1] if marks else None
        run["provider"] = data["provider"]
        run["phases"] = bs().sss_phases(data, run)
        return run


def summary_of_progress(p: dict[str, Any]) -> dict[str, Any]:
    op = (p.get("stateOperators") or [{}])[0]
    mark = (p.get("eventTime") or {}).get("watermark")
    return {
        "batch": p.get("batchId"),
        "input_rows": p.get("numInputRows", 0),
        "duration_ms": p.get("durationMs") or {},
        "watermark": mark,
        "watermark_ms": _iso_ms(mark),
        "dropped_by_watermark": op.get("numRowsDroppedByWatermark"),
        "state_rows_total": op.get("numRowsTotal"),
        "state_rows_updated": op.get("numRowsUpdated"),
        "state_rows_removed": op.get("numRowsRemoved"),
        "state_memory_bytes": op.get("memoryUsedBytes"),
        "sink_rows": (p.get("sink") or {}).get("numOutputRows"),
    }


def _iso_ms(text: str | None) -> int | None:
    if not text:
        return None
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def child_sss(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="bench_windows.py _sss")
    p.add_argument("--topic", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--master", default="local[2]")
    p.add_argument("--files-per-trigger", type=int)
    p.add_argument("--report", required=True)
    args = p.parse_args(argv)
    stamps = {"started": time.monotonic()}
    import common
    from lakestate.runtime.spark_session import get_spark, stop_spark

    stamps["imported"] = time.monotonic()
    spark = get_spark(args.master, app_name="sss-windowed-count")
    stamps["spark_started"] = time.monotonic()
    provider = spark.conf.get("spark.sql.streaming.stateStore.providerClass")
    query = common.windowed_count_query(
        spark, args.topic, args.out, args.checkpoint, args.files_per_trigger, delay=SSS_DELAY
    )
    stamps["query_started"] = time.monotonic()
    progress = common.await_query(query)
    stamps["query_done"] = time.monotonic()
    stop_spark()
    stamps["spark_stopped"] = time.monotonic()
    Path(args.report).write_text(
        json.dumps({"stamps": stamps, "provider": provider, "progress": progress}, default=str)
    )
    return 0


# -- profiles: the per-record cost ---------------------------------------------------------------


def _load_app_module() -> Any:
    name = "windows_bench_app"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, APP_PATH)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _per_record(rows: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    for row in rows:
        row["tottime_us_per_record"] = round(row["tottime_s"] / n * 1e6, 2)
        row["cumtime_us_per_record"] = round(row["cumtime_s"] / n * 1e6, 2)
    return rows


def profile_driver(wl: Workload, n: int) -> dict[str, Any]:
    """The app through ``TopologyTestDriver`` (in-memory stores) on partition 0's first
    ``n`` records, piped as one list: unprofiled, under cProfile, and the same records
    through a pass-through topology (stream -> to: the driver's own cost)."""
    import lakestate as ls
    import numpy as np
    from lakestate.testing import TestRecord, TopologyTestDriver

    app_mod = _load_app_module()
    idx = np.flatnonzero(wl.partition == 0)[:n]
    names = wl.names[wl.key[idx]].tolist()
    stamps = wl.ts[idx].tolist()
    values = [{"page": i % 100} for i in range(len(idx))]
    n = len(idx)

    def run(topology: Any, profile: cProfile.Profile | None = None) -> tuple[float, int, dict]:
        with TopologyTestDriver(topology, {"application.id": app_mod.APP_NAME}) as d:
            topic = d.create_input_topic(app_mod.INPUT_TOPIC)
            records = [TestRecord(k, v, t) for k, v, t in zip(names, values, stamps, strict=True)]
            if profile is not None:
                profile.enable()
            started = time.perf_counter()
            topic.pipe_record_list(records)
            seconds = time.perf_counter() - started
            if profile is not None:
                profile.disable()
            out = d.create_output_topic(app_mod.OUTPUT_TOPIC).read_records_to_list()
            return seconds, len(out), d.metrics()

    log(f"profile: {n:,} records through TopologyTestDriver")
    seconds, outputs, metrics = run(app_mod.app.topology)
    builder = ls.StreamsBuilder()
    builder.stream(app_mod.INPUT_TOPIC).to(app_mod.OUTPUT_TOPIC)
    pass_s, _, _ = run(builder.build())
    profile = cProfile.Profile()
    prof_s, _, _ = run(app_mod.app.topology, profile)
    import pstats

    return {
        "records": n,
        "seconds": round(seconds, 3),
        "records_per_s": round(n / seconds),
        "us_per_record": round(seconds / n * 1e6, 2),
        "outputs": outputs,
        "late_record_drop_total": metrics.get("late-record-drop-total", 0),
        "passthrough_us_per_record": round(pass_s / n * 1e6, 2),
        "profiled_seconds": round(prof_s, 3),
        "calls_per_record": round(pstats.Stats(profile).total_calls / n, 1),
        "top_tottime": _per_record(bs().bench_engine().top_stats(profile, "tottime", 22, False), n),
        "top_cumulative_lakestate": _per_record(
            bs().bench_engine().top_stats(profile, "cumulative", 22, True), n
        ),
    }


def profile_worker(wl: Workload, n: int, tmp: Path) -> dict[str, Any]:
    """The engine's worker function (``process_task``: decode, process, encode the output
    and changelog rows; RocksDB store) on the same records, without Spark; unprofiled and
    under cProfile."""
    import numpy as np
    import pyarrow as pa
    from lakestate.runtime.task_executor import BatchContext, process_task
    from lakestate.state.base import isolation_for

    app_mod = _load_app_module()
    idx = np.flatnonzero(wl.partition == 0)[:n]
    n = len(idx)
    table = pa.table(
        {
            "sub": pa.array(np.zeros(n, dtype=np.int32)),
            "task": pa.array(np.zeros(n, dtype=np.int32)),
            "input_index": pa.array(np.zeros(n, dtype=np.int32)),
            "topic": pa.array([app_mod.INPUT_TOPIC] * n, pa.string()),
            "partition": pa.array(np.zeros(n, dtype=np.int32)),
            "offset": pa.array(wl.offset[idx], pa.int64()),
            "timestamp": pa.array(wl.ts[idx], pa.int64()),
            "key": pa.array(wl.keys[wl.key[idx]].tolist(), pa.string()),
            "value": pa.array([f'{{"page":{i % 100}}}' for i in range(n)], pa.string()),
            "headers": pa.nulls(n, pa.string()),
        }
    )

    def run(records: Any, profile: cProfile.Profile | None = None) -> tuple[float, int]:
        state_dir = tempfile.mkdtemp(prefix="worker-", dir=tmp)
        try:
            ctx = BatchContext(
                APP_PATH,
                app_mod.APP_NAME,
                {"0_0": 1},
                state_dir,
                isolation_for(app_mod.app.config),
                {app_mod.OUTPUT_TOPIC: PARTITIONS},
                {"0_0": {app_mod.INPUT_TOPIC: 0}},
            )
            started = time.perf_counter()
            out = (
                process_task(records, ctx)
                if profile is None
                else profile.runcall(process_task, records, ctx)
            )
            return time.perf_counter() - started, out.num_rows
        finally:
            shutil.rmtree(state_dir, ignore_errors=True)

    log(f"profile: {n:,} records through process_task (RocksDB, no Spark)")
    run(table.slice(0, 1000))  # warm: the app module, imports
    # The cost per record against the records in the batch (one transaction): flat if the
    # work per record does not grow with what the batch wrote before it.
    scaling = []
    for size in (n // 4, n // 2):
        if size >= 1000:
            secs, _ = run(table.slice(0, size))
            scaling.append({"records": size, "us_per_record": round(secs / size * 1e6, 2)})
    seconds, rows = run(table)
    scaling.append({"records": n, "us_per_record": round(seconds / n * 1e6, 2)})
    log(f"profile: process_task us/record by batch size: {scaling}")
    profile = cProfile.Profile()
    prof_s, _ = run(table, profile)
    be = bs().bench_engine()
    return {
        "records": n,
        "seconds": round(seconds, 3),
        "records_per_s": round(n / seconds),
        "us_per_record": round(seconds / n * 1e6, 2),
        "us_per_record_by_batch_records": scaling,
        "rows_returned": rows,
        "profiled_seconds": round(prof_s, 3),
        "top_tottime": _per_record(be.top_stats(profile, "tottime", 22, False), n),
        "top_cumulative_lakestate": _per_record(be.top_stats(profile, "cumulative", 22, True), n),
    }


# -- the cases ---------------------------------------------------------------------------------


SPILL_APP = '''"""Generated by bench_windows.py: the windows app, buffer spilled to disk."""
import importlib.util

import lakestate as ls

_spec = importlib.util.spec_from_file_location("windows_bench_app", {path!r})
_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)
app = _module.make_app(ls.BufferConfig.max_records({n}).spill_to_disk_when_full())
'''


class Bench:
    def __init__(self, args: argparse.Namespace, work: Path, results: dict[str, Any]) -> None:
        self.args = args
        self.work = work
        self.results = results
        self.commands = Commands(work, args.master)
        self.app = _load_app_module()

    def setup(self) -> None:
        """Generate and write the inputs (this process's Spark creates the topics, then
        stops: nothing of it runs while the sides are measured)."""
        from lakestate.runtime.spark_session import get_spark, stop_spark
        from lakestate.warehouse import Warehouse

        a = self.args
        log(f"input: {a.records:,} records, {a.users:,} users, {a.minutes} minutes")
        self.wl = make_windows_input(a.records, a.users, a.minutes, a.seed)
        self.results["input"] = self.wl.summary()
        self.wh = Warehouse(self.work / "main" / "wh")
        self.open_wl = make_open_windows_input(a.open_windows) if a.open_windows else None
        log("starting this process's Spark to create the topics")
        spark = get_spark(a.master, app_name="bench-windows-setup")
        try:
            self.results["input"]["topic"] = write_topic(
                spark, self.wh, self.app.INPUT_TOPIC, self.wl, a.commits
            )
            log(f"input written: {self.results['input']['topic']}")
            self.open_whs = {}
            if self.open_wl is not None:
                for mode in ("unbounded", "spill"):
                    wh = Warehouse(self.work / f"open-{mode}" / "wh")
                    info = write_topic(spark, wh, self.app.INPUT_TOPIC, self.open_wl, 1)
                    self.open_whs[mode] = wh
                    log(f"open-windows input ({mode}): {self.open_wl.n:,} records, {info}")
        finally:
            stop_spark()

    def throughput(self) -> dict[str, Any]:
        import numpy as np

        a = self.args
        res: dict[str, Any] = {"load_start": loadavg()}
        topic = self.results["input"]["topic"]
        ls_run = self.commands.lakestate(
            self.wh.root, APP_PATH, str(self.work / "main" / "state"), "lakestate"
        )
        log(f"lakestate: {ls_run['records']:,} records in {ls_run['wall_s']:.1f}s")
        sss_run = self.commands.sss(
            topic["path"],
            str(self.work / "main" / "sss1" / "out"),
            str(self.work / "main" / "sss1" / "checkpoint"),
            None,
            "sss",
        )
        log(f"SSS: {sss_run['records']:,} records in {sss_run['wall_s']:.1f}s")
        res["lakestate"], res["sss"] = ls_run, sss_run
        res["load_end"] = loadavg()
        ls_rate = ls_run["records"] / ls_run["wall_s"] if ls_run["records"] else None
        ss_rate = sss_run["records"] / sss_run["wall_s"] if sss_run["records"] else None
        res["records_per_s"] = {
            "lakestate": ls_rate and round(ls_rate),
            "sss": ss_rate and round(ss_rate),
        }
        res["ratio"] = bs().ratio(ls_rate, ss_rate)
        # Results, checked against each side's reference.
        wl = self.wl
        ref_ls = lakestate_reference(wl)
        metrics = lakestate_metrics(self.wh, self.app.APP_NAME)
        ls_df = lakestate_final(self.wh, self.app.OUTPUT_TOPIC)
        ss_df = sss_final(str(self.work / "main" / "sss1" / "out"))
        one = sss_reference(wl, np.zeros(wl.n, dtype=np.int64))
        ls_vs_ref = compare(ls_df, ref_ls["counts"])
        ss_vs_ref = compare(ss_df, one["counts"])
        res["lakestate_results"] = {
            "windows": len(ls_df),
            "counted": int(ls_df["count"].sum()),
            "late_record_drop_total": metrics["totals"].get("late-record-drop-total"),
            "dropped_records": metrics["totals"].get("dropped-records"),
            "batches_per_task": metrics["batches_per_task"],
            "metrics": metrics["totals"],
            "reference_late_records": ref_ls["late_records"],
            "vs_reference": ls_vs_ref,
            "matches_reference": not any(
                ls_vs_ref[k] for k in ("differ", "only_first", "only_second")
            )
            and metrics["totals"].get("late-record-drop-total") == ref_ls["late_records"],
        }
        res["sss_results"] = self.sss_results(sss_run, ss_df, one)
        res["sss_results"]["vs_reference"] = ss_vs_ref
        res["agreement"] = compare(ls_df, ss_df)
        res["explained"] = explain(ls_df, ss_df, wl, ref_ls["late"], one["dropped"])
        # SSS in several micro-batches: its watermark now drops late rows.
        if a.sss_batches and a.sss_batches > 1:
            files = max(1, a.commits * PARTITIONS // a.sss_batches)
            per_batch_commits = files // PARTITIONS
            per_part = topic["records_per_partition_per_commit"]
            batch = wl.offset // per_part // max(per_batch_commits, 1)
            many = sss_reference(wl, batch)
            run = self.commands.sss(
                topic["path"],
                str(self.work / "main" / "sssn" / "out"),
                str(self.work / "main" / "sssn" / "checkpoint"),
                files,
                "sss-batches",
            )
            log(
                f"SSS in micro-batches of {files} files: {run['records']:,} records in "
                f"{run['wall_s']:.1f}s, {len(run['micro_batches'])} micro-batches"
            )
            df = sss_final(str(self.work / "main" / "sssn" / "out"))
            out = {"run": run, "files_per_trigger": files}
            out["results"] = self.sss_results(run, df, many)
            out["results"]["vs_reference"] = compare(df, many["counts"])
            out["agreement"] = compare(ls_df, df)
            out["explained"] = explain(ls_df, df, wl, ref_ls["late"], many["dropped"])
            out["records_per_s"] = round(run["records"] / run["wall_s"])
            res["sss_batches"] = out
        res["load_end"] = loadavg()
        return res

    def sss_results(self, run: dict[str, Any], df: Any, ref: dict[str, Any]) -> dict[str, Any]:
        """What SSS emitted and dropped: the rows its watermark dropped (its metric: rows
        after partial aggregation) and the input records no emitted window counts that no
        open window (end after the final watermark) holds (its dropped records)."""
        wl = self.wl
        final = run.get("final_watermark")
        final_ms = _iso_ms(final)
        open_records = (
            int((window_starts(wl.ts) + MINUTE_MS > final_ms).sum()) if final_ms else None
        )
        counted = int(df["count"].sum()) if len(df) else 0
        dropped = wl.n - counted - open_records if open_records is not None else None
        return {
            "windows": len(df),
            "counted": counted,
            "final_watermark": final,
            "final_watermark_ms": final_ms,
            "reference_final_watermark_ms": ref["final_watermark"],
            "records_in_open_windows": open_records,
            "dropped_records": dropped,
            "reference_dropped_records": ref["dropped_records"],
            "num_rows_dropped_by_watermark": run["dropped_by_watermark"],
        }

    def memory(self) -> dict[str, Any]:
        a = self.args
        res: dict[str, Any] = {"load_start": loadavg(), "open_windows": self.open_wl.n}
        spill_app = self.work / "windows_bench_spill.py"
        spill_app.write_text(SPILL_APP.format(path=APP_PATH, n=a.spill_max_records))
        apps = {"unbounded": APP_PATH, "spill": str(spill_app)}
        res["configs"] = {
            "unbounded": "BufferConfig.unbounded()",
            "spill": f"BufferConfig.max_records({a.spill_max_records}).spill_to_disk_when_full()",
        }
        for mode in ("spill", "unbounded"):
            wh = self.open_whs[mode]
            run = self.commands.lakestate(
                wh.root, apps[mode], str(self.work / f"open-{mode}" / "state"), f"open-{mode}"
            )
            metrics = lakestate_metrics(wh, self.app.APP_NAME)
            from deltalake import DeltaTable

            run["sink_rows"] = (
                DeltaTable(wh.topic_path(self.app.OUTPUT_TOPIC)).to_pyarrow_dataset().count_rows()
            )
            run["buffered"] = metrics["totals"].get("suppression-buffer-count-current")
            run["buffer_bytes"] = metrics["totals"].get("suppression-buffer-size-current")
            run["batches_per_task"] = metrics["batches_per_task"]
            res[mode] = run
            peak = run["memory"]["peak"]
            log(
                f"open windows, {mode}: {run['records']:,} records in {run['wall_s']:.1f}s, "
                f"{run['buffered']} buffered, peak RSS {peak['total'] / 2**30:.2f} GiB "
                f"(workers {peak['workers'] / 2**30:.2f})"
            )
        res["ratio_spill_to_unbounded"] = bs().ratio(
            res["spill"]["memory"]["peak"]["total"], res["unbounded"]["memory"]["peak"]["total"]
        )
        res["ratio_workers"] = bs().ratio(
            res["spill"]["memory"]["peak"]["workers"],
            res["unbounded"]["memory"]["peak"]["workers"],
        )
        res["load_end"] = loadavg()
        return res

    def profiles(self) -> dict[str, Any]:
        a = self.args
        res: dict[str, Any] = {"load_start": loadavg()}
        res["driver"] = profile_driver(self.wl, a.profile_records)
        res["worker"] = profile_worker(self.wl, a.profile_records, self.work)
        res["load_end"] = loadavg()
        return res


# -- report ------------------------------------------------------------------------------------


def gib(n: int | None) -> str:
    return "-" if not n else f"{n / 2**30:.2f} GiB"


def load_text(r: dict[str, Any]) -> str:
    a, b = r.get("load_start"), r.get("load_end")
    if not a or not b:
        return ""
    return f"load average {a[0]:.1f}/{a[1]:.1f}/{a[2]:.1f} -> {b[0]:.1f}/{b[1]:.1f}/{b[2]:.1f}"


def report_throughput(r: dict[str, Any]) -> None:
    sch = bs()
    ls, ss = r["lakestate"], r["sss"]
    lr, sr = r["lakestate_results"], r["sss_results"]
    rate = r["records_per_s"]
    q = r["ratio"]
    rows = [
        ("records", f"{ls['records']:,}", f"{ss['records']:,}", None, "", ""),
        (
            "wall s (fresh process)",
            f"{ls['wall_s']:.1f} (load {ls['load_before'][0]:.1f})",
            f"{ss['wall_s']:.1f} (load {ss['load_before'][0]:.1f})",
            None,
            "",
            "",
        ),
        (
            "records/s",
            f"{rate['lakestate']:,}",
            f"{rate['sss']:,}",
            q,
            f">= {TARGET_RATIO}",
            sch.verdict(None if q is None else q >= TARGET_RATIO),
        ),
        (
            "late records dropped",
            f"{lr['late_record_drop_total']:,}",
            f"{sr['dropped_records']:,}",
            None,
            "",
            "",
        ),
        (
            "  SSS numRowsDroppedByWatermark (rows after partial aggregation)",
            "",
            f"{sr['num_rows_dropped_by_watermark']:,}",
            None,
            "",
            "",
        ),
        ("windows emitted", f"{lr['windows']:,}", f"{sr['windows']:,}", None, "", ""),
        ("records counted in them", f"{lr['counted']:,}", f"{sr['counted']:,}", None, "", ""),
        (
            "each side = its reference (numpy)",
            str(lr["matches_reference"]),
            str(_matches(sr)),
            None,
            "",
            "",
        ),
        (
            "peak RSS, process tree",
            gib(ls["memory"]["peak"]["total"]),
            gib(ss["memory"]["peak"]["total"]),
            None,
            "",
            "",
        ),
        (
            "CPU s: driver + JVM + Python workers",
            _cpu_text(ls["memory"]),
            _cpu_text(ss["memory"]),
            None,
            "",
            "",
        ),
    ]
    sch.print_table(
        f"1. {ls['records']:,} records, 1-minute windows, 30 s grace, final results: lakestate "
        f"vs SSS (baseline: one micro-batch, AvailableNow), fresh processes; {load_text(r)}",
        rows,
    )
    agree = r["agreement"]
    ex = r["explained"]
    print(
        f"  final counts per window: {agree['agree']:,} agree, {agree['differ']:,} differ, "
        f"{agree['only_first']:,} lakestate only, {agree['only_second']:,} SSS only"
    )
    print(
        f"  why: {ex['differ_by_late_records']:,} of the {ex['differ']:,} differing windows "
        f"differ by exactly the late records lakestate dropped (and SSS counted) in them; "
        f"{ex['only_sss_all_late']:,} of the {ex['only_sss']:,} SSS-only windows hold late "
        f"records only (lakestate never opened them), {ex['only_sss_in_last_minutes']:,} are "
        f"in the last minutes; {ex['only_lakestate_in_last_minutes']:,} of the "
        f"{ex['only_lakestate']:,} lakestate-only windows are in the last minutes (the "
        "partition's stream time against SSS's watermark over both partitions)"
    )
    print(
        "  late records: lakestate drops a record when its window's end + grace <= its "
        "partition's stream time (max timestamp so far), record by record; SSS drops a row "
        "when its window's end <= the watermark of the previous micro-batch (max event time "
        "of the micro-batches before that one - 30 s), so in one micro-batch it drops none: "
        f"it counted the {lr['late_record_drop_total']:,} late records into their windows"
    )
    many = r.get("sss_batches")
    if many:
        mr = many["results"]
        a = many["agreement"]
        ex = many["explained"]
        print(
            f"  SSS in {len(many['run']['micro_batches'])} micro-batches (maxFilesPerTrigger "
            f"{many['files_per_trigger']}): {many['run']['wall_s']:.1f}s, "
            f"{many['records_per_s']:,} records/s (load {many['run']['load_before'][0]:.1f}); "
            f"dropped {mr['dropped_records']:,} late records "
            f"(numRowsDroppedByWatermark {mr['num_rows_dropped_by_watermark']:,}; reference "
            f"{mr['reference_dropped_records']:,}) against lakestate's "
            f"{lr['late_record_drop_total']:,}: those whose window had closed before the "
            "micro-batch before theirs; = its reference: "
            f"{_matches(mr)}"
        )
        print(
            f"    its final counts against lakestate's: {a['agree']:,} agree, "
            f"{a['differ']:,} differ ({ex['differ_by_late_records']:,} by exactly the late "
            f"records lakestate dropped and SSS counted), {a['only_first']:,} lakestate only, "
            f"{a['only_second']:,} SSS only"
        )
    sch.print_phases("lakestate: where the time goes", ls["phases"], ls["wall_s"])
    print(f"    batches: {ls['batches']} ({', '.join(f'{x:.1f}s' for x in ls['batch_s'])})")
    sch.print_phases("SSS: where the time goes", ss["phases"], ss["wall_s"])


def _cpu_text(memory: dict[str, Any]) -> str:
    c = memory.get("cpu_s")
    if not c:
        return "-"
    return f"{c['driver']:.0f} + {c['jvm']:.0f} + {c['workers']:.0f} = {c['total']:.0f}"


def _matches(r: dict[str, Any]) -> bool:
    v = r.get("vs_reference") or {}
    return (
        v.get("differ") == 0
        and v.get("only_first") == 0
        and v.get("only_second") == 0
        and r.get("dropped_records") == r.get("reference_dropped_records")
    )


def report_memory(r: dict[str, Any]) -> None:
    sch = bs()
    sp, un = r["spill"], r["unbounded"]
    rows = []
    for part, label in (
        ("total", "peak RSS, process tree"),
        ("workers", "  peak of the Python workers"),
        ("jvm", "  peak of the JVM"),
        ("driver", "  peak of the CLI's Python (driver)"),
    ):
        rows.append(
            (
                label,
                gib(sp["memory"]["peak"][part]),
                gib(un["memory"]["peak"][part]),
                sch.ratio(sp["memory"]["peak"][part], un["memory"]["peak"][part]),
                "",
                "",
            )
        )
    rows += [
        (
            "wall s",
            f"{sp['wall_s']:.1f} (load {sp['load_before'][0]:.1f})",
            f"{un['wall_s']:.1f} (load {un['load_before'][0]:.1f})",
            None,
            "",
            "",
        ),
        (
            "CPU s: driver + JVM + Python workers",
            _cpu_text(sp["memory"]),
            _cpu_text(un["memory"]),
            None,
            "",
            "",
        ),
        ("windows buffered at the end", f"{sp['buffered']:,}", f"{un['buffered']:,}", None, "", ""),
        ("records emitted", f"{sp['sink_rows']:,}", f"{un['sink_rows']:,}", None, "", ""),
        (
            "batches (per task)",
            str(sp["batches_per_task"]),
            str(un["batches_per_task"]),
            None,
            "",
            "",
        ),
    ]
    sch.print_table(
        f"2. {r['open_windows']:,} open windows buffered: {r['configs']['spill']} (lakestate "
        f"column) vs {r['configs']['unbounded']} (baseline); {load_text(r)}",
        rows,
    )
    sch.print_phases("spill_to_disk: where the time goes", sp["phases"], sp["wall_s"])
    sch.print_phases("unbounded: where the time goes", un["phases"], un["wall_s"])


def report_profiles(r: dict[str, Any]) -> None:
    d, w = r["driver"], r["worker"]
    print(f"\n3. per-record cost ({load_text(r)})")
    print(
        f"  TopologyTestDriver, {d['records']:,} records of one partition: "
        f"{d['records_per_s']:,} records/s ({d['us_per_record']} us/record; a pass-through "
        f"topology {d['passthrough_us_per_record']} us/record); {d['calls_per_record']} "
        "Python calls per record"
    )
    print(
        f"  process_task (the engine's worker, RocksDB, no Spark), same records: "
        f"{w['records_per_s']:,} records/s ({w['us_per_record']} us/record); us/record by "
        "records in the batch: "
        + ", ".join(
            f"{x['records']:,}: {x['us_per_record']}" for x in w["us_per_record_by_batch_records"]
        )
    )
    for title, rows in (
        ("driver, top own time (cProfile)", d["top_tottime"][:14]),
        ("worker, top own time (cProfile)", w["top_tottime"][:14]),
        ("worker, lakestate functions by cumulative time", w["top_cumulative_lakestate"][:14]),
    ):
        print(f"  {title}, us per record (own / cumulative):")
        for row in rows:
            print(
                f"    {row['tottime_us_per_record']:>7.2f} {row['cumtime_us_per_record']:>7.2f}"
                f"  {row['ncalls']:>9}  {row['function']}"
            )


def report(results: dict[str, Any]) -> None:
    cases = results.get("cases", {})
    engine = results.get("engine", {})
    patch = engine.get("patch")
    print(
        f"\nengine: {engine.get('engine')}"
        + (f", with {patch['file']} applied (not in lib/)" if patch else "")
    )
    if cases.get("throughput"):
        report_throughput(cases["throughput"])
    if cases.get("memory"):
        report_memory(cases["memory"])
    if cases.get("profiles"):
        report_profiles(cases["profiles"])
    for name, err in results.get("errors", {}).items():
        print(f"\nERROR in case {name}: {err['error']}")
    print()


# -- main --------------------------------------------------------------------------------------


def apply_patch(engine_dir: Path, patch: Path) -> dict[str, Any]:
    """Apply ``patch`` to the snapshot of lib/ in ``engine_dir`` (``patch -p1``)."""
    import hashlib

    text = patch.read_text()
    done = subprocess.run(
        ["patch", "-p1", "--forward", "-d", str(engine_dir), "-i", str(patch.resolve())],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"{patch} does not apply to lib/ of HEAD:\n{done.stdout}{done.stderr}")
    return {
        "file": str(patch),
        "sha256": hashlib.sha256(text.encode()).hexdigest()[:16],
        "patched": [line.split()[-1] for line in done.stdout.splitlines() if line.strip()],
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small sizes: a check in a few minutes")
    p.add_argument("--records", type=int, help="input records (1M)")
    p.add_argument("--users", type=int, help="keys (10k)")
    p.add_argument("--minutes", type=int, help="minutes the timestamps span (60)")
    p.add_argument("--commits", type=int, help="Delta commits the input is written in (40)")
    p.add_argument(
        "--sss-batches",
        type=int,
        help="also run SSS in this many micro-batches (20; 0 or 1: skip)",
    )
    p.add_argument("--open-windows", type=int, help="case 2: open windows buffered (1M); 0: skip")
    p.add_argument("--spill-max-records", type=int, default=1000, help="case 2: the bound")
    p.add_argument("--profile-records", type=int, help="case 3: records profiled (100k); 0: skip")
    p.add_argument(
        "--engine",
        choices=("head", "tree"),
        default="head",
        help="measure lib/ as committed at HEAD (default) or the checkout as it is",
    )
    p.add_argument(
        "--engine-patch",
        help="a diff (patch -p1) applied to the HEAD snapshot of lib/ before measuring: what a "
        "change would give",
    )
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--master", default="local[2]")
    p.add_argument("--driver-memory", default="3g", help="spark.driver.memory, both sides")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")
    p.add_argument("--json", default=str(DEFAULT_JSON), help="where to write the results")
    args = p.parse_args(argv)
    if args.engine_patch and args.engine != "head":
        p.error("--engine-patch applies to the HEAD snapshot: not with --engine tree")
    q = args.quick
    defaults = {
        "records": 50_000 if q else 1_000_000,
        "users": 1_000 if q else 10_000,
        "minutes": 20 if q else 60,
        "commits": 8 if q else 40,
        "sss_batches": 8 if q else 20,
        "open_windows": 50_000 if q else 1_000_000,
        "profile_records": 20_000 if q else 100_000,
    }
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_sss"]:
        return child_sss(argv[1:])
    args = parse_args(argv)
    import signal
    import warnings

    import common

    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    warnings.filterwarnings("ignore", message="Cannot infer the eval type from type hints")
    sch = bs()
    os.environ["LAKESTATE_SHUFFLE_PARTITIONS"] = SHUFFLE_PARTITIONS
    os.environ["LAKESTATE_DRIVER_MEMORY"] = args.driver_memory
    os.environ["LAKESTATE_SPARK_CONF"] = json.dumps(
        {"spark.sql.streaming.stateStore.providerClass": common.ROCKSDB_PROVIDER}
    )
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    began = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="lakestate-bench-windows-"))
    engine = sch.snapshot_engine(work, args.engine)  # before anything imports lakestate
    if args.engine_patch:
        engine["patch"] = apply_patch(work / "engine", Path(args.engine_patch))
    import lakestate

    engine["imported_from"] = str(Path(lakestate.__file__).parent)
    results: dict[str, Any] = {
        "args": {k: v for k, v in vars(args).items() if k != "json"},
        "engine": engine,
        "environment": sch.bench_engine().environment(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "load_start": loadavg(),
        "targets": {"records_per_s_ratio_min": TARGET_RATIO},
        "semantics": {
            "window": "tumbling 1 minute",
            "grace_ms": GRACE_MS,
            "sss_watermark_delay": SSS_DELAY,
        },
        "cases": {},
        "errors": {},
    }
    out = Path(args.json)

    def save() -> None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=2, default=str) + "\n")

    bench = Bench(args, work, results)
    log(f"engine: {engine['engine']}; temporary directory {work}")
    try:
        bench.setup()
        steps = [("throughput", bench.throughput)]
        if args.open_windows:
            steps.append(("memory", bench.memory))
        if args.profile_records:
            steps.append(("profiles", bench.profiles))
        for name, fn in steps:
            log(f"== {name} (load average {'/'.join(str(x) for x in loadavg())})")
            try:
                results["cases"][name] = fn()
            except Exception as exc:
                results["errors"][name] = {
                    "error": f"{type(exc).__name__}: {exc}",
                    "traceback": traceback.format_exc(),
                }
                log(f"{name} FAILED: {type(exc).__name__}: {exc}")
            save()
    finally:
        results["load_end"] = loadavg()
        results["total_s"] = round(time.monotonic() - began, 1)
        if args.keep:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
        save()
    report(results)
    log(f"results written to {out}")
    return 0 if not results["errors"] else 1


if __name__ == "__main__":
    sys.exit(main())
