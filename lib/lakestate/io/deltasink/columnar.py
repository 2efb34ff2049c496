"""A Delta sink's typed rows computed on the batch's columns, for the common shape: a
scalar key and a scalar value (a count's, a sum's), each column's texts all JSON strings
without escapes or all JSON integers (or null).

The row-by-row conversion (``rows.typed_by_rows``) parses every key and value text in
Python (about 4 µs a record); here the texts are sliced or cast by Arrow. The result is the
same table, column for column; any batch outside the shape returns None and goes row by
row, which also names the record of any value that does not fit.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from lakestate.delta_sink import VALUE, DeltaSink

# A JSON string whose text is its value between the quotes (json.dumps escapes every
# non-ASCII or control character, so a text without a backslash needs no decoding).
_PLAIN_STRING = r'^"[^"\\]*"$'
_INTEGER = r"^-?(0|[1-9][0-9]*)$"


def typed_columns(
    sink: DeltaSink, records: pa.Table, known: dict[str, pa.DataType]
) -> tuple[list[pa.Array], list[pa.Field]] | None:
    """The key's and value's columns of ``records`` (``RECORD_SCHEMA``) for ``sink``, in
    the order ``rows.typed_by_rows`` gives them (the ``known`` columns first, then the
    key's, then the value's), or None when the batch is not of the shape above."""
    if sink.key_fields or sink.key == VALUE:
        return None
    key = _scalars(records.column("key"), known.get(sink.key))
    value = _scalars(records.column("value"), known.get(VALUE))
    if key is None or value is None:
        return None
    found = {sink.key: key, VALUE: value}
    names = list(known) + [n for n in found if n not in known]
    arrays, fields = [], []
    for name in names:
        type_ = known.get(name)
        array = found.get(name)
        if array is None:
            array = pa.nulls(records.num_rows, type_)  # a known column this batch lacks
        arrays.append(array)
        fields.append(pa.field(name, type_ or array.type))
    return arrays, fields


def _scalars(texts: pa.ChunkedArray, type_: pa.DataType | None) -> pa.Array | None:
    """``texts`` (JSON, or null) as strings or integers of ``type_`` (or of their own type
    when ``type_`` is None), or None when they are not all one of the two."""
    texts = texts.combine_chunks()
    nulls = pc.or_kleene(pc.is_null(texts), pc.equal(texts, "null"))
    present = pc.if_else(nulls, pa.scalar(None, pa.string()), texts)
    if type_ in (None, pa.string()) and _all(present, _PLAIN_STRING):
        return pc.utf8_slice_codeunits(present, 1, -1)
    if type_ in (None, pa.int64()) and _all(present, _INTEGER):
        try:
            return present.cast(pa.int64())
        except pa.ArrowInvalid:  # beyond int64: the row path names the record
            return None
    return None


def _all(texts: pa.Array, pattern: str) -> bool:
    """Whether every non-null text matches ``pattern`` (and one at least is there)."""
    if texts.null_count == len(texts):
        return False
    return pc.all(pc.match_substring_regex(texts, pattern)).as_py() is True


__all__ = ["typed_columns"]
