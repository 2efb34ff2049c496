"""Exception handlers and dead letters (processors/exception_handlers.py) through the test
driver and the engine's per-task processing (runtime/task_executor.py): Kafka's config names,
log-and-fail as the default, log-and-continue skipping a failed record as if it never
arrived (state, earlier branches' output, stream time), its dead letter with the error in
Kafka's headers, the metrics; and chunked processing with failures equal to a
straightforward model that processes record by record."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lakestate import Materialized, ProcessingException, StreamsBuilder, StreamsException
from lakestate.processors.exception_handlers import ExceptionHandlers
from lakestate.processors.task import Task
from lakestate.records import Record
from lakestate.runtime import task_executor
from lakestate.state.base import TopicPartition
from lakestate.state.memory import in_memory_store
from lakestate.testing.driver import TopologyTestDriver

KAFKA = "org.apache.kafka.streams.errors."
CONTINUE = {"processing.exception.handler": "log_and_continue", "application.id": "app"}


def _flat(metrics) -> dict:
    return metrics.flat() if hasattr(metrics, "flat") else dict(metrics)


def _check(total):
    if total % 10 == 7:
        raise ValueError(f"total {total} ends in 7")
    return total


def _sums(b: StreamsBuilder) -> None:
    """An earlier branch forwards each record, then a state write, then a node that fails
    on some totals."""
    events = b.stream("in")
    events.to("copy")
    (
        events.group_by_key()
        .aggregate(lambda: 0, lambda k, v, agg: agg + v, Materialized.as_("sums"))
        .to_stream()
        .map_values(_check)
        .to("out")
    )


# -- config ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({}, ("log_and_fail", "log_and_fail", None)),
        (
            {"processing.exception.handler": KAFKA + "LogAndContinueProcessingExceptionHandler"},
            ("log_and_continue", "log_and_fail", "app-dead-letters"),
        ),
        (
            {"deserialization.exception.handler": KAFKA + "LogAndContinueExceptionHandler"},
            ("log_and_fail", "log_and_continue", "app-dead-letters"),
        ),
        (
            {"default.deserialization.exception.handler": "log_and_continue"},
            ("log_and_fail", "log_and_continue", "app-dead-letters"),
        ),
        (
            {
                "processing.exception.handler": KAFKA + "LogAndFailProcessingExceptionHandler",
                "deserialization.exception.handler": KAFKA + "LogAndFailExceptionHandler",
                "errors.dead.letter.queue.topic.name": "dlq",
            },
            ("log_and_fail", "log_and_fail", None),
        ),
        (
            {
                "processing.exception.handler": "log_and_continue",
                **{"errors.dead.letter.queue.topic.name": "dlq"},
            },
            ("log_and_continue", "log_and_fail", "dlq"),
        ),
    ],
)
def test_handlers_take_kafkas_names_and_short_aliases(config, expected):
    h = ExceptionHandlers.from_config(config, "app")
    assert (h.processing, h.deserialization, h.dead_letter_topic) == expected


@pytest.mark.parametrize(
    "config",
    [
        {"processing.exception.handler": "LogAndContinueExceptionHandler"},  # the wrong kind
        {"processing.exception.handler": "skip"},
        {"deserialization.exception.handler": KAFKA + "LogAndContinueProcessingExceptionHandler"},
        {
            "processing.exception.handler": "log_and_continue",
            "errors.dead.letter.queue.topic.name": "",
        },
    ],
)
def test_an_unknown_handler_is_refused_when_the_driver_starts(config):
    b = StreamsBuilder()
    b.stream("in").to("out")
    with pytest.raises(StreamsException) as err:
        TopologyTestDriver(b.build(), config)
    key = next(iter(config)) if len(config) == 1 else "errors.dead.letter.queue.topic.name"
    assert key in str(err.value)


# -- log-and-fail ---------------------------------------------------------------------------


def test_log_and_fail_is_the_default_and_its_error_is_one_line_naming_everything():
    b = StreamsBuilder()
    _sums(b)
    config = {"application.id": "app", "errors.dead.letter.queue.topic.name": "dlq"}
    with TopologyTestDriver(b.build(), config) as d:
        source = d.create_input_topic("in")
        source.pipe_input("a", 3, timestamp=1)
        with pytest.raises(ProcessingException) as err:
            source.pipe_input("a", 4, timestamp=2)  # total 7
        message = str(err.value)
        assert "\n" not in message
        for part in ("KSTREAM-MAPVALUES-", "'in'", "partition 0", "offset 1", "key='a'"):
            assert part in message, message
        assert "ValueError: total 7 ends in 7" in message
        assert err.value.node.startswith("KSTREAM-MAPVALUES-")
        # Nothing of it stays, and nothing goes to the dead-letter topic: the record fails
        # its batch (the engine commits nothing) rather than being skipped.
        assert d.get_key_value_store("sums").get("a") == 3
        assert d.create_output_topic("copy").read_values_to_list() == [3]
        assert d.create_output_topic("dlq").is_empty()
        assert "dead-letter-records" not in d.metrics()


def test_an_exception_message_with_newlines_still_gives_one_line():
    def boom(v):
        raise RuntimeError("first line\nsecond line")

    b = StreamsBuilder()
    b.stream("in").map_values(boom).to("out")
    with TopologyTestDriver(b.build()) as d:
        with pytest.raises(ProcessingException) as err:
            d.create_input_topic("in").pipe_input("k", 1, timestamp=1)
    assert "\n" not in str(err.value)
    assert "first line | second line" in str(err.value)


# -- log-and-continue -----------------------------------------------------------------------


def test_log_and_continue_skips_the_record_as_if_it_never_arrived():
    b = StreamsBuilder()
    _sums(b)
    with TopologyTestDriver(b.build(), CONTINUE) as d:
        source = d.create_input_topic("in")
        for value, ts in ((3, 10), (4, 20), (1, 15)):  # 3+4 = 7 fails
            source.pipe_input("a", value, timestamp=ts)
        # The failed record's state write and its earlier branch's output are gone.
        assert d.get_key_value_store("sums").get("a") == 4
        assert d.create_output_topic("copy").read_values_to_list() == [3, 1]
        assert d.create_output_topic("out").read_values_to_list() == [3, 4]
        [letter] = d.create_output_topic("app-dead-letters").read_records_to_list()
        assert (letter.key, letter.value, letter.timestamp) == ("a", 4, 20)
        h = letter.headers
        assert h["__streams.errors.exception"] == "ValueError"
        assert h["__streams.errors.message"] == "total 7 ends in 7"
        assert "in _check" in h["__streams.errors.stacktrace"]
        assert h["__streams.errors.stacktrace"].endswith("ValueError: total 7 ends in 7")
        assert (h["__streams.errors.topic"], h["__streams.errors.partition"]) == ("in", "0")
        assert h["__streams.errors.offset"] == "1"
        assert h["__streams.errors.node"].startswith("KSTREAM-MAPVALUES-")
        assert (h["__streams.errors.app"], h["__streams.errors.task"]) == ("app", "0_0")
        assert h["__streams.errors.handler"] == "processing"
        metrics = d.metrics()
        assert metrics["dropped-records"] == 1 and metrics["dead-letter-records"] == 1


def test_a_skipped_record_keeps_its_own_headers_and_does_not_move_stream_time():
    # A windowed count drops records too late for stream time: a skipped record with a
    # late timestamp must not have moved it.
    b = StreamsBuilder()
    from lakestate import TimeWindows

    (
        b.stream("in")
        .map_values(lambda v: 1 // v)
        .group_by_key()
        .windowed_by(TimeWindows.of_size_with_no_grace(timedelta(milliseconds=100)))
        .count()
        .to_stream()
        .to("out")
    )
    with TopologyTestDriver(b.build(), CONTINUE) as d:
        source = d.create_input_topic("in")
        source.pipe_input("k", 1, timestamp=10)
        source.pipe_input("k", 0, timestamp=1_000, headers={"trace": "x1"})  # fails
        source.pipe_input("k", 1, timestamp=20)  # not late: stream time is still 10
        out = d.create_output_topic("out").read_records_to_list()
        assert [r.value for r in out] == [1, 2]
        [letter] = d.create_output_topic("app-dead-letters").read_records_to_list()
        assert letter.headers["trace"] == "x1"
        assert letter.headers["__streams.errors.exception"] == "ZeroDivisionError"


def test_a_failure_in_a_repartitioned_sub_topology_names_the_repartition_topic():
    b = StreamsBuilder()
    (
        b.stream("in")
        .select_key(lambda k, v: v % 3)
        .group_by_key()
        .aggregate(lambda: 0, lambda k, v, agg: _check(agg + v), Materialized.as_("sums"))
        .to_stream()
        .to("out")
    )
    with TopologyTestDriver(b.build(), CONTINUE) as d:
        d.create_input_topic("in").pipe_key_value_list([("x", 7), ("y", 2)], timestamp=1)
        assert d.create_output_topic("out").read_key_values_to_list() == [(2, 2)]
        [letter] = d.create_output_topic("app-dead-letters").read_records_to_list()
        assert letter.headers["__streams.errors.topic"].startswith("app-")
        assert letter.headers["__streams.errors.topic"].endswith("-repartition")
        assert (letter.key, letter.value) == (1, 7)


# -- the engine's processing, chunks and all, against a straightforward model ----------------


def _chunky(b: StreamsBuilder) -> None:
    """A chain of chunk-capable processors: a filter, a count (state), a map that fails on
    some counts and values (after the state write), a sink."""
    (
        b.stream("in")
        .filter(lambda k, v: v is None or v % 5 != 0)
        .group_by_key()
        .count(Materialized.as_("store"))
        .to_stream()
        .map_values(lambda c: _check(c + 4))
        .to("out")
    )


def _task(config: dict) -> Task:
    b = StreamsBuilder()
    _chunky(b)
    topology = b.build()
    return Task(topology, 0, 0, in_memory_store("0_0"), config, "app")


def _state(task: Task) -> list:
    return list(task.transaction.iterate("store"))


def _model(rows: list[tuple]) -> tuple:
    """Record by record: a record that fails (or is not JSON) is dropped, each tried against
    the state of the records kept before it; the result is what the kept records give."""
    kept: list[Record] = []
    failed = []
    for offset, (key, text, ts) in enumerate(rows):
        try:
            value = json.loads(text)
        except ValueError:
            failed.append(offset)
            continue
        record = Record(key, value, ts)
        task = _task({})
        try:
            for n, r in enumerate([*kept, record]):
                task.process("in", n, r)
        except ProcessingException:
            failed.append(offset)
            continue
        finally:
            task.close()
        kept.append(record)
    task = _task({})
    for n, r in enumerate(kept):
        task.process("in", n, r)
    outputs = [(o.key_text, o.value_text, o.record.timestamp) for o in task.pending_output_text()]
    return outputs, _state(task), task.stream_time, failed


def _engine(rows: list[tuple], chunk: int, monkeypatch) -> tuple:
    monkeypatch.setattr(task_executor, "CHUNK_RECORDS", chunk)
    task = _task(
        {
            "processing.exception.handler": "log_and_continue",
            "deserialization.exception.handler": "log_and_continue",
        }
    )
    n = len(rows)
    columns = {
        "input_index": [0] * n,
        "topic": ["in"] * n,
        "partition": [0] * n,
        "offset": list(range(n)),
        "timestamp": [ts for _, _, ts in rows],
        "key": [json.dumps(k) for k, _, _ in rows],
        "value": [text for _, text, _ in rows],
        "headers": [None] * n,
    }
    updates = pa.table({c: pa.array([], pa.string()) for c in task_executor.INPUT_COLUMNS[2:]})
    # Batches as the engine runs them: each from where the last one reached (a batch ends
    # early at its second failure), committed before the next.
    sink, letters, start = [], [], 0
    while True:
        rest = {name: values[start:] for name, values in columns.items()}
        reached, processed, _ = task_executor._process_all(task, None, {}, updates, rest)
        assert processed > 0 or start == n
        start += processed
        assert reached == ({"in": start} if processed else {})
        out = task.pending_output_text()
        sink += [(o.key_text, o.value_text, o.record.timestamp) for o in out if o.topic == "out"]
        letters += [o for o in out if o.topic == "app-dead-letters"]
        task.commit({TopicPartition("in", 0): start})
        if start == n:
            break
    failed = [int(json.loads(o.headers_text)["__streams.errors.offset"]) for o in letters]
    assert all(
        (o.key_text, o.value_text, o.record.timestamp) == (json.dumps(rows[f][0]), *rows[f][1:])
        for o, f in zip(letters, failed, strict=True)
    )
    metrics = _flat(task.metrics)
    assert metrics.get("dead-letter-records", 0) == len(failed)
    return sink, _state(task), task.stream_time, failed


ROWS = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", 7]),
        st.one_of(st.integers(0, 12).map(json.dumps), st.just("null"), st.just("{not json")),
        st.integers(0, 60),
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None, database=None)
@given(rows=ROWS, chunk=st.one_of(st.integers(1, 4), st.integers(10, 50)))
def test_chunked_processing_with_failures_equals_the_record_by_record_model(
    rows, chunk, monkeypatch_module
):
    assert _engine(rows, chunk, monkeypatch_module) == _model(rows)


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def test_log_and_fail_in_the_engine_raises_the_one_line_for_bad_json(monkeypatch):
    task = _task({})
    columns = {
        "input_index": [0, 0],
        "topic": ["in", "in"],
        "partition": [0, 0],
        "offset": [40, 41],
        "timestamp": [1, 2],
        "key": ['"a"', '"b"'],
        "value": ["1", "{oops"],
        "headers": [None, None],
    }
    updates = pa.table({c: pa.array([], pa.string()) for c in task_executor.INPUT_COLUMNS[2:]})
    with pytest.raises(StreamsException) as err:
        task_executor._process_all(task, None, {}, updates, columns)
    message = str(err.value)
    assert "\n" not in message
    assert re.search(r"KSTREAM-SOURCE-\d+ could not deserialize", message), message
    for part in ("'in'", "partition 0", "offset 41", "'\"b\"'", "value is not valid JSON"):
        assert part in message, message
    # What to do about it: the deserialization handler's setting, its values, the topic.
    assert message.endswith(
        "; deserialization.exception.handler is log_and_fail, so the batch failed and the "
        "next run retries the record: fix the record or the app, or set "
        "deserialization.exception.handler to log_and_continue (values: log_and_fail, "
        "log_and_continue) to skip failing records to the dead-letter topic "
        "'app-dead-letters' (errors.dead.letter.queue.topic.name)"
    ), message


@pytest.mark.parametrize("chunk", [1, 50])
def test_log_and_fail_in_the_engine_says_which_setting_skips_the_record(chunk, monkeypatch):
    monkeypatch.setattr(task_executor, "CHUNK_RECORDS", chunk)
    task = _task({"errors.dead.letter.queue.topic.name": "bad-in"})
    n = 4  # counts 1..4 of key "a": the third makes 3 + 4 = 7, which fails
    columns = {
        "input_index": [0] * n,
        "topic": ["in"] * n,
        "partition": [0] * n,
        "offset": list(range(n)),
        "timestamp": list(range(n)),
        "key": ['"a"'] * n,
        "value": ["1"] * n,
        "headers": [None] * n,
    }
    updates = pa.table({c: pa.array([], pa.string()) for c in task_executor.INPUT_COLUMNS[2:]})
    with pytest.raises(ProcessingException) as err:
        task_executor._process_all(task, None, {}, updates, columns)
    message = str(err.value)
    assert "\n" not in message and "offset 2" in message, message
    assert "ValueError: total 7 ends in 7; processing.exception.handler is log_and_fail" in message
    assert (
        "set processing.exception.handler to log_and_continue (values: log_and_fail, "
        "log_and_continue) to skip failing records to the dead-letter topic 'bad-in' "
        "(errors.dead.letter.queue.topic.name)"
    ) in message
    assert err.value.node.startswith("KSTREAM-MAPVALUES-")


@settings(max_examples=40, deadline=None, database=None)
@given(values=st.lists(st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 9)), max_size=30))
def test_the_driver_takes_a_list_as_it_takes_the_records_one_by_one(values):
    def run(one_by_one: bool) -> tuple:
        b = StreamsBuilder()
        _chunky(b)
        with TopologyTestDriver(b.build(), CONTINUE) as d:
            source = d.create_input_topic("in")
            if one_by_one:
                for n, (k, v) in enumerate(values):
                    source.pipe_input(k, v, timestamp=n)
            else:
                source.pipe_key_value_list(values, timestamp=0, advance_ms=1)
            letters = d.create_output_topic("app-dead-letters").read_records_to_list()
            return (
                d.create_output_topic("out").read_records_to_list(),
                [
                    (r.key, r.value, r.timestamp, r.headers["__streams.errors.offset"])
                    for r in letters
                ],
                dict(d.get_key_value_store("store").all()),
                d.metrics(),
            )

    assert run(False) == run(True)
