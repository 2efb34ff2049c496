"""Argument mistakes fail when the topology is built, naming the operator: a duration is a
``timedelta`` everywhere in the DSL (an int is refused, never taken as milliseconds), and a
user function must take the arguments its operator passes, when Python can tell."""

from __future__ import annotations

import functools
from datetime import timedelta

import lakestate as ls
import pytest
from lakestate import TopologyException

OK = timedelta(milliseconds=10)


def _stream():
    return ls.StreamsBuilder().stream("in")


def _id(k, v):
    return v


# Every duration argument of the DSL: (operator, argument, call with the duration).
DURATIONS = [
    ("TimeWindows.of_size_with_no_grace", "window size", ls.TimeWindows.of_size_with_no_grace),
    (
        "TimeWindows.of_size_and_grace",
        "window size",
        lambda d: ls.TimeWindows.of_size_and_grace(d, OK),
    ),
    (
        "TimeWindows.of_size_and_grace",
        "grace period",
        lambda d: ls.TimeWindows.of_size_and_grace(OK, d),
    ),
    (
        "TimeWindows.advance_by",
        "window advance",
        lambda d: ls.TimeWindows.of_size_with_no_grace(OK).advance_by(d),
    ),
    (
        "SessionWindows.of_inactivity_gap_with_no_grace",
        "inactivity gap",
        ls.SessionWindows.of_inactivity_gap_with_no_grace,
    ),
    (
        "SessionWindows.of_inactivity_gap_and_grace",
        "inactivity gap",
        lambda d: ls.SessionWindows.of_inactivity_gap_and_grace(d, OK),
    ),
    (
        "SessionWindows.of_inactivity_gap_and_grace",
        "grace period",
        lambda d: ls.SessionWindows.of_inactivity_gap_and_grace(OK, d),
    ),
    (
        "Materialized.as_versioned",
        "history retention",
        lambda d: ls.Materialized.as_versioned("s", d),
    ),
    (
        "Suppressed.until_time_limit",
        "duration",
        lambda d: ls.Suppressed.until_time_limit(d, ls.BufferConfig.unbounded()),
    ),
    ("KStream.deduplicate_by_key", "interval", lambda d: _stream().deduplicate_by_key(d)),
    (
        "KStream.deduplicate_by_key_value",
        "interval",
        lambda d: _stream().deduplicate_by_key_value(_id, d),
    ),
    ("KStream.deduplicate", "interval", lambda d: _stream().deduplicate(_id, d)),
]


@pytest.mark.parametrize("operator, argument, call", DURATIONS)
def test_an_int_duration_is_refused_naming_operator_argument_and_what_to_pass(
    operator, argument, call
):
    call(OK)  # a timedelta is accepted
    with pytest.raises(TopologyException) as raised:
        call(10)
    message = str(raised.value)
    assert f"{operator}: {argument} must be a timedelta" in message
    assert "timedelta(milliseconds=10)" in message  # what the int would have to be
    for bad in (1.5, "10s", None, True):
        with pytest.raises(TopologyException, match=f"{argument} must be a timedelta"):
            call(bad)


def test_a_negative_duration_is_refused_naming_the_operator():
    with pytest.raises(TopologyException, match=r"KStream.deduplicate_by_key: interval must be"):
        _stream().deduplicate_by_key(timedelta(seconds=-1))
    with pytest.raises(TopologyException, match=r"Suppressed.until_time_limit: duration must"):
        ls.Suppressed.until_time_limit(timedelta(seconds=-1), ls.BufferConfig.unbounded())


def _fn(arity):
    """A function taking ``arity`` positional arguments."""
    params = ", ".join(f"a{i}" for i in range(arity))
    return eval(f"lambda {params}: None")  # noqa: S307 - a test helper building lambdas


def _windowed(windows):
    return _stream().group_by_key().windowed_by(windows)


def _table():
    return ls.StreamsBuilder().table("t")


def _two_tables():
    b = ls.StreamsBuilder()
    return b.table("t1"), b.table("t2")


def _stream_and_table():
    b = ls.StreamsBuilder()
    return b.stream("in"), b.table("t")


def _stream_and_global():
    b = ls.StreamsBuilder()
    return b.stream("in"), b.global_table("g")


TUMBLING = ls.TimeWindows.of_size_with_no_grace(OK)
SESSIONS = ls.SessionWindows.of_inactivity_gap_with_no_grace(OK)

