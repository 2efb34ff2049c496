"""Value serialization (lakestate.state.serde)."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from lakestate.errors import SerializationException
from lakestate.state.serde import (
    check_json,
    checked_json_text,
    decode_value,
    encode_value,
    json_text,
    loads,
)

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(JSON)
def test_round_trip(value: object) -> None:
    raw = encode_value(value)
    assert isinstance(raw, bytes)
    assert decode_value(raw) == value


def test_compact_utf8_json() -> None:
    assert encode_value({"a": [1, 2.5, None, True], "é": "ü"}) == (
        '{"a":[1,2.5,null,true],"é":"ü"}'.encode()
    )
    assert encode_value("x") == b'"x"'
    assert encode_value(None) == b"null"


def test_tuples_come_back_as_lists() -> None:
    assert decode_value(encode_value({"t": (1, ("a", None))})) == {"t": [1, ["a", None]]}


def test_types_are_kept() -> None:
    assert decode_value(encode_value(1)) == 1 and type(decode_value(encode_value(1))) is int
    assert type(decode_value(encode_value(1.0))) is float
    assert decode_value(encode_value(True)) is True
    assert decode_value(encode_value(2**80)) == 2**80


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({1, 2}, "value is a set"),
        ({"a": [0, 1, {3}]}, r"value\['a'\]\[2\] is a set"),
        ([b"x"], r"value\[0\] is a bytes"),
        ({"a": object()}, r"value\['a'\] is an object"),
        (math.nan, "value is nan"),
        ({"x": [math.inf]}, r"value\['x'\]\[0\] is inf"),
        (-math.inf, "value is -inf"),
        ({1: "a"}, "key of type int.*dict keys must be str"),
        ({"a": {(1, 2): "b"}}, r"value\['a'\] has a key of type tuple"),
    ],
)
def test_unencodable_values_name_type_and_path(value: object, message: str) -> None:
    with pytest.raises(SerializationException, match=message):
        encode_value(value)


def test_circular_values_are_rejected() -> None:
    cycle: list = [1]
    cycle.append(cycle)
    with pytest.raises(SerializationException, match="circular"):
        encode_value({"a": cycle})
    shared = [1]
    assert decode_value(encode_value([shared, shared])) == [[1], [1]]  # sharing is fine


def test_check_json_with_custom_path() -> None:
    with pytest.raises(SerializationException, match=r"row\['b'\] is a set"):
        check_json({"b": set()}, "row")


@pytest.mark.parametrize("raw", [b"", b"{", b"\xff", b"NaN-ish"])
def test_malformed_values_raise(raw: bytes) -> None:
    with pytest.raises(SerializationException, match="cannot decode"):
        decode_value(raw)


# -- orjson where it agrees with the json module, the json module elsewhere -------------------

_JSON_CANONICAL = json.JSONEncoder(
    sort_keys=True, ensure_ascii=False, allow_nan=False, separators=(",", ":")
)
_JSON_COMPACT = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
# Where orjson and json disagree: ints beyond 64 bits, tiny floats, lone surrogates.
EDGY = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=2**62, max_value=2**70)
    | st.integers(min_value=-(2**70), max_value=-(2**62))
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.floats(min_value=1e-30, max_value=1e-4)
    | st.text()
    | st.text(alphabet=st.characters(min_codepoint=0xD7F0, max_codepoint=0xE010)),
    lambda inner: st.lists(inner, max_size=4)
    | st.tuples(inner, inner)
    | st.dictionaries(st.text(max_size=3), inner, max_size=4),
    max_leaves=20,
)


@given(EDGY)
def test_texts_are_exactly_the_json_modules(value: object) -> None:
    assert checked_json_text(value) == (None if value is None else _JSON_CANONICAL.encode(value))
    if value is not None:
        assert json_text(value) == _JSON_CANONICAL.encode(value)
    assert encode_value(value) == _JSON_COMPACT.encode(value).encode("utf-8", "surrogatepass")


def _same(a: object, b: object) -> bool:
    """Equal, with the same types all the way down (1 is not 1.0 here)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return a == b


@given(EDGY)
def test_loads_reads_what_json_reads(value: object) -> None:
    text = json.dumps(value, ensure_ascii=False)
    assert _same(loads(text), json.loads(text))


@pytest.mark.parametrize(
    "text",
    [
        "18446744073709551616",  # beyond 64 bits: orjson would read a float
        "-9223372036854775809",
        "[1,-9223372036854775809]",
        '{"a":12345678901234567890123}',
        "NaN",  # json reads these; orjson refuses them
        "[Infinity,-Infinity]",
        "1e400",
        '"\\ud800"',
        '{"a":1,"a":2}',
        "-0.0",
        " [1, 2.50] ",
    ],
)
def test_loads_edge_texts(text: str) -> None:
    assert _same(loads(text), json.loads(text))


@pytest.mark.parametrize("text", ["", "[1,", "{'a': 1}", "01", "nul"])
def test_loads_errors_as_json_does(text: str) -> None:
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    with pytest.raises(json.JSONDecodeError):
        loads(text)


def test_texts_reject_what_orjson_would_write_differently() -> None:
    import datetime
    import enum
    import uuid

    class Color(enum.Enum):
        RED = 1

    for bad in (uuid.uuid4(), Color.RED, datetime.date(2024, 1, 1)):
        with pytest.raises(SerializationException):
            checked_json_text({"a": bad})
        with pytest.raises(SerializationException):
            encode_value([bad])
    with pytest.raises(SerializationException, match="value\\['x'\\]"):
        checked_json_text({"x": float("nan")})
