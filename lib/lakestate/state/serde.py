"""Value serialization for state stores: compact UTF-8 JSON.

Values are JSON values: str, int, float, bool, None, dict with str keys, list, and tuple
(which comes back as a list). NaN and infinities are rejected, as is anything else, with a
SerializationException naming the type found and where: ``value['a'][2] is a set``.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import orjson

from lakestate.errors import SerializationException

__all__ = [
    "check_json",
    "checked_json_text",
    "decode_value",
    "encode_value",
    "json_text",
    "loads",
]

_ENCODER = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, separators=(",", ":"), check_circular=False
)
# Canonical text (sorted object keys): how keys and values appear in log and state tables.
_CANONICAL = json.JSONEncoder(
    sort_keys=True, ensure_ascii=False, allow_nan=False, separators=(",", ":")
)
_SCALARS = (str, int, type(None))
# Values of these exact types need no walk: they are JSON as they are (bool is an int;
# floats still need the NaN check the encoder makes with allow_nan=False).
_PLAIN = frozenset((str, int, bool, type(None), float))

# orjson writes and reads JSON several times faster than the json module. It is used only
# where its answer is exactly the json module's, so texts and values never depend on which
# one ran: it writes only values made of exact builtin types without floats (it formats
# some floats differently), and whatever it refuses (ints beyond 64 bits, lone surrogates)
# goes to json; what it reads is read again by json when it holds a float and the text a
# long run of digits (orjson reads integers beyond 64 bits as floats), and whatever it
# refuses goes to json.
_UNSORTED = orjson.OPT_PASSTHROUGH_SUBCLASS
_SORTED = _UNSORTED | orjson.OPT_SORT_KEYS
_ORJSON_MAX_DEPTH = 64
_LONG_NUMBER = re.compile(r"\d{19}")


def _orjson_bytes(value: Any, option: int) -> bytes | None:
    """orjson's UTF-8 JSON of a dict, list or tuple when it is byte for byte what the json
    module writes; None when json must write it (or reject it)."""
    if not _float_free(value, 0):
        return None
    try:
        return orjson.dumps(value, option=option)
    except TypeError:  # an int beyond 64 bits, a lone surrogate
        return None


def _float_free(value: Any, depth: int) -> bool:
    """True if ``value`` is made of str, int, bool, None, and dicts with str keys, lists and
    tuples of them, nested less than _ORJSON_MAX_DEPTH deep (which also stops cycles)."""
    t = type(value)
    if t is dict:
        for k in value:
            if type(k) is not str:
                return False
        items = value.values()
    elif t is list or t is tuple:
        items = value
    else:
        return t is str or t is int or t is bool or value is None
    if depth >= _ORJSON_MAX_DEPTH:
        return False
    for v in items:
        tv = type(v)
        if not (tv is str or tv is int or tv is bool or v is None) and not _float_free(
            v, depth + 1
        ):
            return False
    return True


def loads(text: str) -> Any:
    """``json.loads(text)``, faster: the same value, or the same error."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        # json has its own answer: NaN, 1e400 and lone surrogates are values to it.
        return json.loads(text)
    # orjson turns only integers of 19+ digits into floats, so a text without such a run
    # of digits (checked first: a scan in C) or a value without floats reads as json reads.
    if _LONG_NUMBER.search(text) is None or _float_free(value, 0):
        return value
    return json.loads(text)


def encode_value(value: Any) -> bytes:
    """``value`` as compact UTF-8 JSON."""
    try:
        if type(value) is int:  # the commonest stored value (counts, sums): repr is its JSON
            return int.__repr__(value).encode()
        t = type(value)
        if t is dict or t is list or t is tuple:
            data = _orjson_bytes(value, _UNSORTED)
            if data is not None:
                return data
        if t not in _PLAIN:
            check_json(value, "value")
        return _ENCODER.encode(value).encode("utf-8", "surrogatepass")
    except ValueError as e:  # e.g. an int too long to print, a NaN
        check_json(value, "value")  # names what was wrong, where
        raise SerializationException(f"cannot encode value: {e}") from e


