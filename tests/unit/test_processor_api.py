"""The Processor API (issue 25 item 6): user processors, their stores, stream-time
punctuation as Kafka's PunctuationQueue fires it, checked against a plain model, and the
same output whatever the batches (a task per batch, as the engine opens them)."""

from __future__ import annotations

from datetime import timedelta

import lakestate as ls
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lakestate.errors import ProcessingException, StreamsException, TopologyException
from lakestate.processors.task import Task
from lakestate.state.base import TopicPartition
from lakestate.state.memory import in_memory_store
from lakestate.testing import TopologyTestDriver


class Counter(ls.Processor):
    """A per-key running count; the punctuator forwards (key, -count) and clears."""

    interval = 10

    def init(self, context: ls.ProcessorContext) -> None:
        self.context = context
        self.store = context.get_state_store("counts")
        self.cancellable = context.schedule(
            timedelta(milliseconds=self.interval), ls.PunctuationType.STREAM_TIME, self.flush
        )

    def process(self, record: ls.Record) -> None:
        if record.key is None:
            return
        count = (self.store.get(record.key) or 0) + 1
        self.store.put(record.key, count)
        self.context.forward(record.with_value(count))

    def flush(self, stream_time: int) -> None:
        for key, count in list(self.store.all()):
            self.context.forward(ls.Record(key, -count, stream_time))
            self.store.delete(key)


def _counter_topology(interval: int = 10, fixed_key: bool = False) -> ls.Topology:
    class Sized(Counter):
        pass

    Sized.interval = interval
    b = ls.StreamsBuilder()
    b.add_state_store(
        ls.Stores.key_value_store_builder(ls.Stores.persistent_key_value_store("counts"))
    )
    stream = b.stream("in")
    (stream.process_values if fixed_key else stream.process)(Sized, "counts").to("out")
    return b.build()


def _model(records: list[tuple[str | None, int]], interval: int) -> list[tuple]:
    """Kafka's semantics, plainly: aligned to 0, checked after each record, fired at most
    once per check with the stream time, then moved past it."""
    out: list[tuple] = []
    counts: dict[str, int] = {}
    stream_time, next_time = -1, 0
    for key, ts in records:
        stream_time = max(stream_time, ts)
        if key is not None:
            counts[key] = counts.get(key, 0) + 1
            out.append((key, counts[key], ts))
        if stream_time >= next_time:
            out += [(k, -counts[k], stream_time) for k in sorted(counts)]
            counts.clear()
            next_time = (stream_time // interval + 1) * interval
    return out


def _driver_output(topology: ls.Topology, records: list[tuple[str | None, int]]) -> list[tuple]:
    with TopologyTestDriver(topology) as driver:
        topic, out = driver.create_input_topic("in"), driver.create_output_topic("out")
        for key, ts in records:
            topic.pipe_input(key, 1, ts)
        return [(r.key, r.value, r.timestamp) for r in out.read_records_to_list()]


RECORDS = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c", None]), st.integers(0, 60)), max_size=30
)


@settings(max_examples=60, deadline=None)
@given(records=RECORDS, interval=st.sampled_from([1, 3, 10]), fixed_key=st.booleans())
def test_punctuation_matches_the_plain_model(records, interval, fixed_key):
    assert _driver_output(_counter_topology(interval, fixed_key), records) == _model(
        records, interval
    )


def _batched_output(topology: ls.Topology, records, cuts: list[int]) -> list[tuple]:
    """The records through a new Task per batch over one store, committed between."""
    store = in_memory_store("0_0")
    out: list[tuple] = []
    start = 0
    for end in [*sorted(set(cuts)), len(records)]:
        task = Task(topology, 0, 0, store, {}, "app")
        for offset in range(start, end):
            key, ts = records[offset]
            task.process("in", offset, ls.Record(key, 1, ts))
        emitted = task.commit({TopicPartition("in", 0): end})
        task.close()
        out += [(r.key, r.value, r.timestamp) for _, r in emitted]
        start = end
    return out


@settings(max_examples=60, deadline=None)
@given(records=RECORDS, interval=st.sampled_from([1, 3, 10]), data=st.data())
def test_output_is_independent_of_where_batches_end(records, interval, data):
    cuts = data.draw(st.lists(st.integers(0, len(records)), max_size=5))
    topology = _counter_topology(interval)
    assert _batched_output(topology, records, cuts) == _model(records, interval)


