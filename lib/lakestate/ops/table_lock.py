"""The maintenance lock of a table: compaction, OPTIMIZE, VACUUM and a rewind's restore
never rewrite one table at once (delta-rs lets two rewrites of the same files both commit,
and its OPTIMIZE drops a commit's txns, so no txn can fence it). On the local file system a
file lock in the table's folder (every process of the machine); on object storage a lease
in the table's folder (``ops.table_lease``: a Delta table whose rows are taken with
Delta's conflict check, every machine). docs/architecture.md, "A warehouse on object
storage"."""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Iterable, Iterator

from lakestate.io import delta_log
from lakestate.ops import table_lease

#: The maintenance lock's file in a table's folder (Delta readers and VACUUM skip ``_`` names).
LOCK_FILE = "_lakestate_maintenance.lock"


_held = threading.local()  # per thread: {lock file: depth} of table_lock holds


@contextlib.contextmanager
def table_lock(path: str) -> Iterator[None]:
    """Hold the maintenance lock of the table at ``path``: no other holder, in any thread or
    process of this machine, rewrites the table meanwhile (this waits for the current one).
    Reentrant within a thread; on object storage, every machine's holders (a lease that
    expires ``table_lease.lease_time()`` after its holder stops renewing it). Open the table after
    taking it."""
    log = delta_log.local_log(path)
    lock_file = str(log.parent / LOCK_FILE) if log is not None else table_lease.lease_table(path)
    depth: dict[str, int] = getattr(_held, "depth", None) or {}
    _held.depth = depth
    if depth.get(lock_file):
        depth[lock_file] += 1
        try:
            yield
        finally:
            depth[lock_file] -= 1
        return
    if log is None:
        with table_lease.held(path):
            depth[lock_file] = 1
            try:
                yield
            finally:
                depth.pop(lock_file, None)
        return
    fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        depth[lock_file] = 1
        yield
    finally:
        depth.pop(lock_file, None)
        os.close(fd)  # releases the lock


@contextlib.contextmanager
def tables_locked(paths: Iterable[str]) -> Iterator[None]:
    """Hold ``table_lock`` of every table in ``paths`` (taken in sorted order)."""
    with contextlib.ExitStack() as stack:
        for path in sorted(set(paths)):
            stack.enter_context(table_lock(path))
        yield