def decode_value(raw: bytes) -> Any:
    """The value encoded in ``raw`` by ``encode_value``."""
    try:
        return loads(raw.decode("utf-8", "surrogatepass"))
    except (ValueError, AttributeError) as e:
        raise SerializationException(f"cannot decode value {bytes(raw)[:100]!r}: {e}") from e


def check_json(value: Any, path: str = "value") -> None:
    """Raise SerializationException unless ``value`` is a JSON value (see the module doc)."""
    if not _plainly_valid(value, set()):
        _check(value, path, set())  # finds what is wrong and where (or accepts subclasses)


def _plainly_valid(value: Any, active: set[int]) -> bool:
    """True if ``value`` is a JSON value made of the exact builtin types. A walk without
    paths: most values pass here, and only the others take ``_check``'s slower walk."""
    t = type(value)
    if t is str or t is int or t is bool or value is None:
        return True
    if t is float:
        return math.isfinite(value)
    if t is dict or t is list or t is tuple:
        if id(value) in active:
            return False
        if t is dict:
            for k in value:
                if type(k) is not str:
                    return False
            items = value.values()
        else:
            items = value
        active.add(id(value))
        for v in items:
            tv = type(v)
            if not (tv is str or tv is int or v is None or tv is bool) and not _plainly_valid(
                v, active
            ):
                return False
        active.discard(id(value))
        return True
    return False


def _check(value: Any, path: str, active: set[int]) -> None:
    if isinstance(value, _SCALARS):  # bool is an int
        return
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise SerializationException(f"{path} is {value!r}, which JSON cannot hold")
        return
    if isinstance(value, dict | list | tuple):
        if id(value) in active:
            raise SerializationException(f"{path} contains itself (circular reference)")
        active.add(id(value))
        if isinstance(value, dict):
            for k, v in value.items():
                if not isinstance(k, str):
                    raise SerializationException(
                        f"{path} has a key of type {type(k).__name__} ({k!r}); "
                        "dict keys must be str"
                    )
                _check(v, f"{path}[{k!r}]", active)
        else:
            for i, v in enumerate(value):
                _check(v, f"{path}[{i}]", active)
        active.discard(id(value))
        return
    raise SerializationException(
        f"{path} is {a_type(value)}, which cannot be serialized "
        "(values are str, int, float, bool, None, dict with str keys, list or tuple)"
    )


def a_type(value: Any) -> str:
    """``"a set"``, ``"an object"``: the type of ``value`` for error messages."""
    name = type(value).__name__
    return f"an {name}" if name[:1].lower() in "aeiou" else f"a {name}"


def json_text(value: Any) -> str | None:
    """Canonical JSON text of a value (sorted keys, no spaces), None for None: how keys and
    values appear in log tables and state tables. ``value`` must be a JSON value."""
    if value is None:
        return None
    text = _quick_text(value)
    return _CANONICAL.encode(value) if text is None else text


def _quick_text(value: Any) -> str | None:
    """The canonical text of an int, or of a dict, list or tuple orjson may write (checked
    on the way: only valid values pass); None for every other value."""
    t = type(value)
    if t is int:
        return int.__repr__(value)
    if t is dict or t is list or t is tuple:
        data = _orjson_bytes(value, _SORTED)
        if data is not None:
            return data.decode()
    return None


def checked_json_text(value: Any, path: str = "value") -> str | None:
    """``json_text`` of a value not yet checked: raises SerializationException naming what
    cannot be serialized, and where (``value['a'] is a set``)."""
    if value is None:
        return None
    try:
        text = _quick_text(value)
        if text is not None:
            return text
        if type(value) not in _PLAIN:
            check_json(value, path)
        return _CANONICAL.encode(value)
    except ValueError as e:
        check_json(value, path)
        raise SerializationException(f"cannot encode {path}: {e}") from e
