"""Reading many keys of one namespace at once (a RocksDB multi-get).

A chunked processor knows a chunk's keys before it processes a record of it (the count's
distinct keys, dedup's ids): reading them in one call saves a Python call and a
buffer-then-backend lookup per key. The values are exactly what ``get`` gives one by one:
the transaction's own writes (a None: deleted) first, then the backend.
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
