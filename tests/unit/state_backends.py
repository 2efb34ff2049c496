"""Shared by the state-store tests: one factory per backend, so suites run against both.

A test module parametrizes its tests over the in-memory and the RocksDB backend with::

    @pytest.fixture(params=BACKENDS)
    def store_factory(request, tmp_path):
        yield from store_factories(request, tmp_path)
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
from lakestate.state.base import IsolationLevel, StateStore
from lakestate.state.memory import in_memory_store
from lakestate.state.rocksdb import rocksdb_store

BACKENDS = ["memory", "rocksdb"]


class StoreFactory:
    """Makes fresh stores of one backend and reopens them (closing the old instance).

    ``reopen`` of an in-memory store builds a new StateStore over the same backend: the
    closest an in-memory store gets to a restart (committed data kept, open transactions
    gone).
    """

    def __init__(self, kind: str, directory: Path) -> None:
        self.kind = kind
        self._directory = directory
        self._counter = itertools.count()
        self._paths: dict[int, Path] = {}
        self._stores: list[StateStore] = []

    def __call__(self, isolation: IsolationLevel = IsolationLevel.READ_COMMITTED) -> StateStore:
        name = f"task-{next(self._counter)}"
        if self.kind == "memory":
            store = in_memory_store(name, isolation)
        else:
            path = self._directory / name
            store = rocksdb_store(name, path, isolation)
            self._paths[id(store)] = path
        self._stores.append(store)
        return store

    def reopen(self, store: StateStore, isolation: IsolationLevel | None = None) -> StateStore:
        isolation = isolation or store.isolation_level
        store.close()
        if self.kind == "memory":
            new = StateStore(store.name, store._backend, isolation)
        else:
            path = self._paths.pop(id(store))
            new = rocksdb_store(store.name, path, isolation)
            self._paths[id(new)] = path
        self._stores.append(new)
        return new

    def close_all(self) -> None:
        for store in self._stores:
            store.close()


def store_factories(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    """The body of a ``store_factory`` fixture parametrized with ``BACKENDS``."""
    factory = StoreFactory(request.param, tmp_path)
    yield factory
    factory.close_all()
