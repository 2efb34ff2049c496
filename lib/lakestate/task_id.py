"""A task's identity: one partition of one sub-topology (Kafka's ``TaskId``)."""

from __future__ import annotations

from typing import NamedTuple


class TaskId(NamedTuple):
    """Sub-topology ``subtopology`` run for partition ``partition``; written ``"1_0"``."""

    subtopology: int
    partition: int

    def __str__(self) -> str:
        return f"{self.subtopology}_{self.partition}"

    @staticmethod
    def parse(text: str) -> TaskId:
        """The task written ``text`` (``"<subtopology>_<partition>"``); ValueError otherwise."""
        sub, sep, partition = str(text).partition("_")
        if not sep or not sub.isdigit() or not partition.isdigit():
            raise ValueError(
                f"not a task id: {text!r} (expected <subtopology>_<partition>, e.g. 0_1)"
            )
        return TaskId(int(sub), int(partition))
