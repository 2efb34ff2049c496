"""A table's maintenance lock across machines, for a table on object storage: a lease
recorded in a small Delta table in the table's folder (``<table>/_lakestate_lease``; Delta
readers, VACUUM and the warehouse's listings skip ``_`` names).

Each row of the lease table is one state of the lease: ``seq`` (1, 2, ...), ``owner`` (host,
process, thread and a random id: one per taking) and ``expires_ms`` (epoch milliseconds; 0:
released). The newest ``seq`` is the Delta ``txn`` version of ``LEASE_TXN`` in the lease
table, and every row's commit carries that txn with its ``seq``: two takers that read the
same state both commit ``seq + 1``, and Delta's conflict check fails the second
(ConcurrentTransaction; on S3 through the conditional put of the commit file), which reads
again and waits. A lease is free when its newest row is released or expired; a holder that
crashed is overtaken once its lease expires (``lease_time()``). A live holder renews its
lease (``held``: a row ``seq + 1`` with its own owner and a later expiry, a third of the
lease's time apart), so a rewrite may take longer than the lease. A renewal or release
writes a row only while the lease is still the holder's.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace

import pyarrow as pa
import pyarrow.compute as pc
from lakestate.errors import StreamsException
from lakestate.io import delta_commits

#: The lease table's folder in the leased table's folder.
LEASE_TABLE = "_lakestate_lease"
#: The txn id whose version, in the lease table, is the newest row's ``seq``.
LEASE_TXN = "lakestate-lease"
#: How long a taken lease holds without its holder renewing it: a crashed holder's tables
#: wait this long before another holder may rewrite them.
LEASE_SECONDS = 120.0
#: An environment variable overriding ``LEASE_SECONDS`` (seconds).
LEASE_SECONDS_ENV = "LAKESTATE_LEASE_SECONDS"


def lease_time() -> float:
    """The lease time: env ``LAKESTATE_LEASE_SECONDS``, else ``LEASE_SECONDS``."""
    text = os.environ.get(LEASE_SECONDS_ENV, "").strip()
    if not text:
        return LEASE_SECONDS
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if value <= 0:
        raise StreamsException(f"{LEASE_SECONDS_ENV}={text!r}: give a positive number of seconds")
    return value


#: Pause between two looks at a lease another holder has.
POLL_SECONDS = 0.5

log = logging.getLogger(__name__)

_SCHEMA = pa.schema([("seq", pa.int64()), ("owner", pa.string()), ("expires_ms", pa.int64())])


class LeaseTimeout(StreamsException):
    """The lease stayed another holder's for the whole wait."""


@dataclass(frozen=True)
class Lease:
    """A lease taken: the lease table, the row's ``seq`` and the owner that wrote it."""

    table: str
    seq: int
    owner: str


def lease_table(path: str) -> str:
    """The lease table of the table at ``path``."""
    return f"{path.rstrip('/')}/{LEASE_TABLE}"


def _now_ms() -> int:
    return int(time.time() * 1000)


def _newest(table) -> tuple[int, str | None, int]:
    """(seq, owner, expires_ms) of the lease table's newest row; (0, None, 0) if none."""
    seq = table.transaction_version(LEASE_TXN) or 0
    if seq == 0:
        return 0, None, 0
    rows = table.to_pyarrow_dataset().to_table(filter=pc.field("seq") == seq)
    if rows.num_rows == 0:  # a newer txn than its rows: cannot be (one commit has both)
        raise StreamsException(f"{table.table_uri}: lease row {seq} is missing")
    return seq, rows.column("owner")[0].as_py(), rows.column("expires_ms")[0].as_py()


def _write(table, seq: int, owner: str, expires_ms: int) -> None:
    """Commit row ``seq`` (ConcurrentCommit when another row ``seq`` won)."""
    row = pa.table({"seq": [seq], "owner": [owner], "expires_ms": [expires_ms]}, schema=_SCHEMA)
    delta_commits.append(table, row, "", {}, {}, extra_txns={LEASE_TXN: seq})


def take(
    path: str, *, lease_seconds: float | None = None, wait_seconds: float | None = None
) -> Lease:
    """Take the lease of the table at ``path``, waiting while another holder has it (at most
    ``wait_seconds``, None: until it is released or expires; then LeaseTimeout).
    ``lease_seconds``: None, ``lease_time()``."""
    lease_seconds = lease_seconds or lease_time()
    where = lease_table(path)
    delta_commits.create_table(where, _SCHEMA, [], "lakestate lease", f"lease of {path}")
    owner = f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}:{uuid.uuid4().hex}"
    deadline = None if wait_seconds is None else time.monotonic() + wait_seconds
    while True:
        table = delta_commits.open_table(where)
        seq, holder, expires_ms = _newest(table)
        if holder is None or expires_ms <= _now_ms():
            try:
                _write(table, seq + 1, owner, _now_ms() + int(lease_seconds * 1000))
                return Lease(where, seq + 1, owner)
            except delta_commits.ConcurrentCommit:
                continue  # another taker won this row: look again
        if deadline is not None and time.monotonic() > deadline:
            raise LeaseTimeout(
                f"{path}: its maintenance lease is held by {holder} for another "
                f"{(expires_ms - _now_ms()) / 1000:.0f} s; retry later"
            )
        time.sleep(POLL_SECONDS)


def give_back(lease: Lease) -> bool:
    """Release ``lease``; False when it was no longer the holder's (it expired and was
    overtaken: nothing is written)."""
    while True:
        table = delta_commits.open_table(lease.table)
        seq, holder, _ = _newest(table)
        if seq != lease.seq or holder != lease.owner:
            return False
        try:
            _write(table, seq + 1, lease.owner, 0)
            return True
        except delta_commits.ConcurrentCommit:
            continue  # overtaken meanwhile, or not: look again


def renew(lease: Lease, lease_seconds: float) -> Lease | None:
    """Extend ``lease`` to ``lease_seconds`` from now: the lease as renewed, or None when it
    was no longer the holder's (it expired and was overtaken: nothing is written)."""
    while True:
        table = delta_commits.open_table(lease.table)
        seq, holder, _ = _newest(table)
        if seq != lease.seq or holder != lease.owner:
            return None
        try:
            _write(table, seq + 1, lease.owner, _now_ms() + int(lease_seconds * 1000))
            return replace(lease, seq=seq + 1)
        except delta_commits.ConcurrentCommit:
            continue  # overtaken meanwhile, or not: look again


@contextlib.contextmanager
def held(
    path: str, *, lease_seconds: float | None = None, wait_seconds: float | None = None
) -> Iterator[Lease]:
    """Hold the lease of the table at ``path`` (``take``) for the block, renewing it a third
    of ``lease_seconds`` apart, and give it back after."""
    lease_seconds = lease_seconds or lease_time()
    current = [take(path, lease_seconds=lease_seconds, wait_seconds=wait_seconds)]
    done = threading.Event()

    def renewing() -> None:
        while not done.wait(lease_seconds / 3):
            renewed = renew(current[0], lease_seconds)
            if renewed is None:
                # Nothing can stop a rewrite already under way: say so, loudly.
                log.warning("%s: the maintenance lease expired and was overtaken", path)
                return
            current[0] = renewed

    renewer = threading.Thread(target=renewing, name=f"lease {path}", daemon=True)
    renewer.start()
    try:
        yield current[0]
    finally:
        done.set()
        renewer.join()
        give_back(current[0])
