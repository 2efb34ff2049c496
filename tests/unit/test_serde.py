"""Value serialization (lakestate.state.serde)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from lakestate.errors import SerializationException
from lakestate.state.serde import check_json, decode_value, encode_value

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
