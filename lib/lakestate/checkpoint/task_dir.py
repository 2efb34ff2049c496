"""A task's directory on this instance (``TaskDir``: Kafka's StateDirectory and
ProcessorStateManager for one task): its RocksDB store and its staged transactions.

Processing may run in Spark workers while Delta commits run in the driver, so a worker
cannot commit its transaction itself: it stages it durably beside the store, keyed by
batch. The driver applies it once every Delta commit of the batch is confirmed (data,
offsets, stream time and batch id in one WriteBatch, commit step 4), or recovery discards
it. It is the local half of a checkpoint, which is why it lives in ``checkpoint/``: the
commit's step 4 applies what step 1 staged here.
"""

from __future__ import annotations

import os
import pickle
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import groupby
from operator import itemgetter
from pathlib import Path

from lakestate.state.base import IsolationLevel, StateStore, TopicPartition, Write
from lakestate.state.constants import META_NAMESPACE
from lakestate.state.rocksdb import rocksdb_store
from lakestate.task_id import TaskId

BATCH_KEY = b"batch"
STATE_DIR_ENV = "LAKESTATE_STATE_DIR"
DEFAULT_STATE_DIR = "state"


def state_dir_of(state_dir: str | None) -> str:
    """The instance's local state directory: ``state_dir``, else env
    ``LAKESTATE_STATE_DIR``, else ``./state`` (absolute)."""
    return str(Path(state_dir or os.environ.get(STATE_DIR_ENV) or DEFAULT_STATE_DIR).resolve())


def local_batch(store: StateStore) -> int | None:
    """The last batch committed into this local store, or None for a new store."""
    raw = store.get(META_NAMESPACE, BATCH_KEY)
    return None if raw is None else int.from_bytes(raw, "big", signed=True)


def batch_marker(batch_id: int) -> Write:
    """The write that records ``batch_id`` in the store's metadata, committed with the data."""
    return META_NAMESPACE, BATCH_KEY, batch_id.to_bytes(8, "big", signed=True)


@dataclass(frozen=True)
class TaskDir:
    """Task ``task`` of ``app`` on the instance whose state directory is ``state_dir``:
    ``<state dir>/<app>/<task>/``, holding ``db/`` (the store) and ``staged/``."""

    state_dir: str | Path
    app: str
    task: TaskId | str

    @property
    def path(self) -> Path:
        return Path(self.state_dir) / self.app / str(self.task)

    def exists(self) -> bool:
        """Whether the task's store exists (a RocksDB ``CURRENT`` file)."""
        return (self.path / "db" / "CURRENT").exists()

    def open(self, isolation: IsolationLevel) -> StateStore:
        """The task's store (created if missing); the caller closes it."""
        return rocksdb_store(f"{self.app}/{self.task!s}", self.path / "db", isolation)

    def _staged_path(self, batch_id: int) -> Path:
        return self.path / "staged" / f"batch-{batch_id}.pkl"

    def stage(
        self,
        batch_id: int,
        writes: list[tuple[str, list[bytes], list[bytes | None]]],
        offsets: Mapping[TopicPartition, int],
        run_id: str | None = None,
    ) -> None:
        """Durably stage the task's transaction for ``batch_id`` (write, fsync, rename), with
        the ``run_id`` whose progress row records the batch (``staged_run_id``). ``writes``:
        (namespace, keys, values) per namespace (``Transaction.changes_by_namespace``)."""
        path = self._staged_path(batch_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            pickler = pickle.Pickler(f, protocol=pickle.HIGHEST_PROTOCOL)
            # No memo: nothing here is shared or cyclic, and memoizing a big batch's million
            # keys and values cost about ten times the rest of the pickling.
            pickler.fast = True
            pickler.dump(
                {
                    "batch_id": batch_id,
                    "columns": writes,
                    "offsets": dict(offsets),
                    "run_id": run_id,
                }
            )
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def has_staged(self, batch_id: int) -> bool:
        return self._staged_path(batch_id).exists()

    def apply_staged(self, store: StateStore, batch_id: int) -> None:
        """Commit the staged transaction of ``batch_id`` into ``store`` (one WriteBatch),
        then drop the staged file. Applying twice is harmless: the second finds the store at
        the batch."""
        path = self._staged_path(batch_id)
        if local_batch(store) == batch_id:
            path.unlink(missing_ok=True)
            return
        with open(path, "rb") as f:
            staged = pickle.load(f)
        columns = staged.get("columns")
        if columns is None:  # staged as a list of writes (by a lakestate before 2026-11-29)
            columns = _by_namespace(staged["writes"])
        with store.new_transaction() as txn:
            for namespace, keys, values in columns:
                txn.put_all(namespace, zip(keys, values, strict=True))
            namespace, key, value = batch_marker(batch_id)
            txn.put(namespace, key, value)
            txn.commit(staged["offsets"])
        path.unlink(missing_ok=True)

    def staged_run_id(self, batch_id: int) -> str | None:
        """The run id the staged transaction of ``batch_id`` was staged with (None: none, or
        staged by a lakestate that did not record it)."""
        try:
            with open(self._staged_path(batch_id), "rb") as f:
                return pickle.load(f).get("run_id")
        except FileNotFoundError:
            return None

    def staged_batches(self) -> list[int]:
        """The batches staged for the task (normally none, or the one a crash left)."""
        staged = self.path / "staged"
        if not staged.is_dir():
            return []
        return sorted(
            int(p.name[len("batch-") : -len(".pkl")])
            for p in staged.iterdir()
            if p.name.startswith("batch-") and p.name.endswith(".pkl")
        )

    def discard_staged(self) -> None:
        staged = self.path / "staged"
        if staged.exists():
            shutil.rmtree(staged)

    def wipe(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def _by_namespace(writes: list[Write]) -> list[tuple[str, list[bytes], list[bytes | None]]]:
    """The writes (by namespace, as ``Transaction.changes`` gives them) as one (namespace,
    keys, values) per namespace: the staged form, two lists instead of a tuple a write."""
    columns = []
    for namespace, group in groupby(writes, key=itemgetter(0)):
        items = list(group)
        columns.append((namespace, [w[1] for w in items], [w[2] for w in items]))
    return columns
