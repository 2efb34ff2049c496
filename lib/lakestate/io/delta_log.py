"""A Delta table's commit files, read without Spark.

Lakestate's own writers put what a reader needs into their commits' metadata (Delta
``commitInfo.userMetadata``, JSON), so that a reader can take it from the newest commit
files (``_delta_log/<20-digit version>.json``, the Delta protocol's names) instead of
running a Spark job over the table. ``local_log``/``versions``/``read_commit`` read a local
table's files (the batch path's fast reads); ``commit_versions``/``commit_of`` read any
table's, on a local disk or a bucket (the rewind's history walks).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, NamedTuple

from lakestate import object_store
from lakestate.errors import StreamsException


class Commit(NamedTuple):
    user_metadata: str | None  # commitInfo.userMetadata as written
    changes_data: bool  # adds, removes or change-data files with dataChange
    txns: tuple[tuple[str, int], ...] = ()  # its txn actions: (appId, version)

    def metadata_value(self, key: str) -> Any:
        """The value under ``key`` of the metadata's JSON object, or None."""
        if not self.user_metadata:
            return None
        try:
            return json.loads(self.user_metadata).get(key)
        except (ValueError, AttributeError):
            return None


def local_log(path: str) -> Path | None:
    """The ``_delta_log`` folder of the table at ``path`` on the local file system, else None."""
    if "://" in path and not path.startswith("file://"):
        return None
    return Path(path.removeprefix("file://")) / "_delta_log"


def versions(log: Path) -> list[int]:
    """The table's commit versions with a commit file, newest first."""
    try:
        names = os.listdir(log)
    except OSError:
        return []
    return _newest_first(names)


def _newest_first(names: list[str]) -> list[int]:
    return sorted(
        (int(n[:20]) for n in names if len(n) == 25 and n.endswith(".json") and n[:20].isdigit()),
        reverse=True,
    )


def read_commit(log: Path, version: int) -> Commit | None:
    """The commit of ``version``, or None if its file is not there (none yet, or cleaned up)."""
    try:
        text = (log / f"{version:020d}.json").read_text(encoding="utf-8")
    except OSError:
        return None
    return _parse(text)


def _remote_log(path: str) -> str:
    """The ``bucket/key`` of a remote table's ``_delta_log`` (pyarrow's S3 name for it)."""
    if not object_store.is_s3(path):
        raise StreamsException(
            f"{path}: reading a Delta log is supported on a local disk and on the S3 API "
            "(s3://, s3a://) only"
        )
    return f"{object_store.bucket_key(path)}/_delta_log"


def commit_versions(path: str) -> list[int]:
    """The commit versions of the table at ``path`` (a local path, or an ``s3://`` URI) with
    a commit file, newest first."""
    log = local_log(path)
    if log is not None:
        return versions(log)
    from pyarrow import fs

    selector = fs.FileSelector(_remote_log(path), allow_not_found=True)
    return _newest_first([i.base_name for i in object_store.filesystem().get_file_info(selector)])


def has_remote_log(path: str) -> bool:
    """Whether the ``_delta_log`` of the table at ``path`` (an ``s3://`` URI) holds a commit
    or a checkpoint file, i.e. a Delta table is there: one listing, where opening the table
    would also read its checkpoint and newest commits."""
    from pyarrow import fs

    selector = fs.FileSelector(_remote_log(path), allow_not_found=True)
    for info in object_store.filesystem().get_file_info(selector):
        name = info.base_name
        if name[:20].isdigit() and (name.endswith(".json") or ".checkpoint" in name):
            return True
    return False


def commit_of(path: str, version: int) -> Commit | None:
    """The commit of ``version`` of the table at ``path`` (a local path, or an ``s3://``
    URI), or None if its file is not there (none yet, or cleaned up)."""
    log = local_log(path)
    if log is not None:
        return read_commit(log, version)
    name = f"{_remote_log(path)}/{version:020d}.json"
    try:
        with object_store.filesystem().open_input_stream(name) as stream:
            return _parse(stream.read().decode("utf-8"))
    except FileNotFoundError:
        return None


def _parse(text: str) -> Commit:
    lines = text.splitlines()
    user_metadata = None
    changes_data = False
    txns: list[tuple[str, int]] = []
    for line in lines:
        action = json.loads(line) if line.strip() else {}
        info = action.get("commitInfo")
        if info is not None:
            user_metadata = info.get("userMetadata")
        for kind in ("add", "remove", "cdc"):
            if kind in action and action[kind].get("dataChange", True):
                changes_data = True
        txn = action.get("txn")
        if txn is not None:
            txns.append((txn["appId"], int(txn["version"])))
    return Commit(user_metadata, changes_data, tuple(txns))
