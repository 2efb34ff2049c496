"""The value hash a foreign-key join's subscription carries (KIP-213): of the value's
serialized form, so two equal values hash alike whatever their dicts' key order."""

from lakestate.processors.fk_join import value_hash


def test_equal_values_hash_alike_whatever_the_key_order():
    assert value_hash({"user": "u1", "item": 3}) == value_hash({"item": 3, "user": "u1"})
    assert value_hash({"a": {"y": 1, "x": 2}}) == value_hash({"a": {"x": 2, "y": 1}})


def test_different_values_hash_differently_and_none_is_none():
    assert value_hash({"user": "u1"}) != value_hash({"user": "u2"})
    assert value_hash(1) != value_hash("1")
    assert value_hash(None) is None
