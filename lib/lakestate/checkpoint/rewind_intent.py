"""A rewind's intent: the file that says an app is being rewound, and to where.

``<warehouse>/apps/<app>/_rewind.json`` is written (atomically: write, fsync, rename) before
a rewind changes anything, with everything the rewind will do (the target, each task's
rewind batch, each table's restore version), and removed once it is done. While it exists
the app is *mid-rewind*: its tables may already be restored while its progress is not (or
the other way round), so runs and readers refuse (``refuse_if_mid_rewind``) with what to do,
and ``lakestate rewind APP --resume`` (or the same rewind again) completes it from the file.
Delta readers skip ``_`` names, so the file is no table's business. On a bucket the file is
one object: a PUT is seen whole or not at all, as the rename is on a disk.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from lakestate import object_store
from lakestate.errors import StreamsException
from lakestate.warehouse import Warehouse

FILE_NAME = "_rewind.json"


class MidRewindError(StreamsException):
    """The app is mid-rewind: nothing may run or read it until the rewind completes."""


def path(warehouse: Warehouse, app: str) -> str:
    """Where the intent of ``app``'s rewind is kept (a local path, or an ``s3://`` URI)."""
    return f"{warehouse.app_path(app).rstrip('/')}/{FILE_NAME}"


def _local(warehouse: Warehouse, app: str) -> Path | None:
    return Path(path(warehouse, app).removeprefix("file://")) if warehouse.is_local else None


def _object_key(warehouse: Warehouse, app: str) -> str:
    where = path(warehouse, app)
    if not object_store.is_s3(where):
        raise StreamsException(
            f"rewind needs a warehouse on the local file system or the S3 API, not {warehouse.root}"
        )
    return object_store.bucket_key(where)


def read(warehouse: Warehouse, app: str) -> dict[str, Any] | None:
    """The recorded intent, or None when the app is not mid-rewind."""
    local = _local(warehouse, app)
    if local is None and not object_store.is_s3(warehouse.root):
        return None  # no rewind can be written there (``write`` refuses)
    try:
        if local is not None:
            text = local.read_text(encoding="utf-8")
        else:
            with object_store.filesystem().open_input_stream(_object_key(warehouse, app)) as f:
                text = f.read().decode("utf-8")
    except FileNotFoundError:
        return None
    return json.loads(text)


def write(warehouse: Warehouse, app: str, intent: dict[str, Any]) -> None:
    """Record ``intent`` durably (a crash leaves the old file or the new one, never half)."""
    text = json.dumps(intent, indent=1, sort_keys=True)
    local = _local(warehouse, app)
    if local is None:
        with object_store.filesystem().open_output_stream(_object_key(warehouse, app)) as f:
            f.write(text.encode("utf-8"))
        return
    local.parent.mkdir(parents=True, exist_ok=True)
    tmp = local.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, local)
    _fsync_dir(local.parent)


def remove(warehouse: Warehouse, app: str) -> None:
    """The rewind is complete (or never changed anything): the app is no longer mid-rewind."""
    local = _local(warehouse, app)
    if local is None:
        try:
            object_store.filesystem().delete_file(_object_key(warehouse, app))
        except FileNotFoundError:
            pass
        return
    local.unlink(missing_ok=True)
    _fsync_dir(local.parent)


def describe(intent: dict[str, Any]) -> str:
    """The target of a recorded rewind, in words."""
    return str(intent.get("target_text") or f"progress version {intent.get('progress_version')}")


def refuse_if_mid_rewind(warehouse: Warehouse, app: str) -> None:
    """Raise MidRewindError when ``app`` is mid-rewind (a no-op otherwise: one stat)."""
    intent = read(warehouse, app)
    if intent is not None:
        raise MidRewindError(
            f"app {app} is mid-rewind to {describe(intent)} (started "
            f"{intent.get('started_at', '?')}; intent {path(warehouse, app)}): its tables and "
            f"progress may disagree until it completes. Run `lakestate rewind {app} --resume` "
            "(or rerun the same rewind) to complete it; nothing was processed or read"
        )


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
