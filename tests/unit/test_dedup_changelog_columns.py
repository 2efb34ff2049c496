"""The dedup store's changelog rows on columns (state/dedup_columns.py) against the
per-entry path (``is_index_only`` + ``changelog_row``), for the entries a dedup store
writes: any id (str with escapes, NUL, surrogates, non-ASCII; ints, tuples), any entry
(timestamps and offsets up to and past 64 bits, null offsets), tombstones, index entries,
the count and the floor."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import example, given, settings
from hypothesis import strategies as st
from lakestate.state.dedup import (
    COUNT_KEY,
    FLOOR_KEY,
    ID_PREFIX,
    DedupStore,
    _encode_entry,
    _index_key,
)
from lakestate.state.dedup_columns import changelog_columns
from lakestate.state.keys import encode_key

ids = st.one_of(
    st.text(max_size=8),
    st.text(alphabet='ab"\\\x00\x01\n\u00e9\u2028\ud800', max_size=6),
    st.integers(-(2**63), 2**63 - 1),
    st.tuples(st.text(max_size=3), st.integers(-5, 5)),
)
ints = st.one_of(st.integers(-(2**63), 2**63 - 1), st.integers(-(2**70), 2**70))
entries = st.tuples(
    ids,
    st.one_of(st.none(), st.tuples(ints, st.one_of(st.none(), ints), st.one_of(st.none(), ints))),
)


def per_entry(raw_keys, raw_values):
    """What state_rows built entry by entry before: (positions, keys, values, typed)."""
    out = ([], [], [], [])
    for i, (k, v) in enumerate(zip(raw_keys, raw_values, strict=True)):
        if DedupStore.is_index_only(k):
            continue
        for column, x in zip(
            out, (i, k, v, None if v is None else DedupStore.changelog_row(k, v)), strict=True
        ):
            column.append(x)
    return out


def written(items):
    raw_keys, raw_values = [], []
    for the_id, entry in items:
        key = ID_PREFIX + encode_key(the_id)
        raw_keys.append(key)
        if entry is None:
            raw_values.append(None)
        else:
            ts, offset, source = entry
            raw_values.append(_encode_entry(ts, offset, source))
            if -(2**63) <= ts < 2**63:
                raw_keys.append(_index_key(ts, key[1:]))
                raw_values.append(b"")
    raw_keys += [COUNT_KEY, FLOOR_KEY]
    raw_values += [b"%d" % len(items), b"\x80" * 8]
    return raw_keys, raw_values


@settings(max_examples=300, deadline=None)
@given(st.lists(entries, max_size=12, unique_by=lambda e: repr(e[0])))
@example([("id-1", (1700000000000, 5, 7)), ("id-2", None), ("x", (0, None, None))])
def test_columns_are_the_per_entry_rows(items):
    raw_keys, raw_values = written(items)
    expected = per_entry(raw_keys, raw_values)
    got = changelog_columns(raw_keys, raw_values)
    plain = all(_plain(k, v) for k, v in zip(expected[1], expected[2], strict=True))
    assert (got is not None) == plain  # the columns take exactly the plain entries
    if got is None:
        return
    positions, keys, values, typed = got
    assert positions.tolist() == expected[0]
    assert keys.to_pylist() == expected[1]
    assert values.to_pylist() == expected[2]
    assert typed.to_pylist() == expected[3]


def _plain(raw_key: bytes, raw_value: bytes | None) -> bool:
    """An entry the columns take: a str id JSON writes between quotes, plain int fields."""
    try:
        text = raw_key[2:-1].decode("utf-8")
    except UnicodeDecodeError:
        return False
    if raw_key[1:2] != b"\x05" or any(c in text for c in '"\\') or min(text + "\x20") < "\x20":
        return False
    if raw_value is None:
        return True
    row = DedupStore.changelog_row(raw_key, raw_value)
    return abs(row["ts"]) < 10**18 and (row["offset"] is None or -(2**63) <= row["offset"] < 2**63)


def test_the_usual_batch_takes_the_columns():
    items = [(f"id-{i}", (1700000000000 + i, i, 12345)) for i in range(1000)]
    raw_keys, raw_values = written(items)
    got = changelog_columns(raw_keys, raw_values)
    assert got is not None
    assert len(got[0]) == 1000 and pa.types.is_struct(got[3].type)
