"""Reprocessing (seed, "Proposed changes"): "When the record is reprocessed, if its value in
the store has the same offset, then the record is forwarded, otherwise deduplication is
performed. For punctuated records - whose offset value is null - deduplication is always
performed."

Through the driver: a second driver over the same RocksDB state directory starts its
topics at offset 0 again, i.e. it replays records the store has already seen. At the
processor level: a fake context sets the record metadata (offset, topic, or none).
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from lakestate import Deduplicated, StreamsBuilder
from lakestate.processors.dedup import (
    DUPLICATES_DROPPED,
    RECORDS_FORWARDED,
    STORE_SIZE,
    DeduplicateByKey,
)
from lakestate.records import Record, RecordMetadata
from lakestate.state.dedup import DedupEntry, DedupStore, source_tag
from lakestate.state.memory import in_memory_store
from lakestate.testing.driver import TestRecord, TopologyTestDriver

TEN_S = timedelta(seconds=10)


def _topology(operator):
    b = StreamsBuilder()
    s = b.stream("in")
    named = Deduplicated.as_("seen")
    if operator == "by_key":
        s = s.deduplicate_by_key(TEN_S, named)
    elif operator == "by_key_value":
        s = s.deduplicate_by_key_value(lambda k, v: v, TEN_S, named)
    else:
        s = s.deduplicate(lambda k, v: k, TEN_S, named)
    s.to("out")
    return b.build()


@pytest.mark.parametrize("operator", ["by_key", "by_key_value", "deduplicate"])
def test_a_replayed_record_is_forwarded_again(operator, tmp_path):
    config = {"lakestate.state.backend": "rocksdb", "state.dir": str(tmp_path)}
    with TopologyTestDriver(_topology(operator), config) as first:
        source = first.create_input_topic("in")
        source.pipe_input("k", "v", timestamp=20_000)  # offset 0: forwarded, stored
        source.pipe_input("k", "v", timestamp=21_000)  # offset 1: duplicate
        out = first.create_output_topic("out").read_records_to_list()
        assert out == [TestRecord("k", "v", 20_000)]
    # A restart whose input starts over at offset 0 (the store kept its data).
    with TopologyTestDriver(_topology(operator), config) as second:
        assert second.metrics()[STORE_SIZE] == 1  # read from the store, not counted
        source = second.create_input_topic("in")
        source.pipe_input("k", "v", timestamp=20_000)  # offset 0 again: reprocessed
        source.pipe_input("k", "v", timestamp=21_000)  # offset 1: still a duplicate
        out = second.create_output_topic("out").read_records_to_list()
        assert out == [TestRecord("k", "v", 20_000)]
        assert second.metrics()[DUPLICATES_DROPPED] == 1
        assert second.get_state_store("seen").size() == 1


def test_a_different_record_at_the_stored_offset_of_another_topic_is_deduplicated(tmp_path):
    b = StreamsBuilder()
    b.stream(["a", "b"]).deduplicate_by_key(TEN_S).to("out")
    with TopologyTestDriver(b.build()) as driver:
        driver.create_input_topic("a").pipe_input("k", 1, timestamp=0)  # a, offset 0
        driver.create_input_topic("b").pipe_input("k", 2, timestamp=1)  # b, offset 0
        assert driver.create_output_topic("out").read_values_to_list() == [1]


class FakeContext:
    """A processor context for one processor over an in-memory store."""

    def __init__(self) -> None:
        self.state = in_memory_store("task")
        self.txn = self.state.new_transaction()
        self.view = DedupStore("seen", lambda: self.txn)
        self.stream_time = -1
        self.record_metadata: RecordMetadata | None = None
        self.forwarded: list[Record] = []
        self.metrics: dict[str, float] = {}

    def get_state_store(self, name):
        assert name == "seen"
        return self.view

    def forward(self, record, child=None):
        self.forwarded.append(record)

    def metric(self, name, delta=1):
        self.metrics[name] = self.metrics.get(name, 0) + delta

    def set_metric(self, name, value, store=None):
        self.metrics[name] = value

    def run(self, processor, key, ts, offset=None, topic="in") -> bool:
        """Process one record; True if it was forwarded."""
        before = len(self.forwarded)
        self.stream_time = max(self.stream_time, ts)
        self.record_metadata = None if offset is None else RecordMetadata(topic, 0, offset)
        processor.process(Record(key, "v", ts))
        return len(self.forwarded) > before


def _processor():
    ctx = FakeContext()
    processor = DeduplicateByKey("seen", 10_000)
    processor.init(ctx)
    return ctx, processor


def test_records_without_offset_are_always_deduplicated():
    ctx, p = _processor()
    assert ctx.run(p, "k", 1_000, offset=None)  # e.g. forwarded from a punctuation
    assert ctx.view.get("k") == DedupEntry(1_000, None, None)
    assert not ctx.run(p, "k", 1_000, offset=None)  # the same record again: a duplicate
    assert not ctx.run(p, "k", 1_000, offset=0)  # a null stored offset matches no offset


def test_a_record_without_offset_never_matches_a_stored_offset():
    ctx, p = _processor()
    assert ctx.run(p, "k", 1_000, offset=3)
    assert not ctx.run(p, "k", 1_000, offset=None)
    assert ctx.run(p, "k", 1_000, offset=3)  # the stored offset itself: a replay
    assert not ctx.run(p, "k", 1_000, offset=3, topic="other")  # same offset, other topic
    assert ctx.metrics == {STORE_SIZE: 1, RECORDS_FORWARDED: 2, DUPLICATES_DROPPED: 2}


def test_replay_does_not_rewrite_the_entry():
    ctx, p = _processor()
    ctx.run(p, "k", 1_000, offset=3)
    ctx.txn.commit()
    ctx.txn = ctx.state.new_transaction()
    assert ctx.run(p, "k", 1_000, offset=3)
    assert list(ctx.txn.changes()) == []
    assert ctx.view.get("k") == DedupEntry(1_000, 3, source_tag("in"))


def test_a_purged_replay_is_a_new_record():
    ctx, p = _processor()
    ctx.run(p, "k", 1_000, offset=3)
    ctx.run(p, "x", 30_000, offset=4)  # stream time 30s: k @1s purged
    assert ctx.view.get("k") is None
    assert ctx.run(p, "k", 1_000, offset=3)  # late, nothing in the store: forwarded
    assert ctx.view.get("k") is None
