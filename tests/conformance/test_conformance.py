"""Conformance with Kafka Streams itself: the same topologies over the same random inputs on
Kafka's TopologyTestDriver (kafka-streams 4.x from Maven Central, record cache off) and on
lakestate's, compared record by record (key, window, value, timestamp, and which input
caused it), plus the records dropped and whether an error stopped the run. lakestate plays
each scenario twice: one record at a time, and chunked (the inputs piped as lists of random
lengths, each cut where the topic changes, outputs compared per list).

Every scenario of the module runs on Kafka in one JVM (the module fixture); lakestate plays
them one by one. Groups lakestate cannot build yet are skipped with the reason, and run as
soon as lakestate has the DSL they need. LAKESTATE_CONFORMANCE_SEED replays other inputs.

Where lakestate deliberately differs from Kafka:
- spill to disk (``BufferConfig.spill_to_disk_when_full``) is lakestate's own; Kafka plays
  such a buffer as ``unbounded()``, since a buffer that spills instead of emitting early
  or shutting down gives what an unbounded one gives (test_spill_to_disk_emits_as_unbounded).
- left and outer stream-stream joins look for closed windows at every in-order record;
  Kafka at most once per wall-clock interval (1 s by default), which the runner sets to 0
  (``__emit.interval.ms.kstreams.outer.join.spurious.results.fix__``), since the driver's
  wall clock stands still. Their shared stream time is durable in lakestate, in memory in
  Kafka: the same difference as suppress's, below.
- suppress keeps its stream time durably, with the task's state, where Kafka's suppress
  re-observes stream time after a restart. These scenarios never restart a driver, so the
  difference does not show here: tests of restarts belong with lakestate's own tests.
"""

from __future__ import annotations

import os
import random

import lakestate as ls
import pytest
from harness import KafkaRun, as_listed, compare, record_lists, run_kafka, run_lakestate
from random_scenarios import (
    AGGREGATIONS,
    bytes_fk_joins,
    bytes_stores,
    bytes_stores_suppressed,
    bytes_stream_joins,
    cogroups,
    fk_joins,
    grouped_serdes,
    processors,
    serde_flows,
    spilling,
    stateless,
    stream_stream_joins,
    stream_table_joins,
    suppressed,
    table_table_joins,
    unwindowed,
    windowed,
)
from scenario import (
    INPUT_TOPIC,
    OTHER_TOPIC,
    TABLE_TOPIC,
    AggregateParams,
    Buffer,
    CogroupParams,
    Input,
    Outcome,
    OutRecord,
    ProcessorParams,
    Scenario,
    SerdeFlowParams,
    SessionWindowedParams,
    SlidingWindowedParams,
    StreamStreamJoinParams,
    Suppress,
    TableTableJoinParams,
    TimeWindowedParams,
)

SEED = int(os.environ.get("LAKESTATE_CONFORMANCE_SEED", "14"))
PER_GROUP = 25

HAS_WINDOWS = hasattr(ls, "TimeWindows") and hasattr(ls, "SessionWindows")
HAS_SUPPRESS = hasattr(ls, "Suppressed") and hasattr(ls, "BufferConfig")
NO_WINDOWS = pytest.mark.skipif(
    not HAS_WINDOWS, reason="lakestate has no windowed aggregations yet"
)
NO_SUPPRESS = pytest.mark.skipif(
    not (HAS_WINDOWS and HAS_SUPPRESS), reason="lakestate has no suppress (or windows) yet"
)

TIME_WINDOWS = ("tumbling", "hopping")

