"""A local Delta table's commit files, read without Spark.

Lakestate's own writers put what a reader needs into their commits' metadata (Delta
``commitInfo.userMetadata``, JSON), so that on a local file system a reader can take it from
the newest commit files (``_delta_log/<20-digit version>.json``, the Delta protocol's names)
instead of running a Spark job over the table.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, NamedTuple


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
    return sorted(
        (int(n[:20]) for n in names if len(n) == 25 and n.endswith(".json") and n[:20].isdigit()),
        reverse=True,
    )


def read_commit(log: Path, version: int) -> Commit | None:
    """The commit of ``version``, or None if its file is not there (none yet, or cleaned up)."""
    try:
        lines = (log / f"{version:020d}.json").read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
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
