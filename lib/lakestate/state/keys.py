"""Order-preserving byte encoding of keys.

State stores are ordered byte maps, so typed stores encode their keys with
``encode_key``: for two keys of the same type, comparing their encodings as bytes gives
the same answer as comparing the keys themselves. That is what makes range scans,
time indexes ``(timestamp, key)`` and window keys ``(key, window_start)`` work.

Every encoding starts with a one-byte type tag, so keys of different types never collide
(``1``, ``1.0`` and ``True`` are three distinct keys) and sort by type first:

======  ==========  =================================================================
tag     type        body
======  ==========  =================================================================
0x01    None        nothing
0x02    bool        0x00 (False) or 0x01 (True)
0x03    int         8 bytes big-endian, sign bit flipped (signed 64-bit range only)
0x04    float       8 bytes IEEE-754 big-endian: sign bit flipped for positives, all
                    bits flipped for negatives; -0.0 is stored as 0.0, NaN as one NaN
0x05    str         UTF-8, each 0x00 escaped as 0x00 0xFF, terminated by 0x00
0x06    bytes       same escaping and terminator as str
0x07    tuple       the elements' encodings, terminated by 0x00
0x08    dict/list   canonical JSON (sorted keys, compact), escaped like str
0x09    Windowed    the key's encoding, then window start and end as 8 bytes each,
                    big-endian with the sign bit flipped (by key, then start, then end)
======  ==========  =================================================================

Every encoding is self-delimiting, and every byte that may follow a tuple element (a tag
or the tuple terminator) is below 0xFF, so tuples sort element by element, a shorter tuple
before its extensions, and the elements of a prefix encode the start of every tuple that
extends it (``prefix_range``). Dict and list keys compare equal iff their canonical JSON
is equal; their order is that of the JSON text and carries no meaning. A Windowed key is
read from its end (its bounds are its last 16 bytes): a start whose first byte is 0xFF would
otherwise read as an escaped NUL after a str key's terminator. (Nested in a tuple, such a
start, 2**63 - 2**56 ms or later, does not decode.)
"""

from __future__ import annotations

import json
import math
import struct
from typing import Any

from lakestate.errors import SerializationException
from lakestate.records import Window, Windowed
from lakestate.state.serde import a_type, check_json, loads

__all__ = [
    "decode_i64_be",
    "decode_key",
    "decode_u64_be",
    "encode_i64_be",
    "encode_key",
    "encode_u64_be",
    "prefix_range",
]

TAG_NONE = 0x01
TAG_BOOL = 0x02
TAG_INT = 0x03
TAG_FLOAT = 0x04
TAG_STR = 0x05
TAG_BYTES = 0x06
TAG_TUPLE = 0x07
TAG_JSON = 0x08
TAG_WINDOWED = 0x09

_END = 0x00  # terminates str/bytes/json bodies and tuples
_ESCAPE = 0xFF  # follows an escaped 0x00 inside a str/bytes/json body

_I64_MIN = -(2**63)
_I64_MAX = 2**63 - 1
_U64_MAX = 2**64 - 1
_SIGN = 1 << 63
_MASK = _U64_MAX
_DOUBLE = struct.Struct(">d")
_U64 = struct.Struct(">Q")
_NAN_BITS = _U64.unpack(_DOUBLE.pack(math.nan))[0] & ~_SIGN


# -- fixed-width integers ----------------------------------------------------------------


def encode_u64_be(n: int) -> bytes:
    """``n`` (0 <= n < 2**64) as 8 bytes big-endian: byte order is numeric order."""
    if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= _U64_MAX:
        raise SerializationException(f"expected an unsigned 64-bit int, found {n!r}")
    return _U64.pack(n)


def decode_u64_be(raw: bytes) -> int:
    return _U64.unpack(raw)[0]


def encode_i64_be(n: int) -> bytes:
    """``n`` (signed 64-bit) as 8 bytes big-endian with the sign bit flipped.

    Order-preserving (negatives before positives), unlike two's complement: this is the
    encoding to use for timestamps in composite keys. It is *not* ``n.to_bytes(8, "big",
    signed=True)``; decode with ``decode_i64_be``.
    """
    if not isinstance(n, int) or isinstance(n, bool) or not _I64_MIN <= n <= _I64_MAX:
        raise SerializationException(f"expected a signed 64-bit int, found {n!r}")
    return _U64.pack((n + _SIGN) & _MASK)


def decode_i64_be(raw: bytes) -> int:
    return _U64.unpack(raw)[0] - _SIGN


# -- keys ----------------------------------------------------------------------------------