GROUPS: dict[str, list[Scenario]] = {
    # flat_map, flat_map_values, split, merge and repartition chained at random, with and
    # without a count after them (issue 25).
    "stateless": stateless(SEED, 4 * PER_GROUP),
    **{f"aggregate-{a}": unwindowed(SEED, a, PER_GROUP) for a in AGGREGATIONS},
    # groupBy with Grouped serdes (a named repartition topic) into a store with Kafka's
    # default store serdes (issue 26).
    **{f"grouped_serdes-{a}": grouped_serdes(SEED, a, PER_GROUP) for a in AGGREGATIONS},
    # A count or reduce into a store with Bytes serdes through a Bytes repartition topic,
    # keys empty, non-ASCII and null, values never UTF-8 text (issue 26).
    **{f"bytes_store-{a}": bytes_stores(SEED, a, PER_GROUP) for a in ("count", "reduce")},
    # The same, windowed and suppressed until its windows close: the suppression buffer
    # holds a windowed Bytes key and a Long or Bytes value (issue 26).
    **{
        f"bytes_store-suppressed-{a}": bytes_stores_suppressed(SEED, a, PER_GROUP)
        for a in ("count", "reduce")
    },
    # Stream-stream joins with Bytes StreamJoined serdes: the buffers and the shared waiting
    # store hold bytes on one side or both, keyed by bytes or not (issue 26).
    **{
        f"bytes_stream_join-{how}": bytes_stream_joins(SEED, how, PER_GROUP)
        for how in ("inner", "left", "outer")
    },
    # Serdes carried forward from Consumed, Repartitioned and StreamJoined serdes, fitting
    # the values or not, and a count with no serdes given (issue 26).
    "serde_flow": serde_flows(SEED, 2 * PER_GROUP),
    **{
        f"{shape}-{a}": windowed(SEED, shape, a, PER_GROUP)
        for shape in ("tumbling", "hopping", "sliding", "session")
        for a in AGGREGATIONS
    },
    "suppress-window_closes": suppressed(
        SEED, "suppress-window_closes", "window_closes", TIME_WINDOWS, 2 * PER_GROUP
    ),
    "suppress-window_closes-session": suppressed(
        SEED, "suppress-window_closes-session", "window_closes", ("session",), PER_GROUP
    ),
    "suppress-window_closes-sliding": suppressed(
        SEED, "suppress-window_closes-sliding", "window_closes", ("sliding",), PER_GROUP
    ),
    "suppress-time_limit": suppressed(
        SEED, "suppress-time_limit", "time_limit", ("unwindowed",) + TIME_WINDOWS, 2 * PER_GROUP
    ),
    "suppress-time_limit-session": suppressed(
        SEED, "suppress-time_limit-session", "time_limit", ("session",), PER_GROUP
    ),
    "suppress-time_limit-sliding": suppressed(
        SEED, "suppress-time_limit-sliding", "time_limit", ("sliding",), PER_GROUP
    ),
    "suppress-max_bytes": suppressed(
        SEED, "suppress-max_bytes", "time_limit", ("unwindowed",) + TIME_WINDOWS, PER_GROUP, True
    ),
    "spill_to_disk": spilling(SEED, PER_GROUP),
    # Joins: two input topics, out-of-order timestamps, null keys and values, versioned
    # tables' history retention crossed (issue 15).
    **{
        f"join-{shape}-{v}": joins(SEED, v == "versioned", 2 * PER_GROUP)
        for shape, joins in (
            ("stream_table", stream_table_joins),
            ("table_table", table_table_joins),
        )
        for v in ("unversioned", "versioned")
    },
    # A stream-table join after a key change (issue 26): the join's own repartition topic,
    # typed by Joined's String key serde (Kafka's KStreamImpl.repartitionForJoin).
    "join-stream_table-rekeyed": stream_table_joins(SEED, False, PER_GROUP, rekey=True),
    # Stream-stream joins (issue 25): windows of a few ms with and without grace, before and
    # after set apart, records on both topics out of order, on the windows' and grace's edges.
    **{
        f"join-stream_stream-{how}": stream_stream_joins(SEED, how, 2 * PER_GROUP)
        for how in ("inner", "left", "outer")
    },
    # Cogroups (issue 25, KIP-150): two or three grouped streams, one through a repartition
    # topic, into one aggregate, unwindowed and in every kind of window; each input's node
    # judges lateness by its own stream time, the shared store's retention by all of them.
    **{
        f"cogroup-{windows}": cogroups(SEED, windows, 2 * PER_GROUP)
        for windows in ("none", "tumbling", "hopping", "sliding", "session")
    },
    # Foreign-key table joins (issue 25, KIP-213): foreign keys changed, lost and deleted,
    # foreign rows changed and deleted, null keys and values on both tables.
    **{f"join-fk-{how}": fk_joins(SEED, how, 2 * PER_GROUP) for how in ("inner", "left")},
    # The same with tables keyed by Bytes (issue 26): both, or one of them; keys b"", NUL,
    # 0xff and keys extending them (the subscription store's prefix scans, its combined key).
    **{f"join-fk-bytes-{how}": bytes_fk_joins(SEED, how, PER_GROUP) for how in ("inner", "left")},
    # The Processor API (issue 25): a counter in a key-value store with a stream-time
    # punctuator, by process and process_values, stream time crossing its intervals.
    "processor": processors(SEED, 2 * PER_GROUP),
    # Its store given serdes (issue 26): Bytes keys and values (key order: unsigned bytes),
    # and a String value serde no count fits (the first keyed record fails, at its put).
    **{f"processor-{store}": processors(SEED, PER_GROUP, store) for store in ("bytes", "string")},
    # The smallest case of the session difference below: gap 2, grace 1; stream time 10
    # makes 7 the close boundary, and two records for "a" arrive at 7 after it.
    "session-close-boundary": [
        Scenario(
            "session-close-boundary",
            SessionWindowedParams("count", gap=2, grace=1),
            (Input("b", 1, 10), Input("a", 1, 7), Input("a", 1, 7)),
        )
    ],
}

