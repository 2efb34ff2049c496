"""Reading many keys of one namespace at once (a RocksDB multi-get, one iterator's seeks).

A chunked processor knows a chunk's keys before it processes a record of it (the count's
distinct keys, dedup's ids, a temporal join's (key, time) lookups): reading them in one
call saves a Python call and a buffer-then-backend lookup per key, and for a floor lookup
an iterator per key. The values are exactly what ``get`` and a reversed ``iterate`` give
one by one: the transaction's own writes (a None: deleted) first, then the backend.
"""

from __future__ import annotations

from typing import Any

from lakestate.state.base import Transaction, TransactionState

_MISSING = object()


def get_many(source: Any, namespace: str, keys: list[bytes]) -> list[bytes | None]:
    """``[source.get(namespace, k) for k in keys]``; a transaction whose backend offers
    ``get_many(namespace, keys)`` (RocksDB) reads the keys its buffer lacks in one call.
    Any other source (a read-only view, the test driver's) is read key by key."""
    if type(source) is not Transaction:
        return [source.get(namespace, k) for k in keys]
    # The transaction's internals, read here so that base.py stays what it is: its
    # buffer and its store (dirty reads see other transactions' buffers: key by key).
    store = source._store
    many = getattr(store._backend, "get_many", None)
    if many is None or store._dirty_reads or source.state is not TransactionState.OPEN:
        return [source.get(namespace, k) for k in keys]  # (get raises when not open)
    buffer = source._buffers.get(namespace)
    if not buffer:
        return many(namespace, keys)
    values = [buffer.get(k, _MISSING) for k in keys]
    unread = [i for i, v in enumerate(values) if v is _MISSING]
    if unread:
        for i, v in zip(unread, many(namespace, [keys[i] for i in unread]), strict=True):
            values[i] = v
    return values


def last_below_many(
    source: Any, namespace: str, bounds: list[tuple[bytes, bytes]]
) -> list[tuple[bytes, bytes] | None]:
    """For each ``(low, high)``, the entry with the greatest key in ``[low, high)``, or None:
    ``next(source.iterate(namespace, low, high, True), None)`` per bound. A transaction
    with no writes of its own in ``namespace`` whose backend offers ``last_below_many``
    (RocksDB: one iterator, a seek per bound) reads them all in one call."""
    fast = _backend_reader(source, namespace, "last_below_many")
    if fast is None:
        return [next(source.iterate(namespace, low, high, True), None) for low, high in bounds]
    return fast(namespace, bounds)


def _backend_reader(source: Any, namespace: str, method: str) -> Any:
    """The backend's ``method`` when reading it is what reading ``source`` gives: an open
    transaction without dirty reads and without writes of its own in ``namespace``."""
    if type(source) is not Transaction or source.state is not TransactionState.OPEN:
        return None
    store = source._store
    if store._dirty_reads or source._buffers.get(namespace):
        return None
    return getattr(store._backend, method, None)