def test_an_aborted_record_rolls_its_punctuation_back():
    store = in_memory_store("0_0")
    task = Task(_counter_topology(10), 0, 0, store, {}, "app")
    task.process("in", 0, ls.Record("a", 1, 5))  # fires at 5 (the first check), next at 10
    task.commit({TopicPartition("in", 0): 1})
    task.process("in", 1, ls.Record("a", 1, 25))  # fires at 25
    task.abort()
    task.process("in", 1, ls.Record("a", 1, 25))  # fires again: the abort undid it
    emitted = task.commit({TopicPartition("in", 0): 2})
    assert [(r.key, r.value, r.timestamp) for _, r in emitted] == [("a", 1, 25), ("a", -1, 25)]


def test_wall_clock_punctuation_is_refused_with_the_reason():
    class WallClock(ls.Processor):
        def init(self, context):
            context.schedule(timedelta(seconds=1), ls.PunctuationType.WALL_CLOCK_TIME, print)

        def process(self, record):
            pass

    b = ls.StreamsBuilder()
    b.stream("in").process(WallClock)
    with pytest.raises(StreamsException, match="WALL_CLOCK_TIME is not supported.*STREAM_TIME"):
        TopologyTestDriver(b.build())


def test_a_cancelled_schedule_stops_even_from_its_callback():
    fired: list[int] = []

    class Once(ls.Processor):
        def init(self, context):
            self.cancellable = context.schedule(
                timedelta(milliseconds=5), ls.PunctuationType.STREAM_TIME, self.tick
            )

        def tick(self, stream_time):
            fired.append(stream_time)
            self.cancellable.cancel()

        def process(self, record):
            pass

    b = ls.StreamsBuilder()
    b.stream("in").process(Once)
    with TopologyTestDriver(b.build()) as driver:
        topic = driver.create_input_topic("in")
        for ts in (3, 7, 12, 30):
            topic.pipe_input("k", 1, ts)
    assert fired == [3]


def test_stores_must_be_added_and_connected():
    b = ls.StreamsBuilder()
    with pytest.raises(TopologyException, match="store 'nope' was never added.*add_state_store"):
        b.stream("in").process(Counter, "nope")
    b.add_state_store(
        ls.Stores.key_value_store_builder(ls.Stores.persistent_key_value_store("counts"))
    )
    b.stream("other").process(Counter)  # not connected
    with pytest.raises(StreamsException, match="no access to store 'counts'.*process\\(supplier"):
        TopologyTestDriver(b.build())
    with pytest.raises(TopologyException, match="already added"):
        b.add_state_store(
            ls.Stores.key_value_store_builder(ls.Stores.in_memory_key_value_store("counts"))
        )


def test_the_supplier_makes_a_new_processor_per_task():
    b = ls.StreamsBuilder()
    shared = Counter()
    with pytest.raises(TopologyException, match="processor instance; pass its class"):
        b.stream("in").process(shared)
    with pytest.raises(TopologyException, match="same instance twice"):
        b.stream("a").process(lambda: shared)


def test_process_values_keeps_keys_and_process_repartitions():
    class Rekey(ls.Processor):
        def init(self, context):
            self.context = context

        def process(self, record):
            self.context.forward(record.with_key("x"))

    b = ls.StreamsBuilder()
    b.stream("in").process(Rekey).group_by_key().count().to_stream().to("out")
    assert len(b.build().subtopologies) == 2  # a key change: repartitioned
    b = ls.StreamsBuilder()
    b.stream("in").process_values(Rekey).to("out")
    with TopologyTestDriver(b.build()) as driver:
        with pytest.raises(ProcessingException, match="process_values.*forwarded key 'x'"):
            driver.create_input_topic("in").pipe_input("a", 1, 1)


def test_headers_pass_through_a_processor_and_can_be_set():
    class Tag(ls.Processor):
        def init(self, context):
            self.context = context

        def process(self, record):
            self.context.forward(record.with_headers({**(record.headers or {}), "seen": 1}))

    b = ls.StreamsBuilder()
    b.stream("in").process_values(Tag).to("out")
    with TopologyTestDriver(b.build()) as driver:
        driver.create_input_topic("in").pipe_input("k", 1, 5, headers={"origin": "x"})
        (out,) = driver.create_output_topic("out").read_records_to_list()
    assert out.headers == {"origin": "x", "seen": 1}


