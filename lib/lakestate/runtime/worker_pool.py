"""Worker processes for the in-process transport: both cores without Spark.

A run in process, for a batch big enough to repay starting them, hands its tasks to a
pool of worker processes: each reads its task's input and runs the very function Spark's
Python workers run (``task_executor.process_task``), one task per worker at a time.
Processes, not threads: the processing is Python code under CPython's GIL. Workers are started with ``spawn``: the
driver may hold a JVM or delta-rs threads, which a ``fork`` would copy half-held.

A worker dies with the driver (``PR_SET_PDEATHSIG``): a killed run leaves no worker that
could still write a task's local store. A task's outcome is the same in a worker as in the
driver, so the number of workers cannot change what a batch commits.

How many: the app config's ``WORKERS_CONFIG`` (default: the cores this process may run
on), never more than the batch's tasks; batches of fewer than ``MIN_RECORDS_CONFIG``
records stay in the driver, where starting a worker (about a second: Python, pyarrow,
lakestate and the app imported) would cost more than it saves.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

from lakestate.errors import StreamsException
from lakestate.runtime.task_executor import BatchContext, loaded_app

#: App config key: worker processes of a run in process (0 or 1: the tasks run in the
#: driver, one after another). Default: the cores available to the run.
WORKERS_CONFIG = "lakestate.inprocess.workers"
#: App config key: a batch of fewer records than this runs in the driver.
MIN_RECORDS_CONFIG = "lakestate.inprocess.workers.min.records"
DEFAULT_MIN_RECORDS = 100_000
_PR_SET_PDEATHSIG = 1
T = TypeVar("T")
R = TypeVar("R")


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity, as a container limits it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _int_config(config: Mapping[str, Any], key: str, default: int) -> int:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise StreamsException(f"app config {key} must be an int >= 0, got {value!r}")
    return value


def workers_wanted(config: Mapping[str, Any], tasks: int, records: int) -> int:
    """The worker processes for a batch of ``tasks`` tasks with rows and ``records``
    records under app ``config``: 0 (run in the driver) below two tasks, below
    ``MIN_RECORDS_CONFIG`` records, or when ``WORKERS_CONFIG`` is 0 or 1; else at most one
    per task. ``StreamsException`` for a setting that is not an int >= 0."""
    workers = _int_config(config, WORKERS_CONFIG, available_cores())
    min_records = _int_config(config, MIN_RECORDS_CONFIG, DEFAULT_MIN_RECORDS)
    if workers < 2 or tasks < 2 or records < min_records:
        return 0
    return min(workers, tasks)


def _die_with_parent(parent: int) -> None:
    # Linux only. A worker still starting when its driver was killed asks for the signal
    # too late: it checks that its parent is still the driver, and else exits.
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:
        os._exit(1)


class WorkerPool:
    """Worker processes that process tasks (``submit``), started on first use and kept
    for the run's later batches; ``close`` stops them."""

    def __init__(self) -> None:
        self._pool: ProcessPoolExecutor | None = None
        self._size = 0

    def start(self, workers: int, app_path: str) -> None:
        """Have ``workers`` processes start (the pool grows if it is smaller), each
        loading the app at ``app_path``, while the driver reads the batch's input."""
        if self._pool is None or self._size < workers:
            self.close()
            self._pool = ProcessPoolExecutor(
                max_workers=workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_die_with_parent,
                initargs=(os.getpid(),),
            )
            self._size = workers
            # One process starts per submit that finds none idle: ask for all of them now.
            for _ in range(workers):
                self._pool.submit(_load, app_path)

    def submit(
        self, work: Callable[[T, BatchContext], R], task: T, ctx: BatchContext
    ) -> Future[R]:
        """Run ``work(task, ctx)`` for one task in a worker (after ``start``): ``work``
        a module-level function, ``task`` picklable."""
        assert self._pool is not None, "WorkerPool.start first"
        return self._pool.submit(work, task, ctx)

    def close(self) -> None:
        """Stop the workers (they hold no store between tasks)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
            self._size = 0


def _load(app_path: str) -> None:
    loaded_app(app_path)


def result_of(future: Future[R], task: str) -> R:
    """The processing output of ``task`` from its worker; a worker that died (killed, out
    of memory) fails the batch with a ``StreamsException`` saying so."""
    try:
        return future.result()
    except BrokenProcessPool as exc:
        raise StreamsException(
            f"the worker process processing task {task} died ({exc}); the batch commits "
            f"nothing: rerun it, or set {WORKERS_CONFIG} to 1 to process in the driver"
        ) from None


__all__ = [
    "DEFAULT_MIN_RECORDS",
    "MIN_RECORDS_CONFIG",
    "WORKERS_CONFIG",
    "WorkerPool",
    "available_cores",
    "result_of",
    "workers_wanted",
]
