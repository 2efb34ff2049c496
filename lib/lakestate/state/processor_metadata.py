"""Processor metadata: small named integers a processor keeps with its task's committed
state (Kafka's ``ProcessorMetadata``), e.g. a windowed aggregation's observed stream time.

They live in the task store's meta namespace, are written with every commit (with the
offsets and the stream time, in one write batch), travel in the task's progress row, and
are set again when a local store is restored or caught up, so a value survives restarts and
restores and the output does not depend on where batches end.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lakestate.state.constants import META_NAMESPACE

_PREFIX = b"processor_metadata\x00"
_END = b"processor_metadata\x01"


def read(reader: Any) -> dict[str, int]:
    """The metadata ``reader`` (a StateStore, committed only, or a Transaction) holds."""
    return {
        raw_key[len(_PREFIX) :].decode(): int.from_bytes(raw, "big", signed=True)
        for raw_key, raw in reader.iterate(META_NAMESPACE, _PREFIX, _END, False)
    }


def write(txn: Any, metadata: Mapping[str, int]) -> None:
    """Put every entry of ``metadata`` into ``txn``."""
    for key, value in metadata.items():
        txn.put(META_NAMESPACE, _PREFIX + key.encode(), value.to_bytes(8, "big", signed=True))