# Groups where lakestate is known to differ from Kafka 4.4, and why. Strict: once lakestate
# agrees, the test fails until its entry here is removed.
KNOWN_DIFFERENCES = {
    "suppress-max_bytes": (
        "lakestate sizes a buffered record otherwise than Kafka (its serialized key, value, "
        "prior value and record context), so a max_bytes buffer fills at other records"
    ),
}


def _group_param(group: str) -> object:
    marks = []
    if group.startswith(("suppress", "spill")):
        marks.append(NO_SUPPRESS)
    elif not group.startswith(
        (
            "aggregate-",
            "grouped_serdes-",
            "bytes_store-",
            "bytes_stream_join-",
            "serde_flow",
            "join-",
            "stateless",
            "cogroup-none",
        )
    ):
        marks.append(NO_WINDOWS)
    if group in KNOWN_DIFFERENCES:
        marks.append(pytest.mark.xfail(strict=True, reason=KNOWN_DIFFERENCES[group]))
    return pytest.param(group, id=group, marks=marks)


# -- Kafka-side checks: known answers, so the runner is known to play what it should ------

KNOWN: list[tuple[Scenario, Outcome]] = [
    (
        # Tumbling 10 ms, grace 5: [0,10) takes records until stream time reaches 15. Unlike
        # unwindowed aggregations, windowed ones count a null value; a null key is dropped.
        Scenario(
            "known-tumbling-grace",
            TimeWindowedParams("count", size=10, grace=5),
            (
                Input("a", 1, 1),
                Input("a", 1, 14),
                Input("a", 1, 9),
                Input("a", 1, 15),
                Input("a", 1, 9),
                Input(None, 1, 16),
                Input("a", None, 16),
            ),
        ),
        Outcome(
            (
                OutRecord("a", 0, 10, 1, 1, 0),
                OutRecord("a", 10, 20, 1, 14, 1),
                OutRecord("a", 0, 10, 2, 9, 2),
                OutRecord("a", 10, 20, 2, 15, 3),
                OutRecord("a", 10, 20, 3, 16, 6),
            ),
            dropped_records=2,  # the late one, the null key
        ),
    ),
    (
        # A session's end is its last record (inclusive); a record between two sessions
        # merges them: the old sessions are deleted (null values), the merged one written.
        # (The grace keeps [0,0] open: with none, stream time 10 has closed it, and the
        # record at 5 would merge with [10,10] only.)
        Scenario(
            "known-session-merge",
            SessionWindowedParams("aggregate", gap=5, grace=10),
            (Input("a", 1, 0), Input("a", 2, 10), Input("a", 3, 5)),
        ),
        Outcome(
            (
                OutRecord("a", 0, 0, "0+1", 0, 0),
                OutRecord("a", 10, 10, "0+2", 10, 1),
                OutRecord("a", 0, 0, None, 0, 2),
                OutRecord("a", 10, 10, None, 10, 2),
                OutRecord("a", 0, 10, "0&0+1&0+2+3", 10, 2),
            ),
            dropped_records=0,
        ),
    ),
    (
        # A session store kept longer than gap + grace (withRetention) still holds a closed
        # session, and a later record within the gap of it merges it: [0,0] closed when b
        # made stream time 3 (close time 1), a at 2 is not late (its session ends at 2 >= 1)
        # and finds [0,0] in the store. With Kafka's default retention it would start [2,2].
        Scenario(
            "known-session-retention-merges-closed",
            SessionWindowedParams("count", gap=2, grace=0, retention=10),
            (Input("a", 1, 0), Input("b", 1, 3), Input("a", 1, 2)),
        ),
        Outcome(
            (
                OutRecord("a", 0, 0, 1, 0, 0),
                OutRecord("b", 3, 3, 1, 3, 1),
                OutRecord("a", 0, 0, None, 0, 2),
                OutRecord("a", 0, 2, 2, 2, 2),
            ),
            dropped_records=0,
        ),
    ),
    (
        # Final results only: [0,10) is emitted once stream time reaches its end.
        Scenario(
            "known-until-window-closes",
            TimeWindowedParams("count", size=10, suppress=Suppress("window_closes")),
            (Input("a", 1, 1), Input("a", 1, 2), Input("b", 1, 9), Input("a", 1, 10)),
        ),
        Outcome(
            (OutRecord("a", 0, 10, 2, 2, 3), OutRecord("b", 0, 10, 1, 9, 3)),
            dropped_records=0,
        ),
    ),
    (
        # A buffer of one record that shuts down when full: a second key buffered stops the
        # app (a's update at 11 is emitted first: its time limit is up).
        Scenario(
            "known-shut-down-when-full",
            AggregateParams(
                "reduce", Suppress("time_limit", 10, Buffer(max_records=1, when_full="shut_down"))
            ),
            (Input("a", 1, 1), Input("a", 2, 11), Input("b", 3, 12), Input("c", 4, 13)),
        ),
        Outcome(
            (OutRecord("a", None, None, 3, 11, 1),),
            dropped_records=0,
            error="buffer exceeded its max capacity",
        ),
    ),
]

