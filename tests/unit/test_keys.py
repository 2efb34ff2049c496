"""Order-preserving key encoding (lakestate.state.keys)."""

from __future__ import annotations

import math

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from lakestate.errors import SerializationException
from lakestate.state.keys import (
    TAG_TUPLE,
    decode_i64_be,
    decode_key,
    decode_u64_be,
    encode_i64_be,
    encode_key,
    encode_u64_be,
    prefix_range,
)

I64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
FLOATS = st.floats(allow_nan=False)
TEXT = st.text()  # includes "\x00", surrogates and astral code points
SCALARS = st.none() | st.booleans() | I64 | FLOATS | TEXT | st.binary()
KEYS = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4).map(tuple), max_leaves=12)


def _sorted_by_encoding(values: list) -> list:
    return sorted(values, key=encode_key)


def _same(a: object, b: object) -> bool:
    """Equal, with -0.0 == 0.0 and NaN == NaN, and of the same type throughout."""
    if type(a) is not type(b):
        return False
    if isinstance(a, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return a == b


# -- order -----------------------------------------------------------------------------


@given(st.lists(I64))
def test_ints_sort_by_encoding(values: list[int]) -> None:
    assert _sorted_by_encoding(values) == sorted(values)


@given(st.lists(FLOATS))
def test_floats_sort_by_encoding(values: list[float]) -> None:
    # -0.0 and 0.0 are the same key: compare the sequences of values, not identities.
    assert _sorted_by_encoding(values) == sorted(values)


@given(st.lists(TEXT))
def test_strings_sort_by_encoding(values: list[str]) -> None:
    assert _sorted_by_encoding(values) == sorted(values)


@given(st.lists(st.binary()))
def test_bytes_sort_by_encoding(values: list[bytes]) -> None:
    assert _sorted_by_encoding(values) == sorted(values)


@given(st.lists(st.tuples(I64, TEXT)))
def test_int_str_tuples_sort_by_encoding(values: list[tuple[int, str]]) -> None:
    assert _sorted_by_encoding(values) == sorted(values)


@given(st.lists(st.lists(TEXT, max_size=4).map(tuple)))
def test_variable_length_str_tuples_sort_by_encoding(values: list[tuple[str, ...]]) -> None:
    # Shorter tuples before their extensions; "a" before "a\x00" before ("a", "").
    assert _sorted_by_encoding(values) == sorted(values)


@given(st.lists(st.tuples(st.tuples(I64, TEXT), st.lists(I64, max_size=3).map(tuple))))
def test_nested_tuples_sort_by_encoding(values: list) -> None:
    assert _sorted_by_encoding(values) == sorted(values)


@given(I64, I64)
def test_encoding_order_is_value_order_for_ints(a: int, b: int) -> None:
    assert (encode_key(a) < encode_key(b)) == (a < b)


def test_edge_values_in_order() -> None:
    ints = [-(2**63), -(2**32), -1, 0, 1, 255, 256, 2**63 - 1]
    assert _sorted_by_encoding(list(reversed(ints))) == ints
    floats = [-math.inf, -1e308, -1.0, -5e-324, 0.0, 5e-324, 1.0, 1e308, math.inf]
    assert _sorted_by_encoding(list(reversed(floats))) == floats
    strings = [
        "",
        "\x00",
        "\x00\x00",
        "\x01",
        "a",
        "a\x00",
        "a\x00b",
        "a\x01",
        "ab",
        "é",
        "\U0001f600",
    ]
    assert _sorted_by_encoding(list(reversed(strings))) == strings
    assert encode_key(False) < encode_key(True)


# -- round trips and equality ----------------------------------------------------------


@given(KEYS)
def test_round_trip(value: object) -> None:
    assert _same(decode_key(encode_key(value)), _zero_normalized(value))


def _zero_normalized(value: object) -> object:
    """-0.0 is stored as 0.0 (they are equal, so must be one key)."""
    if isinstance(value, float) and value == 0.0:
        return 0.0
    if isinstance(value, tuple):
        return tuple(_zero_normalized(v) for v in value)
    return value


@given(KEYS, KEYS)
def test_encoding_is_prefix_free(a: object, b: object) -> None:
    """No key's encoding is a proper prefix of another's, so tuple elements terminate."""
    ea, eb = encode_key(a), encode_key(b)
    if ea != eb:
        assert not eb.startswith(ea) and not ea.startswith(eb)


def test_types_are_distinct_keys() -> None:
    encodings = {encode_key(v) for v in [1, 1.0, True, "1", b"1", (1,), [1], None]}
    assert len(encodings) == 8


def test_float_zero_and_nan_are_canonical() -> None:
    assert encode_key(-0.0) == encode_key(0.0)
    assert encode_key(float("nan")) == encode_key(-float("nan"))
    assert math.isnan(decode_key(encode_key(float("nan"))))
    assert encode_key(math.inf) < encode_key(math.nan)


def test_dict_and_list_keys_are_canonical_json() -> None:
    assert encode_key({"b": 1, "a": [1, 2]}) == encode_key({"a": [1, 2], "b": 1})
    assert decode_key(encode_key({"b": 1, "a": [1, (2, 3)]})) == {"a": [1, [2, 3]], "b": 1}
    assert decode_key(encode_key([1, "x\x00y", None])) == [1, "x\x00y", None]
    assert decode_key(encode_key(("k", {"z": "\x00"}, 3))) == ("k", {"z": "\x00"}, 3)
    assert encode_key({"a": 1}) != encode_key({"a": 2})


def test_bytearray_keys_encode_as_bytes() -> None:
    assert encode_key(bytearray(b"ab")) == encode_key(b"ab")
    assert decode_key(encode_key(bytearray(b"a\x00"))) == b"a\x00"


# -- prefixes ----------------------------------------------------------------------------


@given(
    st.lists(
        st.tuples(
            st.sampled_from([-1, 0, 1]),
            st.sampled_from(["", "a", "a\x00", "b"]),
            st.integers(-3, 3),
        ),
        max_size=30,
    ),
    st.sampled_from([(), (0,), (1, "a"), (1, "a\x00"), (-1, ""), (0, "b", 2)]),
)
def test_prefix_range_covers_exactly_the_extensions(keys: list[tuple], prefix: tuple) -> None:
    start, end = prefix_range(prefix)
    for key in keys:
        inside = start <= encode_key(key) < end
        assert inside == (key[: len(prefix)] == prefix), (key, prefix)


def test_prefix_range_examples() -> None:
    start, end = prefix_range(("user", 1))
    assert start <= encode_key(("user", 1)) < end
    assert start <= encode_key(("user", 1, "x", (2,))) < end
    assert not start <= encode_key(("user", 2)) < end
    assert not start <= encode_key(("user",)) < end
    assert not start <= encode_key(("user", 10)) < end
    assert not start <= encode_key(("user\x00", 1)) < end
    all_start, all_end = prefix_range(())
    assert all_start <= encode_key(()) < all_end
    assert not all_start <= encode_key("user") < all_end


def test_tuple_encoding_starts_with_prefix_start() -> None:
    key = (5, "a", b"b", (1, 2), None, 2.5, True)
    for n in range(len(key) + 1):
        assert encode_key(key).startswith(prefix_range(key[:n])[0])


def test_prefix_must_be_a_tuple() -> None:
    with pytest.raises(SerializationException, match="tuple, found str"):
        prefix_range("user")


# -- fixed-width helpers -----------------------------------------------------------------


@given(I64, I64)
def test_i64_be_is_order_preserving(a: int, b: int) -> None:
    assert len(encode_i64_be(a)) == 8
    assert (encode_i64_be(a) < encode_i64_be(b)) == (a < b)
    assert decode_i64_be(encode_i64_be(a)) == a


@given(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1))
def test_u64_be_is_order_preserving(a: int, b: int) -> None:
    assert (encode_u64_be(a) < encode_u64_be(b)) == (a < b)
    assert decode_u64_be(encode_u64_be(a)) == a


