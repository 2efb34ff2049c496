"""Every Delta ``txn`` app id lakestate writes, in one place: they are the commit
protocol's state (docs/architecture.md, "The commit protocol"). A table holds what its txn
versions say: a commit carrying a txn whose version is already there conflicts, which is
how batches, compactions, rewinds, owners and generations fence each other.

- ``batch(app, task)``: in every table the app writes, version = the task's batch;
- ``compaction(app, task)``: in each changelog, version = the batch compacted through;
- ``rewind(app, task)``: in ``_progress``, version = the batch of the task's latest rewind;
- ``owner(app, task)``: in ``_progress``, version = the task's owner epoch (a generation);
- ``assignment(app)``: in ``_assignment``, version = the latest generation;
- ``topic_append(topic)``: in a topic's log table, version = the table version the append
  numbered its offsets from, plus one (every append carries it, so two at once conflict).
"""

from __future__ import annotations

from lakestate.task_id import TaskId


def batch_prefix(app: str) -> str:
    return f"lakestate/{app}/"


def batch(app: str, task: TaskId | str) -> str:
    """The txn id of ``task``'s batches of ``app`` in every table the app writes."""
    return f"{batch_prefix(app)}{task}"


def compaction_prefix(app: str) -> str:
    return f"lakestate-compaction/{app}/"


def compaction(app: str, task: TaskId | str) -> str:
    """The txn id of ``task``'s compactions in each changelog of ``app`` (not a fence for
    anything but other compactions)."""
    return f"{compaction_prefix(app)}{task}"


def rewind(app: str, task: TaskId | str) -> str:
    """The txn id, in ``_progress``, of the batch of ``task``'s latest rewind row."""
    return f"lakestate-rewind/{app}/{task}"


def owner(app: str, task: TaskId | str) -> str:
    """The txn id, in ``_progress``, of ``task``'s owner epoch."""
    return f"lakestate-owner/{app}/{task}"


def assignment(app: str) -> str:
    """The txn id, in ``_assignment``, of the latest generation."""
    return f"lakestate-assignment/{app}"


def topic_append(topic: str) -> str:
    """The txn id every append to log table ``topic`` carries: two appends numbered from
    one version both carry it, so Delta's conflict check fails the second
    (ConcurrentTransaction), which renumbers from the winner's end offsets."""
    return f"lakestate-append/{topic}"