KNOWN.append(
    (
        # KIP-914's example: A at 0 and 5, B at 2, 3, 4, then A at 1 out of order. Both
        # tables versioned: the late A update gives no new result (counted as dropped).
        Scenario(
            "known-versioned-table-join",
            TableTableJoinParams("inner", left_retention=100, right_retention=100),
            (
                Input("k", "a0", 0),
                Input("k", "a5", 5),
                Input("k", "b2", 2, TABLE_TOPIC),
                Input("k", "b3", 3, TABLE_TOPIC),
                Input("k", "b4", 4, TABLE_TOPIC),
                Input("k", "a1", 1),
            ),
            "string",
        ),
        Outcome(
            (
                OutRecord("k", None, None, "a5|b2", 5, 2),
                OutRecord("k", None, None, "a5|b3", 5, 3),
                OutRecord("k", None, None, "a5|b4", 5, 4),
            ),
            dropped_records=1,
        ),
    )
)

KNOWN += [
    (
        # Kafka's KStreamSlidingWindowAggregateTest (skipping expired windows by grace):
        # time difference 10, grace 90. Stream time 200 closes every window ending before
        # 110: the records at 100..105 lose their left windows (one dropped record each),
        # and the one at 15 is dropped whole (its left window would end at 25).
        Scenario(
            "known-sliding-expired-by-grace",
            SlidingWindowedParams("aggregate", time_difference=10, grace=90),
            tuple(
                Input("k", v, t)
                for v, t in (("100", 200), ("0", 100), ("1", 101), ("2", 102), ("3", 103))
                + (("4", 104), ("5", 105), ("6", 15), ("101", 300), ("102", 400))
            ),
            "string",
        ),
        Outcome(
            (
                OutRecord("k", 190, 200, "0+100", 200, 0),
                OutRecord("k", 290, 300, "0+101", 300, 8),
                OutRecord("k", 390, 400, "0+102", 400, 9),
            ),
            dropped_records=7,
        ),
    ),
    (
        # A sliding window's end is inclusive, but suppress emits a window once stream time
        # reaches its end + grace, as for time windows: [0,10] goes out at stream time 10
        # while it is still open, and again with the next record at 10.
        Scenario(
            "known-sliding-until-window-closes",
            SlidingWindowedParams("count", time_difference=10, suppress=Suppress("window_closes")),
            (Input("a", 1, 10), Input("a", 1, 10), Input("a", 1, 11), Input("a", 1, 25)),
        ),
        Outcome(
            (
                OutRecord("a", 0, 10, 1, 10, 0),
                OutRecord("a", 0, 10, 2, 10, 1),
                OutRecord("a", 1, 11, 3, 11, 2),
                OutRecord("a", 11, 21, 1, 11, 3),
                OutRecord("a", 15, 25, 1, 25, 3),
            ),
            dropped_records=0,
        ),
    ),
]

