"""The last commit of a restore or a catch-up: the restored entries with the committed
batch's offsets, stream time, processor metadata and batch marker, in one write batch, so
that a store holds exactly the state of the offsets it reports (recovery and warmups)."""

from __future__ import annotations

from lakestate.checkpoint import changelog, task_dir
from lakestate.checkpoint.batch import TaskCheckpoint
from lakestate.checkpoint.layout import AppLayout
from lakestate.state import processor_metadata
from lakestate.state.base import StateStore, TopicPartition
from lakestate.task_id import TaskId


def expected_offsets(
    layout: AppLayout, task: TaskId, committed: TaskCheckpoint
) -> dict[TopicPartition, int]:
    return {
        TopicPartition(topic, task.partition): committed.offsets[topic]
        for topic in layout.inputs[task.subtopology]
        if topic in committed.offsets
    }


def commit_restored(
    store: StateStore,
    layout: AppLayout,
    task: TaskId,
    committed: TaskCheckpoint,
    writes,
    deletes: tuple[tuple[str, bytes], ...] = (),
) -> None:
    """Commit ``writes`` (store, key, value) with the committed batch's offsets, stream
    time and batch marker, in one write batch; ``deletes``: (namespace, key) of
    bookkeeping entries gone with it (a piecewise restore's cursor)."""
    with store.new_transaction() as txn:
        for name, entries in writes:
            kind = layout.app.topology.stores[name].kind
            changelog.restore_into(txn, kind, name, entries)
        for namespace, key in deletes:
            txn.delete(namespace, key)
        if committed.stream_time is not None:
            txn.set_stream_time(committed.stream_time)
        processor_metadata.write(txn, committed.processor_metadata)
        namespace, key, value = task_dir.batch_marker(committed.batch_id)
        txn.put(namespace, key, value)
        txn.commit(expected_offsets(layout, task, committed))
