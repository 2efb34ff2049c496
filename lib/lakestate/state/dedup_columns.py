"""A dedup store's changelog rows for many entries at once, computed on Arrow columns.

What ``changelog_columns`` gives is what ``DedupStore.is_index_only`` and
``DedupStore.changelog_row`` give entry by entry (tests/unit/test_dedup_changelog_columns.py):
one row per id entry (a tombstone's typed columns null), none for the time index, the count
or the floor. It covers the usual entries: ids that are str (without a character JSON
escapes: ``"``, ``\\``, controls) and values in the form ``_encode_entry`` writes with plain
ints. For a batch holding any other entry it returns None and the caller goes entry by
entry; the per-entry path is then the one that names what is wrong.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakestate.state.keys import TAG_STR

ID_PREFIX = b"i"  # the dedup store's id entries' prefix (state/dedup.py takes it from here)
# An id entry of a str id whose JSON text is the id between quotes: the tag, the UTF-8
# body (no NUL: a NUL is escaped as NUL 0xFF; nothing JSON escapes), the terminator.
_PLAIN_STR_KEY = rf'^i\x{TAG_STR:02x}[^\x00-\x1f"\\]*\x00$'
_INT = r"(?:0|-?[1-9][0-9]*)"
# ts of at most 18 digits (a signed 64-bit int); an offset as a 64-bit int is checked by
# the cast below.
_ENTRY = rf"^\[(?P<ts>0|-?[1-9][0-9]{{0,17}}),(?P<offset>{_INT}|null),(?:{_INT}|null)\]$"


def changelog_columns(
    raw_keys: list[bytes], raw_values: list[bytes | None]
) -> tuple[np.ndarray, pa.Array, pa.Array, pa.StructArray] | None:
    """For a store's written entries (in write order): the positions of those that get a
    changelog row (the id entries), their raw keys and raw values, and their typed columns
    ``(dedup_id, ts, offset)`` as a struct array (null for a tombstone); None when an id
    entry is not one this path takes (see the module docstring)."""
    keys = pa.array(raw_keys, pa.binary())
    ids = pc.starts_with(keys, ID_PREFIX).to_numpy(zero_copy_only=False)
    positions = np.flatnonzero(ids)
    kept = pa.array(positions)
    keys, values = keys.take(kept), pa.array(raw_values, pa.binary()).take(kept)
    try:
        texts = keys.cast(pa.string())  # fails for bytes that are not UTF-8
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None
    if len(texts) and not pc.all(pc.match_substring_regex(texts, _PLAIN_STR_KEY)).as_py():
        return None
    fields = pc.extract_regex(values, _ENTRY)
    tombstones = values.is_null()
    if pc.any(pc.and_(fields.is_null(), pc.invert(tombstones))).as_py():
        return None  # a value in another form
    try:
        ts = pc.struct_field(fields, [0]).cast(pa.string()).cast(pa.int64())
        offset_text = pc.struct_field(fields, [1]).cast(pa.string())
        offset = pc.if_else(pc.equal(offset_text, "null"), None, offset_text).cast(pa.int64())
    except (pa.ArrowInvalid, pa.ArrowTypeError):  # an offset beyond 64 bits
        return None
    body = pc.utf8_slice_codeunits(texts, 2, -1)
    quote = pa.scalar('"', pa.string())
    dedup_id = pc.binary_join_element_wise(quote, body, quote, pa.scalar("", pa.string()))
    typed = pa.StructArray.from_arrays(
        [dedup_id, ts, offset], names=["dedup_id", "ts", "offset"], mask=tombstones
    )
    return positions, keys, values, typed