def test_fixed_width_bounds() -> None:
    assert encode_i64_be(0) == b"\x80" + bytes(7)
    assert encode_i64_be(-1) == b"\x7f" + b"\xff" * 7
    for bad in [2**63, -(2**63) - 1, True, 1.0]:
        with pytest.raises(SerializationException):
            encode_i64_be(bad)
    for bad in [-1, 2**64]:
        with pytest.raises(SerializationException):
            encode_u64_be(bad)


# -- errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ({1, 2}, "key is a set"),
        (object(), "key is an object"),
        (2**63, "key is an int out of the signed 64-bit range"),
        (-(2**63) - 1, "out of the signed 64-bit range"),
        (("a", frozenset()), r"key\[1\] is a frozenset"),
        (("a", (1, 2**64)), r"key\[1\]\[1\] is an int out of"),
        ({"a": [1, {2}]}, r"key\['a'\]\[1\] is a set"),
        ({1: "a"}, "dict keys must be str"),
        ([math.nan], r"key\[0\] is nan"),
    ],
)
def test_unencodable_keys_name_the_type(key: object, message: str) -> None:
    with pytest.raises(SerializationException, match=message):
        encode_key(key)


@pytest.mark.parametrize(
    "raw",
    [b"", b"\x09", b"\x03\x00", b"\x05abc", b"\x05\xff\x00", b"\x07\x03", b"\x02\x05", b"\x01\x01"],
)
def test_malformed_encodings_raise(raw: bytes) -> None:
    with pytest.raises(SerializationException, match="malformed key"):
        decode_key(raw)


