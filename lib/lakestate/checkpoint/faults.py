"""Fault injection for the exactly-once tests: kill this process at a named commit step.

``LAKESTATE_FAULT=<point>`` (optionally ``<point>@<batch>``) makes ``maybe_fail(point,
batch)`` SIGKILL the current process, the hardest crash there is: no cleanup, no flush.
Points, in commit order (``commit.py``'s steps): before_progress (the batch processed and
staged, nothing committed), progress_checked (the progress commit's checks done, its
commit not yet made), after_progress, after_sink:<topic>,
after_changelog:<store>, after_tables (that is, before the local commit), mid_local_commit
(after the first task's local commit); mid_restore (after a restore's first write, before
its batch marker; for a warmup's restore in pieces, before its last piece's commit);
mid_warmup_piece (inside a warmup restore's piece, before its commit) and mid_warmup_swap
(the complete shadow's old store removed, the shadow not yet renamed in its place:
restore/warmup.py); and compaction's and rewind's own points (ops/rewind.py).
``in_task`` is set on Spark's executors (``spark.executorEnv.LAKESTATE_FAULT``): it
SIGKILLs the executor (the JVM the Python worker serves) at the start of a task's
processing (``kill_executor``): an executor lost mid-batch; ``in_write`` the same in
the write job (the files of its task half written, its cached output lost with it). Once:
the first task there
creates the file named by env ``LAKESTATE_FAULT_ONCE`` and kills; later ones (the retries)
find it and go on.
``<batch>`` is the lowest task batch of the batch being committed (for mid_restore: the
batch restored).
Unset in production; reading one environment variable is its only cost.

``hook(point, fn)``: in this process, also call ``fn(batch)`` at ``point`` (a test's way
to make something happen between two steps, e.g. a rebalance's fence before a progress
commit).
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable, Iterator

ENV = "LAKESTATE_FAULT"
ONCE_ENV = "LAKESTATE_FAULT_ONCE"
_HOOKS: dict[str, Callable[[int], None]] = {}


@contextlib.contextmanager
def hook(point: str, fn: Callable[[int], None]) -> Iterator[None]:
    """Call ``fn(batch)`` whenever ``maybe_fail(point, batch)`` is reached, while in the
    block."""
    _HOOKS[point] = fn
    try:
        yield
    finally:
        _HOOKS.pop(point, None)


def active() -> bool:
    """Whether a fault point is set (the commit then writes its tables one at a time)."""
    return bool(os.environ.get(ENV))


def maybe_fail(point: str, batch_id: int) -> None:
    if _HOOKS:
        fn = _HOOKS.get(point)
        if fn is not None:
            fn(batch_id)
    wanted = os.environ.get(ENV)
    if not wanted:
        return
    name, _, batch = wanted.partition("@")
    if name == point and (not batch or int(batch) == batch_id):
        os.kill(os.getpid(), signal.SIGKILL)


def kill_executor(batch_id: int, point: str = "in_task") -> None:
    """At ``point`` (``in_task`` or ``in_write``, see above), SIGKILL the nearest ancestor
    of this process that is a JVM: in a Spark Python worker, its executor."""
    wanted = os.environ.get(ENV)
    if not wanted:
        return
    name, _, batch = wanted.partition("@")
    if name != point or (batch and int(batch) != batch_id):
        return
    try:
        os.close(os.open(os.environ[ONCE_ENV], os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return  # killed once already
    pid = os.getppid()
    while pid > 1:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)
        command = fields[0].split("(", 1)[1]
        if command == "java":
            os.kill(pid, signal.SIGKILL)
            return
        pid = int(fields[1].split()[1])