KNOWN.append(
    (
        # A stream-stream outer join, windows of 5 ms without grace: a side's buffer keeps
        # 10 ms behind its stream time, and Kafka's store (segments of 60 s) counts a record
        # as dropped only when its segment has expired: l2 (segment 1) and l4 (segment 2)
        # behind 200000 - 10 (segment 3), r3 far behind r1; l3 (segment 3) is not counted,
        # though too old to join. Unjoined records come out when late or their window closed.
        Scenario(
            "known-stream-stream-outer-join",
            StreamStreamJoinParams("outer", 5, 0),
            (
                Input("a", "l1", 200000),
                Input("a", "l2", 119999),
                Input("a", "l3", 180000),
                Input("a", "l4", 179999),
                Input("a", "r1", 200003, TABLE_TOPIC),
                Input("a", "r2", 199995, TABLE_TOPIC),
                Input("b", "r3", 60000, TABLE_TOPIC),
                Input("b", "l5", 200100),
                Input("c", "r4", 200200, TABLE_TOPIC),
            ),
            "string",
        ),
        Outcome(
            (
                OutRecord("a", None, None, "l2|null", 119999, 1),
                OutRecord("a", None, None, "l3|null", 180000, 2),
                OutRecord("a", None, None, "l4|null", 179999, 3),
                OutRecord("a", None, None, "l1|r1", 200003, 4),
                OutRecord("a", None, None, "l1|r2", 200000, 5),
                OutRecord("b", None, None, "null|r3", 60000, 6),
                OutRecord("b", None, None, "l5|null", 200100, 8),
            ),
            dropped_records=3,
        ),
    )
)

ALL = [s for group in GROUPS.values() for s in group] + [s for s, _ in KNOWN]


@pytest.fixture(scope="module")
def kafka() -> KafkaRun:
    return run_kafka(ALL)


def test_the_kafka_side_is_kafka_streams_4(kafka: KafkaRun) -> None:
    assert kafka.streams_version.startswith("4."), kafka.streams_version


@pytest.mark.parametrize("scenario, expected", KNOWN, ids=[s.name for s, _ in KNOWN])
def test_kafka_gives_the_known_answer(
    kafka: KafkaRun, scenario: Scenario, expected: Outcome
) -> None:
    got = kafka.outcomes[scenario.name]
    assert got.records == expected.records
    assert got.dropped_records == expected.dropped_records
    if expected.error is None:
        assert got.error is None
    else:
        assert got.error is not None and expected.error in got.error


@pytest.mark.parametrize("scenario, expected", KNOWN, ids=[s.name for s, _ in KNOWN])
def test_lakestate_gives_the_known_answer(scenario: Scenario, expected: Outcome) -> None:
    """The known answers, on lakestate (record by record and chunked)."""
    whole_runs = [len(scenario.inputs)]  # each run of one topic's inputs as one list
    for cuts in (None, whole_runs):
        got = run_lakestate(scenario, cuts)
        want = (
            expected if cuts is None else as_listed(expected, record_lists(scenario.inputs, cuts))
        )
        assert got.records == want.records, cuts
        if expected.error is None:
            assert got.error is None
            assert got.dropped_records == expected.dropped_records
        else:
            assert got.error is not None