# Every DSL operator taking user functions: (operator, node prefix, signature, call with
# the function under test in that slot and well-formed functions elsewhere).
FUNCTIONS = [
    ("KStream.filter", "KSTREAM-FILTER-", "predicate(key, value)", lambda f: _stream().filter(f)),
    (
        "KStream.filter_not",
        "KSTREAM-FILTER-",
        "predicate(key, value)",
        lambda f: _stream().filter_not(f),
    ),
    (
        "KStream.map_values",
        "KSTREAM-MAPVALUES-",
        "mapper(value)",
        lambda f: _stream().map_values(f),
    ),
    (
        "KStream.select_key",
        "KSTREAM-KEY-SELECT-",
        "key_selector(key, value)",
        lambda f: _stream().select_key(f),
    ),
    ("KStream.map", "KSTREAM-MAP-", "mapper(key, value)", lambda f: _stream().map(f)),
    ("KStream.peek", "KSTREAM-PEEK-", "action(key, value)", lambda f: _stream().peek(f)),
    (
        "KStream.group_by",
        "KSTREAM-KEY-SELECT-",
        "key_selector(key, value)",
        lambda f: _stream().group_by(f),
    ),
    (
        "KStream.deduplicate_by_key_value",
        "KSTREAM-DEDUPLICATE-",
        "id_selector(key, value)",
        lambda f: _stream().deduplicate_by_key_value(f, OK),
    ),
    (
        "KStream.deduplicate",
        "KSTREAM-DEDUPLICATE-",
        "id_selector(key, value)",
        lambda f: _stream().deduplicate(f, OK),
    ),
    (
        "KStream.join",
        "KSTREAM-JOIN-",
        "joiner(stream_value, table_value)",
        lambda f: (lambda s, t: s.join(t, f))(*_stream_and_table()),
    ),
    (
        "KStream.left_join",
        "KSTREAM-LEFTJOIN-",
        "joiner(stream_value, table_value)",
        lambda f: (lambda s, t: s.left_join(t, f))(*_stream_and_table()),
    ),
    (
        "KStream.join",
        "KSTREAM-JOIN-",
        "key_selector(key, value)",
        lambda f: (lambda s, g: s.join(g, f, _fn(2)))(*_stream_and_global()),
    ),
    (
        "KStream.left_join",
        "KSTREAM-LEFTJOIN-",
        "joiner(stream_value, table_value)",
        lambda f: (lambda s, g: s.left_join(g, _fn(2), f))(*_stream_and_global()),
    ),
    ("KTable.filter", "KTABLE-FILTER-", "predicate(key, value)", lambda f: _table().filter(f)),
    (
        "KTable.filter_not",
        "KTABLE-FILTER-",
        "predicate(key, value)",
        lambda f: _table().filter_not(f),
    ),
    ("KTable.map_values", "KTABLE-MAPVALUES-", "mapper(value)", lambda f: _table().map_values(f)),
    ("KTable.group_by", "KTABLE-SELECT-", "selector(key, value)", lambda f: _table().group_by(f)),
    (
        "KTable.join",
        "KTABLE-JOINTHIS-",
        "joiner(value, other_value)",
        lambda f: (lambda a, b: a.join(b, f))(*_two_tables()),
    ),
    (
        "KTable.left_join",
        "KTABLE-LEFTJOINTHIS-",
        "joiner(value, other_value)",
        lambda f: (lambda a, b: a.left_join(b, f))(*_two_tables()),
    ),
    (
        "KTable.outer_join",
        "KTABLE-OUTERJOINTHIS-",
        "joiner(value, other_value)",
        lambda f: (lambda a, b: a.outer_join(b, f))(*_two_tables()),
    ),
    (
        "KGroupedStream.aggregate",
        "KSTREAM-AGGREGATE-",
        "initializer()",
        lambda f: _stream().group_by_key().aggregate(f, _fn(3)),
    ),
    (
        "KGroupedStream.aggregate",
        "KSTREAM-AGGREGATE-",
        "aggregator(key, value, agg)",
        lambda f: _stream().group_by_key().aggregate(_fn(0), f),
    ),
    (
        "KGroupedStream.reduce",
        "KSTREAM-REDUCE-",
        "reducer(agg, value)",
        lambda f: _stream().group_by_key().reduce(f),
    ),
    (
        "KGroupedTable.aggregate",
        "KTABLE-AGGREGATE-",
        "initializer()",
        lambda f: _table().group_by(_fn(2)).aggregate(f, _fn(3), _fn(3)),
    ),
    (
        "KGroupedTable.aggregate",
        "KTABLE-AGGREGATE-",
        "adder(key, value, agg)",
        lambda f: _table().group_by(_fn(2)).aggregate(_fn(0), f, _fn(3)),
    ),
    (
        "KGroupedTable.aggregate",
        "KTABLE-AGGREGATE-",
        "subtractor(key, value, agg)",
        lambda f: _table().group_by(_fn(2)).aggregate(_fn(0), _fn(3), f),
    ),
    (
        "KGroupedTable.reduce",
        "KTABLE-REDUCE-",
        "adder(agg, value)",
        lambda f: _table().group_by(_fn(2)).reduce(f, _fn(2)),
    ),
    (
        "KGroupedTable.reduce",
        "KTABLE-REDUCE-",
        "subtractor(agg, value)",
        lambda f: _table().group_by(_fn(2)).reduce(_fn(2), f),
    ),
    (
        "TimeWindowedKStream.aggregate",
        "KSTREAM-AGGREGATE-",
        "initializer()",
        lambda f: _windowed(TUMBLING).aggregate(f, _fn(3)),
    ),
    (
        "TimeWindowedKStream.aggregate",
        "KSTREAM-AGGREGATE-",
        "aggregator(key, value, agg)",
        lambda f: _windowed(TUMBLING).aggregate(_fn(0), f),
    ),
    (
        "TimeWindowedKStream.reduce",
        "KSTREAM-REDUCE-",
        "reducer(agg, value)",
        lambda f: _windowed(TUMBLING).reduce(f),
    ),
    (
        "SessionWindowedKStream.aggregate",
        "KSTREAM-AGGREGATE-",
        "initializer()",
        lambda f: _windowed(SESSIONS).aggregate(f, _fn(3), _fn(3)),
    ),
    (
        "SessionWindowedKStream.aggregate",
        "KSTREAM-AGGREGATE-",
        "aggregator(key, value, agg)",
        lambda f: _windowed(SESSIONS).aggregate(_fn(0), f, _fn(3)),
    ),
    (
        "SessionWindowedKStream.aggregate",
        "KSTREAM-AGGREGATE-",
        "merger(key, agg1, agg2)",
        lambda f: _windowed(SESSIONS).aggregate(_fn(0), _fn(3), f),
    ),
    (
        "SessionWindowedKStream.reduce",
        "KSTREAM-REDUCE-",
        "reducer(agg, value)",
        lambda f: _windowed(SESSIONS).reduce(f),
    ),
]