@given(TEXT)
def test_a_str_key_is_encoded_as_a_tuple_element_is(text: str) -> None:
    # encode_key has a fast path for str keys; tuple elements take the general one.
    assert encode_key((text,)) == bytes([TAG_TUPLE]) + encode_key(text) + b"\x00"


_I64 = st.integers(-(2**63), 2**63 - 1)


@given(st.text(), _I64, _I64)
def test_a_windowed_str_key_encodes_as_the_general_encoder_does(key: str, start: int, end: int):
    """encode_key's shortcut for Windowed(str, Window) gives _encode's bytes (NUL escaped,
    surrogates kept, bounds at the ends of the signed range), and decodes back."""
    from lakestate.records import Window, Windowed
    from lakestate.state import keys

    windowed = Windowed(key, Window(start, end))
    general = bytearray()
    keys._encode(windowed, general, "key")
    assert encode_key(windowed) == bytes(general)
    # A start of 2**63 - 2**56 or more begins with 0xFF, the byte that also marks an
    # escaped NUL right after the key's terminator: decoding still gives the key back.
    assert decode_key(encode_key(Windowed(key, Window(start, end)))) == windowed


@given(st.one_of(st.binary(), st.text(), st.tuples(st.text(), st.integers(-5, 5))), _I64, _I64)
@example(b"", 2**63 - 2**56, 2**63 - 1)
@example("a", 2**63 - 1, 2**63 - 1)
def test_a_windowed_key_decodes_at_every_bound(key: object, start: int, end: int) -> None:
    from lakestate.records import Window, Windowed

    windowed = Windowed(key, Window(start, end))
    assert decode_key(encode_key(windowed)) == windowed


def test_a_windowed_key_with_bounds_out_of_range_is_refused() -> None:
    from lakestate.records import Window, Windowed

    for window in (Window(0, 2**63), Window(-(2**63) - 1, 0), Window(True, 5)):
        if window.start is True:  # a bool bound is the general encoder's business: as before
            assert encode_key(Windowed("k", window)) == encode_key(Windowed("k", Window(1, 5)))
            continue
        with pytest.raises(SerializationException, match="window bound"):
            encode_key(Windowed("k", window))
