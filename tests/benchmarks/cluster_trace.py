"""Where a Spark run's time goes, for ``bench_cluster.py``: the CPU seconds of each process
of the run (sampled from ``/proc`` through psutil while it runs) and Spark's own timeline
of the run's jobs and tasks (its event log: each task's executor, launch, duration,
deserialization, run time, JVM CPU and GC).

A process's CPU is its own user + system time at its last sample (every 0.2 s), less what it
had at its first if it is older than the run (the master's, the workers'): a process that
exits between two samples loses at most that interval. The machine's busy CPU over
the run (``/proc/stat``) is printed beside ours: the other helpers' share of the two cores.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

_INTERVAL_S = 0.2


def role_of(proc: psutil.Process, workers: dict[str, str]) -> str:
    """What a process of the run is: the driver (Python, JVM), the master, a worker's JVM,
    an executor's JVM or one of its Python processes (``workers``: work dir -> name)."""
    cmd = " ".join(proc.cmdline())
    if "deploy.master.Master" in cmd:
        return "master JVM"
    if "deploy.worker.Worker" in cmd:
        return "worker JVM"
    if "CoarseGrainedExecutorBackend" in cmd:
        cwd = proc.cwd()
        name = next((n for d, n in workers.items() if cwd.startswith(d)), "?")
        return f"executor JVM ({name})"
    if "pyspark.daemon" in cmd or "pyspark/daemon" in cmd:
        parent = proc.parent()
        if parent is not None and "pyspark.daemon" in " ".join(parent.cmdline()):
            return "executor Python worker"
        return "executor Python daemon"
    if "SparkSubmit" in cmd:
        return "driver JVM"
    if "run_app" in cmd:
        return "driver Python"
    return "other: " + cmd[:60]