def _arity(signature: str) -> int:
    inside = signature.partition("(")[2].rstrip(")")
    return len(inside.split(", ")) if inside else 0


@pytest.mark.parametrize("operator, prefix, signature, call", FUNCTIONS)
def test_a_function_of_the_wrong_arity_fails_at_build_time(operator, prefix, signature, call):
    n = _arity(signature)
    call(_fn(n))  # the right arity builds
    call(lambda *args: None)
    call(functools.partial(_fn(n + 1), "bound"))
    wrong = [n + 1] + ([n - 1] if n > 0 else [])
    for arity in wrong:
        with pytest.raises(TopologyException) as raised:
            call(_fn(arity))
        message = str(raised.value)
        assert message.startswith(f"node {prefix}"), message
        assert f"{operator} calls {signature}" in message, message
    with pytest.raises(TopologyException, match=rf"node {prefix}\d+: .* must be callable"):
        call(42)


def test_the_error_names_the_function_and_what_to_pass():
    with pytest.raises(TopologyException) as raised:
        _stream().map_values(lambda k, v: v)
    line = test_the_error_names_the_function_and_what_to_pass.__code__.co_firstlineno + 2
    assert str(raised.value) == (
        "node KSTREAM-MAPVALUES-0000000001: KStream.map_values calls mapper(value) with "
        f"1 argument, but mapper is <lambda>(k, v) at test_dsl_arguments.py:{line}: "
        "pass a function of (value)"
    )


def test_functions_without_a_signature_are_accepted():
    # Python cannot tell how many arguments str or max take: accepted, as Kafka would.
    _stream().map_values(str).map_values(len).to("out")
    _stream().group_by_key().reduce(max)
    _stream().group_by_key().aggregate(dict, lambda k, v, agg: agg)


def test_callable_objects_and_methods_are_checked_without_self():
    class Doubler:
        def __call__(self, value):
            return 2 * value

        def key_of(self, key, value):
            return value

    d = Doubler()
    _stream().map_values(d).select_key(d.key_of)
    with pytest.raises(TopologyException, match=r"mapper\(key, value\)"):
        _stream().map(d)
