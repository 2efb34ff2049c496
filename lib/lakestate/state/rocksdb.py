"""The RocksDB backend, through rocksdict.

One RocksDB database per task, one column family per namespace. A commit is a single
WriteBatch holding the data and the offsets (offsets in their own column family), written
with the WAL on and atomic flush across column families, so a crash can never leave data
without its offsets or offsets without their data.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from rocksdict import AccessType, Options, Rdict, ReadOptions, WriteBatch, WriteOptions

from lakestate.state.base import Backend, IsolationLevel, StateStore, TopicPartition, Write
from lakestate.state.constants import OFFSETS_NAMESPACE


def _options() -> Options:
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    options.create_missing_column_families(True)
    options.set_atomic_flush(True)
    return options


class RocksDBBackend(Backend):
    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        Path(self.path).mkdir(parents=True, exist_ok=True)
        self._options = _options()
        existing = Rdict.list_cf(self.path, self._options) if _exists(self.path) else []
        self._db = Rdict(
            self.path,
            self._options,
            column_families={name: _options() for name in existing if name != "default"},
            access_type=AccessType.read_write(),
        )
        self._write_options = WriteOptions()
        self._write_options.disable_wal = False
        self._cfs: dict[str, Rdict] = {}
        for name in existing:
            if name != "default":
                self._cfs[name] = self._db.get_column_family(name)

    def _cf(self, namespace: str, create: bool) -> Rdict | None:
        cf = self._cfs.get(namespace)
        if cf is None and create:
            cf = self._cfs[namespace] = self._db.create_column_family(namespace, _options())
        return cf

    def get(self, namespace: str, key: bytes) -> bytes | None:
        cf = self._cf(namespace, create=False)
        return None if cf is None else cf.get(key)

    def iterate(
        self, namespace: str, start: bytes | None, end: bytes | None, reverse: bool
    ) -> Iterator[tuple[bytes, bytes]]:
        cf = self._cf(namespace, create=False)
        if cf is None:
            return iter(())
        return _scan(cf, start, end, reverse)

    def write(self, writes: Iterable[Write], offsets: Mapping[TopicPartition, int]) -> None:
        batch = WriteBatch(raw_mode=True)
        for namespace, key, value in writes:
            handle = self._handle(namespace)
            if value is None:
                batch.delete(key, handle)
            else:
                batch.put(key, value, handle)
        offsets_handle = self._handle(OFFSETS_NAMESPACE)
        for partition, offset in offsets.items():
            batch.put(partition.encode(), offset.to_bytes(8, "big", signed=True), offsets_handle)
        self._db.write(batch, self._write_options)

    def _handle(self, namespace: str):
        self._cf(namespace, create=True)
        return self._db.get_column_family_handle(namespace)

    def close(self) -> None:
        for cf in self._cfs.values():
            cf.close()
        self._cfs.clear()
        self._db.close()


def _exists(path: str) -> bool:
    return (Path(path) / "CURRENT").exists()


def _scan(
    cf: Rdict, start: bytes | None, end: bytes | None, reverse: bool
) -> Iterator[tuple[bytes, bytes]]:
    it = cf.iter(ReadOptions())
    if not reverse:
        it.seek(start) if start is not None else it.seek_to_first()
        while it.valid():
            key = it.key()
            if end is not None and key >= end:
                return
            yield key, it.value()
            it.next()
    else:
        if end is not None:
            it.seek_for_prev(end)
            if it.valid() and it.key() >= end:
                it.prev()
        else:
            it.seek_to_last()
        while it.valid():
            key = it.key()
            if start is not None and key < start:
                return
            yield key, it.value()
            it.prev()


def rocksdb_store(
    name: str,
    path: str | Path,
    isolation_level: IsolationLevel = IsolationLevel.READ_COMMITTED,
) -> StateStore:
    """A StateStore persisted in a RocksDB database at ``path``."""
    return StateStore(name, RocksDBBackend(path), isolation_level)