@dataclass
class CpuSampler:
    """Samples, until ``stop``, the CPU seconds of ``roots`` (pids) and their descendants."""

    roots: list[int]
    workers: dict[str, str]
    seen: dict[int, tuple[str, float, float, float]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _machine: tuple[float, float] = (0.0, 0.0)
    _base: dict[int, float] = field(default_factory=dict)
    series: dict[int, list[tuple[float, float]]] = field(default_factory=dict)
    machine: list[tuple[float, float]] = field(default_factory=list)

    def start(self) -> None:
        self._machine = _machine_cpu()
        self._started = time.time()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def add_root(self, pid: int) -> None:
        self.roots.append(pid)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        busy, total = _machine_cpu()
        self.machine_busy = busy - self._machine[0]
        self.wall = time.time() - self._started

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(_INTERVAL_S)

    def sample(self) -> None:
        now = time.time()
        for root in list(self.roots):
            try:
                top = psutil.Process(root)
                procs = [top, *top.children(recursive=True)]
            except psutil.Error:
                continue
            for proc in procs:
                try:
                    with proc.oneshot():
                        times = proc.cpu_times()
                        cpu = times.user + times.system
                        role = self.seen[proc.pid][0] if proc.pid in self.seen else ""
                        if not role or role.startswith("other"):  # bash exec's the JVMs
                            role = role_of(proc, self.workers)
                except psutil.Error:
                    continue
                if proc.pid not in self.seen:  # a process older than the run: from now on
                    self._base[proc.pid] = cpu if proc.create_time() < self._started else 0.0
                first = self.seen.get(proc.pid, (role, cpu, now, now))[2]
                self.seen[proc.pid] = (role, cpu - self._base[proc.pid], first, now)
                self.series.setdefault(proc.pid, []).append((now, cpu - self._base[proc.pid]))
        self.machine.append((now, _machine_cpu()[0]))

    def total(self) -> float:
        """The CPU seconds of every process of the run."""
        return sum(cpu for _, cpu, _, _ in self.seen.values())

    def report(self, t0: float) -> list[str]:
        """Lines: each process's CPU seconds and when it was seen (seconds after ``t0``),
        by role; the total against the wall time's two cores and the machine's busy time."""
        lines = []
        total = 0.0
        by_role: dict[str, float] = {}
        for pid, (role, cpu, first, last) in sorted(self.seen.items(), key=lambda kv: kv[1][2]):
            total += cpu
            by_role[role] = by_role.get(role, 0.0) + cpu
            lines.append(
                f"  {role:28s} pid {pid:>7}: {cpu:6.1f} s CPU, seen {first - t0:5.1f} .. {last - t0:5.1f} s"
            )
        lines.append(
            "  by role: " + ", ".join(f"{r} {s:.1f} s" for r, s in sorted(by_role.items()))
        )
        lines.append(
            f"  the run's processes: {total:.1f} CPU s in {self.wall:.1f} s wall "
            f"(2 cores x wall = {2 * self.wall:.1f} s); the machine busy {self.machine_busy:.1f} s "
            f"(others: {self.machine_busy - total:.1f} s)"
        )
        return lines

    def window(self, start: float, end: float, what: str) -> list[str]:
        """Lines: the CPU seconds each role used between ``start`` and ``end`` (epoch
        seconds, e.g. the processing job's), against 2 cores x that time, and the machine's."""
        by_role: dict[str, float] = {}
        for pid, samples in self.series.items():
            used = _at(samples, end) - _at(samples, start)
            if used > 0.05:
                role = self.seen[pid][0]
                by_role[role] = by_role.get(role, 0.0) + used
        ours = sum(by_role.values())
        machine = _at(self.machine, end) - _at(self.machine, start)
        return [
            f"  {what}, {end - start:.1f} s: "
            + ", ".join(f"{r} {s:.1f}" for r, s in sorted(by_role.items()))
            + f"; ours {ours:.1f} CPU s of 2 x {end - start:.1f} = {2 * (end - start):.1f}, "
            f"the machine busy {machine:.1f} (others {machine - ours:.1f})"
        ]


def _at(samples: list[tuple[float, float]], when: float) -> float:
    """A cumulative series' value at ``when`` (its last sample before; 0 before the first)."""
    value = 0.0
    for t, v in samples:
        if t > when:
            break
        value = v
    return value


def _cached(metrics: dict) -> str:
    """What a task put in the block manager (a persisted partition): ``, cached N MB``."""
    size = sum(
        b["Status"].get("Memory Size", 0) + b["Status"].get("Disk Size", 0)
        for b in metrics.get("Updated Blocks", ())
    )
    return f", cached {size / 1e6:.0f} MB" if size else ""


def _machine_cpu() -> tuple[float, float]:
    """The machine's busy and total CPU seconds since boot (``/proc/stat``)."""
    fields = [float(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    tick = 100.0
    idle = fields[3] + fields[4]
    return (sum(fields) - idle) / tick, sum(fields) / tick


def event_log_conf(directory: Path) -> dict[str, str]:
    """The Spark confs that write the run's event log, uncompressed, into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    return {
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": directory.as_uri(),
        "spark.eventLog.compress": "false",
        "spark.eventLog.logBlockUpdates.enabled": "true",  # the persisted outputs' sizes
    }


def timeline(directory: Path, t0: float) -> list[str]:
    """Lines: the application's start, its executors, its jobs and each of their tasks,
    in seconds after ``t0`` (epoch seconds), from the event log in ``directory``."""
    # Spark 4 writes a rolling log: a directory of ``events_<n>_<app>`` files.
    files = sorted(directory.rglob("events_*"), key=lambda p: int(p.name.split("_")[1]))
    if not files:
        return ["  (no event log)"]
    text = "".join(f.read_text() for f in files)
    events = [json.loads(line) for line in text.splitlines() if line.strip()]

    def at(ms: float) -> str:
        return f"{ms / 1000 - t0:6.1f}"

    lines = []
    stage_job: dict[int, int] = {}
    for e in events:
        kind = e["Event"]
        if kind == "SparkListenerApplicationStart":
            lines.append(f"  {at(e['Timestamp'])} s  application start")
        elif kind == "SparkListenerExecutorAdded":
            host = e["Executor Info"]["Host"]
            lines.append(f"  {at(e['Timestamp'])} s  executor {e['Executor ID']} added ({host})")
        elif kind == "SparkListenerJobStart":
            for s in e["Stage IDs"]:
                stage_job[s] = e["Job ID"]
            name = e["Stage Infos"][0]["Stage Name"] if e["Stage Infos"] else ""
            lines.append(f"  {at(e['Submission Time'])} s  job {e['Job ID']} submitted: {name}")
        elif kind == "SparkListenerJobEnd":
            lines.append(f"  {at(e['Completion Time'])} s  job {e['Job ID']} ended")
        elif kind == "SparkListenerTaskEnd":
            info, m = e["Task Info"], e.get("Task Metrics") or {}
            lines.append(
                f"  {at(info['Launch Time'])} s    task {info['Index']} of job "
                f"{stage_job.get(e['Stage ID'], '?')} on executor {info['Executor ID']} "
                f"({info['Locality']}): {(info['Finish Time'] - info['Launch Time']) / 1000:.2f} s"
                f" (deserialize {m.get('Executor Deserialize Time', 0) / 1000:.2f}, run "
                f"{m.get('Executor Run Time', 0) / 1000:.2f}, JVM CPU "
                f"{m.get('Executor CPU Time', 0) / 1e9:.2f}, GC {m.get('JVM GC Time', 0) / 1000:.2f}"
                f", result {m.get('Result Size', 0) / 1e6:.1f} MB{_cached(m)}) "
                f"{e['Task End Reason']['Reason']}"
            )
        elif kind == "SparkListenerBlockUpdated":
            b = e["Block Updated Info"]
            size = (b.get("Memory Size", 0) + b.get("Disk Size", 0)) / 1e6
            if size:
                where = b["Block Manager ID"]["Executor ID"]
                lines.append(f"           block {b['Block ID']} on executor {where}: {size:.0f} MB")
        elif kind == "SparkListenerApplicationEnd":
            lines.append(f"  {at(e['Timestamp'])} s  application end")
    return lines


#: The driver's steps timed by ``instrument`` (module, attribute path).
DRIVER_STEPS = (
    ("lakestate.runtime.spark_session", "_launch_jvm_into_log"),
    ("pyspark.sql.session", "SparkSession.Builder.getOrCreate"),
    ("lakestate.runtime.spark_transport", "_warm_python_workers"),
    ("lakestate.runtime.spark_transport", "SparkTransport.state_owner"),
    ("lakestate.runtime.spark_located", "located_tasks"),
    ("lakestate.runtime.spark_transport", "SparkStarter.__call__"),
    ("lakestate.runtime.spark_transport", "SparkTransport.run_batch"),
    ("lakestate.runtime.spark_transport", "on_driver"),
    ("lakestate.runtime.spark_located", "Placements.learn"),
    ("lakestate.runtime.runner", "commit_batch"),
    ("lakestate.runtime.spark_kept", "LocatedRowsElsewhere.write_files"),
)


def instrument() -> None:
    """In the driver: wrap ``DRIVER_STEPS`` so that each call's start and end (epoch
    seconds) is printed as ``step <name> <start> <end>`` on stdout (and so the steps a
    driver runs serially can be set beside Spark's timeline)."""
    import functools
    import importlib

    for module_name, path in DRIVER_STEPS:
        module = importlib.import_module(module_name)
        owner, _, name = path.rpartition(".")
        holder = module
        for part in owner.split(".") if owner else ():
            holder = getattr(holder, part)
        original = getattr(holder, name)

        def timed(*args, __f=original, __n=path, **kwargs):
            started = time.time()
            try:
                return __f(*args, **kwargs)
            finally:
                print(f"step {__n} {started:.3f} {time.time():.3f}", flush=True)

        setattr(holder, name, functools.wraps(original)(timed))
    instrument_executors()


#: The executors' steps timed by ``instrument`` (names in ``spark_located``'s globals, which
#: the task's closure takes with it).
EXECUTOR_STEPS = ("_layout", "read_inputs", "process_task")


def _on_executor(function, name: str):
    """``function`` printing ``xstep <name> <pid> <start> <end>`` on stderr (the
    executor's log) at each call."""

    def timed(*args, **kwargs):
        import os
        import sys

        started = time.time()
        try:
            return function(*args, **kwargs)
        finally:
            print(f"xstep {name} {os.getpid()} {started:.3f} {time.time():.3f}", file=sys.stderr)

    return timed


def instrument_executors() -> None:
    """In the driver: the executors' steps (``EXECUTOR_STEPS``) timed in the tasks'
    closures (this module pickled by value, since the executors cannot import it)."""
    import sys

    from lakestate.runtime import spark_located
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    for name in EXECUTOR_STEPS:
        setattr(spark_located, name, _on_executor(getattr(spark_located, name), name))


def executor_steps(work_dirs: dict[str, Path], t0: float) -> list[str]:
    """Lines: the executors' timed steps, from their stderr files in the workers' work
    directories (name -> directory), in seconds after ``t0``."""
    lines = []
    for worker, work in sorted(work_dirs.items()):
        for log in sorted(work.glob("*/*/stderr")):
            for line in log.read_text(errors="replace").splitlines():
                if line.startswith("xstep "):
                    _, name, pid, start, end = line.split()
                    took = float(end) - float(start)
                    lines.append(
                        f"  {float(start) - t0:6.1f} s  {worker} (Python pid {pid}) {name}: "
                        f"{took:.2f} s"
                    )
    return sorted(lines, key=lambda line: float(line.split()[0]))


def step_window(stdout: str, name: str) -> tuple[float, float] | None:
    """The first call of the driver's step ``name``: (start, end), epoch seconds."""
    for line in stdout.splitlines():
        if line.startswith(f"step {name} "):
            _, _, start, end = line.split()
            return float(start), float(end)
    return None


def steps(stdout: str, t0: float) -> list[str]:
    """Lines: the driver's timed steps (``instrument``), in seconds after ``t0``; repeated
    quick calls (the session's getter) summed."""
    lines, sums = [], {}
    for line in stdout.splitlines():
        if line.startswith("step "):
            _, name, start, end = line.split()
            took = float(end) - float(start)
            if took < 0.05:
                sums[name] = sums.get(name, 0.0) + took
            else:
                lines.append(f"  {float(start) - t0:6.1f} s  {name}: {took:.2f} s")
    lines += [f"  (calls under 0.05 s: {n} {s:.2f} s in all)" for n, s in sums.items()]
    return lines


class _Bare:
    """What the located path asks of its session: its ``sparkContext``."""

    def __init__(self, sc) -> None:
        self.sparkContext = sc


def bare_context() -> None:
    """In the driver: Spark started as a SparkContext without a SparkSession (the located
    path, with the executors owning the state, uses only the context), to measure what
    the session and Delta's extension cost a run. Only for such runs: a run that reads
    through Spark SQL fails."""
    import os
    import sys

    from lakestate.runtime import spark_session
    from pyspark import SparkConf, SparkContext

    def get_spark(master=None, app_name="lakestate", extra_conf=None, s3=False):
        conf = spark_session.spark_conf(master, app_name, extra_conf, s3=s3)
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        spark_session._launch_jvm_into_log(conf)
        sc = SparkContext.getOrCreate(SparkConf().setAll(list(conf.items())))
        sc.setLogLevel("WARN")
        return _Bare(sc)

    spark_session.get_spark = get_spark