def test_forward_to_a_named_child_and_describe_shows_node_and_stores():
    class Route(ls.Processor):
        def init(self, context):
            self.context = context

        def process(self, record):
            self.context.forward(record, "evens" if record.value % 2 == 0 else "odds")

    b = ls.StreamsBuilder()
    b.add_state_store(
        ls.Stores.versioned_key_value_store_builder(
            ls.Stores.persistent_versioned_key_value_store("history", timedelta(minutes=1))
        )
    )
    routed = b.stream("in").process(Route, "history", named=ls.Named.as_("route"))
    routed.filter(lambda k, v: True).to("odds-out")
    routed.filter(lambda k, v: True).to("evens-out")
    topology = b.build()
    assert "Processor: route (stores: ['history'])" in topology.describe()
    first, second = topology.nodes["route"].children
    b2 = ls.StreamsBuilder()
    b2.add_state_store(ls.Stores.key_value_store_builder(ls.Stores.persistent_key_value_store("s")))

    class Named(Route):
        def process(self, record):
            self.context.forward(record, first if record.value % 2 else second)

    b2 = ls.StreamsBuilder()
    routed = b2.stream("in").process(Named, named=ls.Named.as_("route"))
    routed.filter(lambda k, v: True).to("odds-out")
    routed.filter(lambda k, v: True).to("evens-out")
    with TopologyTestDriver(b2.build()) as driver:
        topic = driver.create_input_topic("in")
        topic.pipe_input("k", 1, 1)
        topic.pipe_input("k", 2, 2)
        assert driver.create_output_topic("odds-out").read_values_to_list() == [1]
        assert driver.create_output_topic("evens-out").read_values_to_list() == [2]


def test_every_store_builder_gives_its_store_to_processors():
    class Writes(ls.Processor):
        def init(self, context):
            self.kv = context.get_state_store("kv")
            self.ts = context.get_state_store("ts")
            self.versions = context.get_state_store("versions")
            self.windows = context.get_state_store("windows")

        def process(self, record):
            self.kv.put(record.key, record.value)
            self.ts.put(record.key, record.value, record.timestamp)
            self.versions.put(record.key, record.value, record.timestamp)
            self.windows.put(record.key, ls.Window(0, 10), record.value, record.timestamp)

    S = ls.Stores
    b = ls.StreamsBuilder()
    b.add_state_store(S.key_value_store_builder(S.persistent_key_value_store("kv")))
    b.add_state_store(
        S.timestamped_key_value_store_builder(S.persistent_timestamped_key_value_store("ts"))
    )
    b.add_state_store(
        S.versioned_key_value_store_builder(
            S.persistent_versioned_key_value_store("versions", timedelta(seconds=1))
        )
    )
    ten = timedelta(milliseconds=10)
    b.add_state_store(S.window_store_builder(S.persistent_window_store("windows", ten, ten, False)))
    b.stream("in").process(Writes, "kv", "ts", "versions", "windows")
    with TopologyTestDriver(b.build()) as driver:
        topic = driver.create_input_topic("in")
        topic.pipe_input("a", 1, 5)
        topic.pipe_input("a", 2, 3)
        assert driver.get_state_store("kv").get("a") == 2
        assert driver.get_state_store("ts").get_with_timestamp("a") == (2, 3)
        assert driver.get_state_store("versions").get("a").value == 1  # 3 is older than 5
        assert driver.get_state_store("versions").get("a", 4).value == 2
        assert driver.get_state_store("windows").get("a", ls.Window(0, 10)) == 2


class _TumblingWindows(ls.Processor):
    """Puts each record's value in its 10 ms window [t - t % 10, +10) of store "windows"."""

    def init(self, context):
        self.windows = context.get_state_store("windows")

    def process(self, record):
        start = record.timestamp - record.timestamp % 10
        self.windows.put(record.key, ls.Window(start, start + 10), record.value, record.timestamp)


def _window_store_app(retention_ms: int):
    S = ls.Stores
    b = ls.StreamsBuilder()
    supplier = S.persistent_window_store(
        "windows", timedelta(milliseconds=retention_ms), timedelta(milliseconds=10), False
    )
    b.add_state_store(S.window_store_builder(supplier))
    b.stream("in").process(_TumblingWindows, "windows")
    return b.build()


