"""Where an object-store run's requests go (bench_object_store's ``--requests``): the S3
server's request log (``s3_server.REQUEST_LOG_ENV``: each request's start and end on the
machine's monotonic clock) matched against a run's hook events (bench_scheduled's
``_lakestate`` child: each phase's start and end on the same clock), so each request is
counted in the innermost phase of the main thread that was running when it started, and
sorted by kind (a listing, a commit file read, a checkpoint read, a data file read, a put).

Also the tables' sizes after a round: each Delta table of a local warehouse, its commits,
its live data files and the files in its ``_delta_log`` (the S3 warehouse gets the same
commits from the same input and app; counting them there would add requests).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

#: s3_server.REQUEST_LOG_ENV (tests/integration is not on this directory's path).
REQUEST_LOG_ENV = "LAKESTATE_S3_REQUEST_LOG"

KINDS = (
    "list",
    "get commit json",
    "get checkpoint",
    "get _last_checkpoint",
    "get data file",
    "head",
    "put commit json",
    "put data file",
    "other",
)


def kind(method: str, target: str) -> str:
    """The kind of one request (``target``: path and query)."""
    path, _, query = target.partition("?")
    if method == "GET" and ("list-type" in query or path.count("/") <= 1):
        return "list"
    if method == "HEAD":
        return "head"
    in_log = "/_delta_log/" in path
    if method == "GET":
        if path.endswith("_last_checkpoint"):
            return "get _last_checkpoint"
        if in_log and ".checkpoint" in path:
            return "get checkpoint"
        if in_log and path.endswith(".json"):
            return "get commit json"
        return "get data file" if path.endswith(".parquet") else "other"
    if method == "PUT":
        return "put commit json" if in_log else "put data file"
    return "other"


class RequestLog:
    """The server's log, read on from where the last ``take`` stopped."""

    def __init__(self, path: Path, labels: dict[str, str]) -> None:
        self.path = path
        self.labels = labels  # a hook label -> its phase's name (bench_scheduled.MAIN_PHASES)
        self.offset = 0

    def take(self) -> list[tuple[float, float, str, str, str]]:
        """The requests logged since the last call: (start, end, method, target, status)."""
        if not self.path.exists():
            return []
        with open(self.path) as f:
            f.seek(self.offset)
            text = f.read()
            self.offset = f.tell()
        out = []
        for line in text.splitlines():
            parts = line.split(" ")
            if len(parts) == 5:
                out.append((float(parts[0]), float(parts[1]), parts[2], parts[3], parts[4]))
        return out


def by_phase(
    requests: list[tuple[float, float, str, str, str]], events_file: Path, labels: dict[str, str]
) -> dict[str, dict[str, Any]]:
    """``{phase: {"requests": n, "seconds": server time, kind: n, ...}}`` of one run;
    ``labels`` maps a hook label to its phase's name (bench_scheduled's MAIN_PHASES)."""
    report = json.loads(events_file.read_text())
    main = sorted(
        (e for e in report["events"] if e["thread"] == "MainThread"),
        key=lambda e: (e["start"], -e["end"]),
    )
    out: dict[str, dict[str, Any]] = {}
    for start, end, method, target, _status in requests:
        label = "other"
        if start < report["main_start"]:
            label = "startup"
        elif start > report["main_end"]:
            label = "exit"
        for e in main:  # sorted by start, outer first: the last match is the innermost
            if e["start"] <= start <= e["end"]:
                label = e["label"]
        row = out.setdefault(labels.get(label, label), {"requests": 0, "seconds": 0.0})
        row["requests"] += 1
        row["seconds"] = round(row["seconds"] + end - start, 4)
        k = kind(method, target)
        row[k] = row.get(k, 0) + 1
    return out


def table_sizes(root: Path) -> dict[str, dict[str, int]]:
    """Each Delta table under ``root`` (a local warehouse): its version (commits - 1), live
    data files and the files in its ``_delta_log``, by its path under ``root``."""
    from deltalake import DeltaTable

    out = {}
    for log_dir in sorted(root.rglob("_delta_log")):
        table = log_dir.parent
        dt = DeltaTable(str(table))
        out[str(table.relative_to(root))] = {
            "version": dt.version(),
            "files": len(dt.file_uris()),
            "log_files": len(os.listdir(log_dir)),
        }
    return out