def encode_key(value: Any) -> bytes:
    """The order-preserving encoding of ``value`` (see the module docstring)."""
    # A processor usually reads a key and then writes it, and a windowed aggregation's
    # Windowed key is read, written and then buffered by its suppress node (in a chunk:
    # all reads, then the buffer, then all writes): encodings of immutable objects (str,
    # int, a frozen Windowed of one) are kept by identity. The memo holds each object, so
    # its id is not reused meanwhile; it is emptied when full. (Dict operations are
    # atomic: safe across threads.)
    hit = _memo.get(id(value))
    if hit is not None and hit[0] is value:
        return hit[1]
    t = type(value)
    if t is str:  # the commonest key: what _encode writes, without its dispatch
        raw = encode_str_key(value)
    elif t is Windowed and type(value.key) is str and _plain_window(value.window):
        # A windowed aggregation's key (the same bytes as _encode's, without its dispatch).
        window = value.window
        raw = (
            _WINDOWED_TAG
            + encode_str_key(value.key)
            + _BOUNDS.pack(window.start + _SIGN, window.end + _SIGN)
        )
    else:
        out = bytearray()
        _encode(value, out, "key")
        raw = bytes(out)
    if t in _MEMO_TYPES or (t is Windowed and type(value.key) in _MEMO_TYPES):
        if len(_memo) >= _MEMO_SIZE:
            _memo.clear()
        _memo[id(value)] = (value, raw)
    return raw


def encode_str_key(value: str) -> bytes:
    """``encode_key`` of a str, without the memo or the dispatch: its tag, its UTF-8 with
    NUL escaped as NUL 0xFF, the terminator (for callers encoding many keys seen once)."""
    body = value.encode("utf-8", "surrogatepass").replace(b"\x00", b"\x00\xff")
    return _STR_TAG + body + _END_BYTE


_MEMO_TYPES = frozenset((str, int))
_WINDOWED_TAG = bytes([TAG_WINDOWED])
_BOUNDS = struct.Struct(">QQ")


def _plain_window(window: Window) -> bool:
    """Whether the window's bounds are ints in the signed 64-bit range."""
    start, end = window.start, window.end
    return (
        type(start) is int
        and type(end) is int
        and _I64_MIN <= start <= _I64_MAX
        and _I64_MIN <= end <= _I64_MAX
    )


_MEMO_SIZE = 1 << 16
_STR_TAG = bytes([TAG_STR])
_END_BYTE = bytes([_END])
_memo: dict[int, tuple[Any, bytes]] = {}


def decode_key(raw: bytes) -> Any:
    """The key whose encoding is ``raw``; the inverse of ``encode_key``."""
    if raw[:1] == _STR_TAG and raw.find(b"\x00") == len(raw) - 1:
        # The commonest key, a str without NUL: its body is all that lies between the tag
        # and the terminator.
        try:
            return raw[1:-1].decode("utf-8", "surrogatepass")
        except UnicodeDecodeError as e:
            raise SerializationException(f"malformed key encoding {raw!r}: {e}") from e
    try:
        if raw[:1] == _WINDOWED_TAG and len(raw) >= 18:
            return _decode_windowed(raw)
        value, pos = _decode(raw, 0)
    except SerializationException:
        raise
    except (IndexError, ValueError, struct.error, UnicodeDecodeError) as e:
        raise SerializationException(f"malformed key encoding {raw!r}: {e}") from e
    if pos != len(raw):
        raise SerializationException(f"malformed key encoding {raw!r}: trailing bytes")
    return value


def _decode_windowed(raw: bytes) -> Windowed:
    # A top-level Windowed ends with its two bounds, so the key is what lies before them.
    # Parsing left to right cannot tell a str key's terminator followed by a start whose
    # first byte is 0xFF (a start of 2**63 - 2**56 or more) from an escaped NUL.
    key, pos = _decode(raw[:-16], 1)
    if pos != len(raw) - 16:
        raise SerializationException(f"malformed key encoding {raw!r}: trailing bytes")
    start, end = _BOUNDS.unpack_from(raw, pos)
    return Windowed(key, Window(start - _SIGN, end - _SIGN))


def prefix_range(prefix: tuple) -> tuple[bytes, bytes]:
    """The half-open byte range ``[start, end)`` of every tuple key starting with ``prefix``.

    ``prefix_range((user,))`` covers ``(user,)``, ``(user, 1)``, ``(user, 1, "x")``...;
    ``prefix_range(())`` covers every tuple key.
    """
    if not isinstance(prefix, tuple):
        raise SerializationException(f"a key prefix must be a tuple, found {type(prefix).__name__}")
    out = bytearray([TAG_TUPLE])
    for i, element in enumerate(prefix):
        _encode(element, out, f"prefix[{i}]")
    start = bytes(out)
    # What follows the prefix's elements is a tag or the terminator, all below 0xFF.
    return start, start + bytes([_ESCAPE])


