"""The task phases every runtime goes through: prepare_commit hands over the transaction
(stream time written into it), the offsets and the output; the runtime commits; post_commit
starts the next transaction. The test driver commits locally between them; the engine's
worker stages the prepared writes instead (checkpoint/commit.py commits them later)."""

from __future__ import annotations

from lakestate import App, Materialized, StreamsBuilder
from lakestate.processors.task import Task
from lakestate.records import Record
from lakestate.state.base import TopicPartition
from lakestate.state.constants import META_NAMESPACE, STREAM_TIME_KEY
from lakestate.state.memory import in_memory_store


def _task(store) -> Task:
    b = StreamsBuilder()
    b.stream("in").group_by_key().count(Materialized.as_("counts")).to_stream().to("out")
    app = App("phases", b.build(), {})
    return Task(app.topology, 0, 0, store, app.config, app.name)


def test_prepare_hands_over_state_stream_time_offsets_and_output_and_commits_nothing():
    store = in_memory_store("0_0")
    task = _task(store)
    task.process("in", 0, Record("a", 1, 50))
    task.process("in", 1, Record("a", 1, 40))
    prepared = task.prepare_commit({TopicPartition("in", 0): 2})
    assert [(o.topic, o.record.key, o.record.value) for o in prepared.output] == [
        ("out", "a", 1),
        ("out", "a", 2),
    ]
    writes = {(ns, key): value for ns, key, value in prepared.writes()}
    assert writes[(META_NAMESPACE, STREAM_TIME_KEY)] == (50).to_bytes(8, "big", signed=True)
    assert any(ns == "counts" for ns, _ in writes)
    assert store.committed_offsets() == {} and store.stream_time() is None
    task.complete_commit(prepared)
    task.post_commit()
    assert store.committed_offsets() == {TopicPartition("in", 0): 2}
    assert store.stream_time() == 50
    # The next transaction starts clean: the output was handed over once.
    assert task.prepare_commit({TopicPartition("in", 0): 2}).output == []


def test_commit_is_the_two_phases_with_the_local_commit_between():
    one, two = in_memory_store("a"), in_memory_store("b")
    phased, direct = _task(one), _task(two)
    for task in (phased, direct):
        task.process("in", 0, Record("k", 1, 7))
    prepared = phased.prepare_commit({TopicPartition("in", 0): 1})
    phased.complete_commit(prepared)
    phased.post_commit()
    emitted = direct.commit({TopicPartition("in", 0): 1})
    assert emitted == [(o.topic, o.record) for o in prepared.output]
    assert list(one.iterate("counts")) == list(two.iterate("counts"))
    assert one.committed_offsets() == two.committed_offsets()
