"""A batch's processing output kept on Spark's executors (when they own the state): the
driver collects only the tasks' outcome rows and the rows of the Kafka sinks; the commit has the executors write the rest as files into the tables' locations
(``checkpoint/executor_writes``), and commits the files' metadata.

The processing frame is persisted (memory, then the executors' disks), so that the second
job, the file writes, reads the rows the first one made instead of processing the batch
again. Should Spark recompute a lost partition, its task processes the batch again from
its committed batch (its staged transaction dropped: its progress row is not recorded yet,
since the files are written before step 2), which gives the same rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
from lakestate.checkpoint.executor_writes import TableWrite, task_files
from lakestate.io.table_files import DataFile
from lakestate.runtime.outcome import outcomes_of
from lakestate.runtime.transport import BatchOutput
from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

#: The rows the file writes hand back: one per file.
FILES_SCHEMA = pa.schema(
    [
        ("point", pa.string()),
        ("path", pa.string()),
        ("size", pa.int64()),
        ("rows", pa.int64()),
        ("partitions", pa.string()),
        ("stats", pa.string()),
        ("schema", pa.binary()),
    ]
)
_FILES_DDL = (
    "point string, path string, size bigint, rows bigint, partitions string, stats string, "
    "schema binary"
)


class KeptFrames:
    """The frames kept on the executors, released before the next batch keeps its own
    and at the end of the run."""

    def __init__(self) -> None:
        self._frames: list[DataFrame] = []

    def keep(self, frame: DataFrame) -> DataFrame:
        self.release()
        self._frames.append(frame.persist(StorageLevel.MEMORY_AND_DISK))
        return self._frames[-1]

    def release(self) -> None:
        for frame in self._frames:
            frame.unpersist()
        self._frames.clear()


class SparkRowsElsewhere:
    """``executor_writes.RowsElsewhere`` on a persisted processing frame."""

    def __init__(self, frame: DataFrame) -> None:
        self.frame = frame

    def write_files(self, writes: Sequence[TableWrite]) -> dict[str, list[DataFile]]:
        """One Spark job: each task's rows written as files where they are."""
        wanted = [w for w in writes if w.batches]
        if not wanted:
            return {}
        # Without the task rows and their outcome struct: Spark converts a cached nested
        # column to Arrow row by row, which took 15-34 s for 400k rows that carry it (null)
        # against 1.7 s without it.
        columns = [c for c in self.frame.columns if c not in ("outcome", "seq")]
        kept = self.frame.where(F.col("kind") != "task").select(*columns)
        rows = kept.mapInArrow(_write_function(wanted), _FILES_DDL).toArrow()
        files: dict[str, list[DataFile]] = {}
        for row in rows.to_pylist():
            point = row.pop("point")
            files.setdefault(point, []).append(DataFile(**row))
        return files


def kept_on_executors(frame: DataFrame, kept: frozenset[str], frames: KeptFrames) -> BatchOutput:
    """The batch's output with the rows of the ``kept`` topics and the changelogs left on
    the executors (``frame`` persisted in ``frames``)."""
    frame = frames.keep(frame)
    on_driver = (F.col("kind") == "task") | (
        (F.col("kind") == "out") & ~F.col("topic").isin(sorted(kept))
    )
    rows = frame.where(on_driver).toArrow()
    return BatchOutput(rows, outcomes_of(rows), SparkRowsElsewhere(frame))


def _write_function(writes: list[TableWrite]):
    """The function for mapInArrow (a plain function: Spark inspects it)."""

    def write(batches):
        batches = list(batches)
        if not batches:
            return
        written = task_files(pa.Table.from_batches(batches), writes)
        if written:
            table = pa.Table.from_pylist(
                [{"point": point, **vars(f)} for point, f in written], schema=FILES_SCHEMA
            )
            yield from table.to_batches()

    return write


__all__ = ["KeptFrames", "SparkRowsElsewhere", "kept_on_executors"]
