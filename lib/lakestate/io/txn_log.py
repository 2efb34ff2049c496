"""A Delta table's txn versions (app id -> version) at a snapshot's version, read from its
log in one pass on S3.

delta-rs answers ``transaction_version(app_id)`` by replaying the log from the checkpoint
at every call (its checkpoint's parts and every commit file since, over HTTP on a bucket:
`tests/benchmarks/s3_delta_probe.py`), and a run asks it per task for every table it
checks or commits (the batch's held checks, fences, owner epochs). Here the txns of every
app id come from one read of the newest checkpoint at or before the version and the commit
files after it; the result is kept per table and version, and a later version is read on
from it (commit files never change), so a run reads each new commit once. The txn of an
app id is the version of its newest ``txn`` action (a checkpoint holds the reconciled ones).
Returns None when the log is not one it reads (a multi-part or V2 checkpoint, a missing
commit file, txn retention set on the table): the caller asks delta-rs.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from lakestate import object_store
from lakestate.io import delta_log

if TYPE_CHECKING:
    from deltalake import DeltaTable

#: A table property under which delta-rs may drop old txns: then delta-rs answers.
_RETENTION = "delta.setTransactionRetentionDuration"

# Per table URI: (version, its txns).
_known: dict[str, tuple[int, dict[str, int]]] = {}
_guard = threading.Lock()


def txns_at(table: DeltaTable) -> dict[str, int] | None:
    """Every txn (app id -> version) of the snapshot ``table`` on S3, or None (see the
    module's docstring)."""
    uri = table.table_uri.rstrip("/")
    if not object_store.is_s3(uri) or _RETENTION in table.metadata().configuration:
        return None
    version = table.version()
    with _guard:
        known = _known.get(uri)
    if known is not None and known[0] <= version:
        base, txns = known[0], dict(known[1])
    else:
        found = _from_checkpoint(uri, version)
        if found is None:
            return None
        base, txns = found
    for v in range(base + 1, version + 1):
        commit = delta_log.commit_of(uri, v)
        if commit is None:
            return None
        txns.update(commit.txns)
    with _guard:
        if uri not in _known or _known[uri][0] < version:
            _known[uri] = (version, dict(txns))
    return txns


def _from_checkpoint(uri: str, version: int) -> tuple[int, dict[str, int]] | None:
    """The newest checkpoint at or before ``version`` and its txns ((-1, {}) when there is
    none), or None when it is not a single classic checkpoint file."""
    import pyarrow.parquet as pq
    from pyarrow import fs

    log = f"{object_store.bucket_key(uri)}/_delta_log"
    selector = fs.FileSelector(log, allow_not_found=True)
    names = [i.base_name for i in object_store.filesystem().get_file_info(selector)]
    points = sorted(
        (int(n[:20]), n)
        for n in names
        if n[:20].isdigit() and ".checkpoint" in n and int(n[:20]) <= version
    )
    if not points:
        return -1, {}
    at = points[-1][0]
    if [n for v, n in points if v == at] != [f"{at:020d}.checkpoint.parquet"]:
        return None  # multi-part or V2: delta-rs reads those
    path = f"{log}/{at:020d}.checkpoint.parquet"
    try:
        rows = pq.read_table(path, columns=["txn"], filesystem=object_store.filesystem())
    except (KeyError, ValueError):  # a checkpoint written without a txn column: delta-rs
        return None
    txns = {t["appId"]: int(t["version"]) for t in rows.column("txn").to_pylist() if t is not None}
    return at, txns
