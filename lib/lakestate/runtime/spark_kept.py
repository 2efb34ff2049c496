"""A batch's processing output kept on Spark's executors (when they own the state): the
driver collects only the tasks' outcome rows and the rows of the Kafka sinks
(``spark_located.on_driver``); the commit has the executors write the rest as files into
the tables' locations (``checkpoint/executor_writes``), and commits the files' metadata.

The output (each task's Arrow table) is persisted (memory, then the executors' disks), so
that the second job, the file writes, reads the rows the first one made, where they are,
instead of processing the batch again. Should Spark recompute a lost partition, its task
processes the batch again from its committed batch (its staged transaction dropped: its
progress row is not recorded yet, since the files are written before step 2), which gives
the same rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
from lakestate.checkpoint import faults
from lakestate.checkpoint.executor_writes import TableWrite, task_files
from lakestate.io.table_files import DataFile
from pyspark import StorageLevel
from pyspark.rdd import RDD


class KeptFrames:
    """The outputs (RDDs) kept on the executors, released before the next batch keeps its
    own and at the end of the run."""

    def __init__(self) -> None:
        self._kept: list[RDD] = []

    def keep(self, rdd: RDD) -> RDD:
        self.release()
        self._kept.append(rdd.persist(StorageLevel.MEMORY_AND_DISK))
        return self._kept[-1]

    def release(self) -> None:
        for rdd in self._kept:
            rdd.unpersist()
        self._kept.clear()


class LocatedRowsElsewhere:
    """``executor_writes.RowsElsewhere`` on a persisted RDD of the tasks' output tables
    (``spark_located``): the writes run where the cached blocks are."""

    def __init__(self, rdd: RDD) -> None:
        self.rdd = rdd

    def write_files(self, writes: Sequence[TableWrite]) -> dict[str, list[DataFile]]:
        """One Spark job: each task's rows written as files where they are."""
        wanted = [w for w in writes if w.batches]
        if not wanted:
            return {}
        first = min(b for w in wanted for b in w.batches.values())

        def write(tables):
            tables = list(tables)
            if tables:
                files = task_files(pa.concat_tables(tables), wanted)
                faults.kill_executor(first, "in_write")  # tests only: files written, not sent
                yield from files

        files: dict[str, list[DataFile]] = {}
        for point, found in self.rdd.mapPartitions(write).collect():
            files.setdefault(point, []).append(found)
        return files


__all__ = ["KeptFrames", "LocatedRowsElsewhere"]
