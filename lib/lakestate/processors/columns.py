"""A chunk's records as columns, handed from node to node without a Record per record.

The built-in count gives its output this way (processors/columnar_count.py): ``to_stream``
turns the changes into plain records by dropping a column, and a plain JSON sink writes the
columns as an ``OutputBlock`` (processors/output.py), whose key texts are computed once per
distinct key and whose rows reach the batch's Arrow table without a Python object per
record (runtime/batch_rows.py). Any other node reads ``Chunk.records``, built from the
columns on first use: the same records the per-record path gives.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import repeat
from typing import Any

import numpy as np

from lakestate.records import Change, Record


@dataclass(frozen=True, slots=True)
class Columns:
    """Record ``i`` is ``Record(keys[i], v, timestamps[i])`` (no headers), where ``v`` is
    ``Change(values[i], olds[i])`` when ``olds`` is given, else ``values[i]``.

    ``ids[i]`` numbers record ``i``'s key among the distinct keys ``group_keys`` (first-seen
    order), so that what depends on the key alone is computed once per key. ``values`` is
    an int64 array (every value an int) or a list.
    """

    keys: list[Any]
    ids: np.ndarray
    group_keys: list[Any]
    values: np.ndarray | list[Any]
    olds: list[Any] | None
    timestamps: np.ndarray

    def __len__(self) -> int:
        return len(self.keys)

    def records(self) -> list[Record]:
        """The records these columns stand for."""
        values = self.values.tolist() if isinstance(self.values, np.ndarray) else self.values
        timestamps = self.timestamps.tolist()
        if self.olds is None:
            return list(map(new_record, self.keys, values, timestamps, repeat(None)))
        return list(map(_update, self.keys, values, self.olds, timestamps))

    def new_values(self) -> Columns:
        """What ``to_stream`` makes of changes: plain records carrying the new value."""
        return Columns(self.keys, self.ids, self.group_keys, self.values, None, self.timestamps)


# Records and changes are frozen dataclasses, whose __init__ sets each field through
# object.__setattr__; setting the slots directly builds the same objects in half the time.
_new = object.__new__
_set_key, _set_value = Record.key.__set__, Record.value.__set__  # type: ignore[attr-defined]
_set_ts, _set_headers = Record.timestamp.__set__, Record.headers.__set__  # type: ignore[attr-defined]
_set_new, _set_old = Change.new_value.__set__, Change.old_value.__set__  # type: ignore[attr-defined]
_set_latest = Change.is_latest.__set__  # type: ignore[attr-defined]


def new_record(key: Any, value: Any, timestamp: int, headers: dict[str, Any] | None) -> Record:
    """``Record(key, value, timestamp, headers)``, built in half the time."""
    record = _new(Record)
    _set_key(record, key)
    _set_value(record, value)
    _set_ts(record, timestamp)
    _set_headers(record, headers)
    return record


def _update(key: Any, new: Any, old: Any, timestamp: int) -> Record:
    """``Record(key, Change(new, old), timestamp)``."""
    change = _new(Change)
    _set_new(change, new)
    _set_old(change, old)
    _set_latest(change, True)
    return new_record(key, change, timestamp, None)