def _encode(value: Any, out: bytearray, path: str) -> None:
    if value is None:
        out.append(TAG_NONE)
    elif isinstance(value, bool):
        out.append(TAG_BOOL)
        out.append(1 if value else 0)
    elif isinstance(value, int):
        if not _I64_MIN <= value <= _I64_MAX:
            raise SerializationException(
                f"{path} is an int out of the signed 64-bit range: {value}"
            )
        out.append(TAG_INT)
        out += _U64.pack((value + _SIGN) & _MASK)
    elif isinstance(value, float):
        out.append(TAG_FLOAT)
        out += _U64.pack(_float_bits(value))
    elif isinstance(value, str):
        out.append(TAG_STR)
        _escape(value.encode("utf-8", "surrogatepass"), out)
    elif isinstance(value, bytes | bytearray | memoryview):
        out.append(TAG_BYTES)
        _escape(bytes(value), out)
    elif isinstance(value, tuple):
        out.append(TAG_TUPLE)
        for i, element in enumerate(value):
            _encode(element, out, f"{path}[{i}]")
        out.append(_END)
    elif isinstance(value, Windowed):
        out.append(TAG_WINDOWED)
        _encode(value.key, out, f"{path}.key")
        for bound in (value.window.start, value.window.end):
            if not isinstance(bound, int) or not _I64_MIN <= bound <= _I64_MAX:
                raise SerializationException(f"{path} has a window bound that is not ms: {bound!r}")
            out += _U64.pack((bound + _SIGN) & _MASK)
    elif isinstance(value, dict | list):
        check_json(value, path)
        text = json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
        out.append(TAG_JSON)
        _escape(text.encode("utf-8", "surrogatepass"), out)
    else:
        raise SerializationException(
            f"{path} is {a_type(value)}, which cannot be a key "
            "(keys are None, bool, int, float, str, bytes, tuples of these, dict, list or Windowed)"
        )


def _float_bits(value: float) -> int:
    if value != value:
        return _NAN_BITS ^ _SIGN  # one canonical NaN, above +inf
    if value == 0.0:
        value = 0.0  # -0.0 == 0.0: one key
    bits = _U64.unpack(_DOUBLE.pack(value))[0]
    return bits ^ _MASK if bits & _SIGN else bits ^ _SIGN


def _float_from_bits(bits: int) -> float:
    bits = bits ^ _SIGN if bits & _SIGN else bits ^ _MASK
    return _DOUBLE.unpack(_U64.pack(bits))[0]


def _escape(body: bytes, out: bytearray) -> None:
    out += body.replace(b"\x00", b"\x00\xff")
    out.append(_END)


def _unescape(raw: bytes, pos: int) -> tuple[bytes, int]:
    """The body starting at ``pos`` and the position after its terminator."""
    parts = []
    while True:
        zero = raw.index(b"\x00", pos)
        parts.append(raw[pos:zero])
        if zero + 1 < len(raw) and raw[zero + 1] == _ESCAPE:
            parts.append(b"\x00")
            pos = zero + 2
        else:
            return b"".join(parts), zero + 1


def _decode(raw: bytes, pos: int) -> tuple[Any, int]:
    tag = raw[pos]
    pos += 1
    if tag == TAG_NONE:
        return None, pos
    if tag == TAG_BOOL:
        flag = raw[pos]
        if flag > 1:
            raise SerializationException(f"malformed key encoding {raw!r}: bad bool")
        return flag == 1, pos + 1
    if tag == TAG_INT:
        return _U64.unpack_from(raw, pos)[0] - _SIGN, pos + 8
    if tag == TAG_FLOAT:
        return _float_from_bits(_U64.unpack_from(raw, pos)[0]), pos + 8
    if tag == TAG_STR:
        body, pos = _unescape(raw, pos)
        return body.decode("utf-8", "surrogatepass"), pos
    if tag == TAG_BYTES:
        return _unescape(raw, pos)
    if tag == TAG_TUPLE:
        elements = []
        while raw[pos] != _END:
            element, pos = _decode(raw, pos)
            elements.append(element)
        return tuple(elements), pos + 1
    if tag == TAG_JSON:
        body, pos = _unescape(raw, pos)
        return loads(body.decode("utf-8", "surrogatepass")), pos
    if tag == TAG_WINDOWED:
        key, pos = _decode(raw, pos)
        start = _U64.unpack_from(raw, pos)[0] - _SIGN
        end = _U64.unpack_from(raw, pos + 8)[0] - _SIGN
        return Windowed(key, Window(start, end)), pos + 16
    raise SerializationException(f"malformed key encoding {raw!r}: unknown type tag {tag:#04x}")