def _serdes_misfit(scenario: Scenario) -> bool:
    """A serde_flow scenario whose Repartitioned, StreamJoined or Produced value serde does
    not fit the values that reach it; a cogroup whose repartitioned input's Grouped value serde
    does not fit a record that reaches its topic (a key and a value)."""
    params = scenario.params
    if isinstance(params, ProcessorParams):  # a count put in a String store
        return params.store == "string" and any(i.key is not None for i in scenario.inputs)
    if isinstance(params, CogroupParams):
        reaching = any(
            i.topic == OTHER_TOPIC and i.key is not None and i.value is not None
            for i in scenario.inputs
        )
        typed = params.serdes is not None and params.repartition
        return typed and params.serdes != scenario.value_serde and reaching
    if not isinstance(params, SerdeFlowParams):
        return False
    counted = any(
        i.topic == INPUT_TOPIC and i.key is not None and i.value is not None
        for i in scenario.inputs
    )
    if params.produced == "string" and counted:  # the explicit serde, not the carried Long
        return True
    values = "string" if params.step == "to_string" else params.values
    return (params.repartition or values) != values or (params.join or values) != values


def test_kafka_plays_every_random_scenario(kafka: KafkaRun) -> None:
    """Kafka stops a scenario only where a full buffer is to shut down, or where a serde
    given does not fit the values (serde_flow, cogroup), there at a serializer."""
    misfits = 0
    for group in GROUPS.values():
        for scenario in group:
            error = kafka.outcomes[scenario.name].error
            if _serdes_misfit(scenario):
                misfits += 1
                assert error is not None and "not compatible" in error, (scenario.name, error)
            else:
                assert error is None or "exceeded its max capacity" in error, (
                    scenario.name,
                    error,
                )
    assert misfits > 0


@pytest.mark.parametrize("group", [_group_param(g) for g in GROUPS if g != "spill_to_disk"])
def test_lakestate_conforms(kafka: KafkaRun, group: str) -> None:
    _assert_conforms(kafka, GROUPS[group])


@pytest.mark.parametrize("group", [_group_param(g) for g in GROUPS if g != "spill_to_disk"])
def test_lakestate_conforms_in_record_lists(kafka: KafkaRun, group: str) -> None:
    """The driver's chunked mode (``pipe_record_list``, of random lengths): the same records
    as Kafka's one at a time, each output read after its list."""
    _assert_conforms(kafka, GROUPS[group], chunked=True)


@NO_SUPPRESS
def test_spill_to_disk_emits_as_unbounded(kafka: KafkaRun) -> None:
    """Deliberate difference: Kafka has no spill to disk; a lakestate buffer that spills
    when full must give what Kafka's unbounded buffer gives."""
    _assert_conforms(kafka, GROUPS["spill_to_disk"])


def _assert_conforms(kafka: KafkaRun, scenarios: list[Scenario], chunked: bool = False) -> None:
    differences = []
    rng = random.Random(f"{SEED}/lists")
    for scenario in scenarios:
        expected, cuts = kafka.outcomes[scenario.name], None
        if chunked:
            cuts = [rng.choice((1, 2, 3, 5, 8, 40)) for _ in range(4)]
            expected = as_listed(expected, record_lists(scenario.inputs, cuts))
        try:
            outcome = run_lakestate(scenario, cuts)
        except NotImplementedError as exc:
            pytest.skip(str(exc))
        difference = compare(expected, outcome, scenario)
        if difference is not None and cuts is not None:
            difference += f"\n  (piped as lists cut at {cuts})"
        if difference is not None:
            differences.append(difference)
    assert not differences, (
        f"{len(differences)} of {len(scenarios)} scenarios differ from Kafka Streams "
        f"(seed {SEED}); the first:\n{differences[0]}"
    )