def test_a_processor_window_store_keeps_kafka_s_retention():
    """Size 10, retention 20: a window starting at or before the latest start - 20 is
    expired (Kafka's window store: fetches start after observed stream time - retention)."""
    with TopologyTestDriver(_window_store_app(20)) as driver:
        topic = driver.create_input_topic("in")
        for t in (0, 10):
            topic.pipe_input("a", t, t)
        store = driver.get_state_store("windows")
        assert [start for start, _ in store.fetch("a", 0, 100)] == [0, 10]
        topic.pipe_input("a", 20, 20)  # observed 20: window 0 (0 <= 20 - 20) expires
        assert [start for start, _ in store.fetch("a", 0, 100)] == [10, 20]
        topic.pipe_input("a", 30, 30)  # observed 30: windows starting at or before 10 expire
        assert [start for start, _ in store.fetch("a", 0, 100)] == [20, 30]
        topic.pipe_input("b", 15, 15)  # window 10: expired when it arrives, dropped
        topic.pipe_input("b", 27, 27)  # window 20: live
        assert [(w.key, w.window.start) for w, _ in store.all()] == [
            ("a", 20),
            ("a", 30),
            ("b", 20),
        ]
        topic.pipe_input("a", 45, 45)  # observed 40: window 20 of both keys expires
        assert [(w.key, w.window.start, v) for w, v in store.all()] == [
            ("a", 30, 30),
            ("a", 40, 45),
        ]


def test_a_processor_window_store_holds_windows_of_its_size():
    class Odd(ls.Processor):
        def init(self, context):
            self.windows = context.get_state_store("windows")

        def process(self, record):
            self.windows.put(record.key, ls.Window(0, 5), record.value, record.timestamp)

    S = ls.Stores
    b = ls.StreamsBuilder()
    ten = timedelta(milliseconds=10)
    b.add_state_store(S.window_store_builder(S.persistent_window_store("windows", ten, ten, False)))
    b.stream("in").process(Odd, "windows")
    with (
        TopologyTestDriver(b.build()) as driver,
        pytest.raises(Exception, match="windows of 10 ms"),
    ):
        driver.create_input_topic("in").pipe_input("a", 1, 1)


def test_store_builders_check_their_arguments():
    S = ls.Stores
    with pytest.raises(TopologyException, match="window store supplier"):
        S.window_store_builder(S.persistent_key_value_store("kv"))
    with pytest.raises(TopologyException, match="changelog table"):
        S.key_value_store_builder(S.persistent_key_value_store("kv")).with_logging_disabled()
    with pytest.raises(TopologyException, match="retain_duplicates"):
        S.persistent_window_store("w", timedelta(1), timedelta(1), True)
    with pytest.raises(TopologyException, match="non-empty name"):
        S.persistent_key_value_store("")


def test_describe_app_shows_the_processor_node_and_its_store(tmp_path):
    from lakestate.read.describe import describe_app
    from lakestate.warehouse import Warehouse

    described = describe_app(Warehouse(tmp_path), ls.App("counter", _counter_topology(), {}))
    nodes = {n["name"]: n for n in described["subtopologies"][0]["nodes"]}
    assert nodes["KSTREAM-PROCESSOR-0000000001"]["description"] == (
        "Processor: KSTREAM-PROCESSOR-0000000001 (stores: ['counts'])"
    )
    (store,) = described["stores"]
    assert (store["store"], store["kind"], store["sql_view"]) == (
        "counts",
        "key_value",
        "counter__counts",
    )


@pytest.mark.parametrize(
    ("interval", "message"),
    [(timedelta(0), "must be positive"), (100, "must be a timedelta.*milliseconds=100")],
)
def test_a_bad_interval_is_refused_naming_the_processor(interval, message):
    class Bad(ls.Processor):
        def init(self, context):
            context.schedule(interval, ls.PunctuationType.STREAM_TIME, print)

        def process(self, record):
            pass

    b = ls.StreamsBuilder()
    b.stream("in").process(Bad, named=ls.Named.as_("bad"))
    with pytest.raises(StreamsException, match=f"processor bad: schedule: interval {message}"):
        TopologyTestDriver(b.build())
