"""The log file of one ``lakestate`` command: where Spark's, Ivy's and lakestate's own logs
go, so that the terminal shows only what a person reads.

``start(command)`` makes the invocation's log file current: Python ``logging`` (lakestate's
loggers at INFO, every other library's at WARNING, and ``warnings``) goes to it, and
``engine.spark.get_spark`` starts the JVM with its stdout and stderr on it (Ivy's jar
resolution, log4j, Spark's Python workers' output). The file is created on its first write,
so a command that logged nothing leaves none.

Where: ``$LAKESTATE_LOG_DIR``, else ``logs/`` in the current directory (beside the default
``warehouse/`` and ``state/``), one file per invocation named
``lakestate-<command>-<UTC time>-<pid>.log``. ``start`` removes the oldest beyond the
newest ``KEEP`` (200).

Library callers (tests, Airflow's spark-submit) never call ``start``: their logging and the
JVM's output stay where they were.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path
from typing import BinaryIO

__all__ = [
    "DEFAULT_LOG_DIR",
    "KEEP",
    "LOG_DIR_ENV",
    "LogFile",
    "current",
    "log_dir",
    "start",
    "stop",
]

LOG_DIR_ENV = "LAKESTATE_LOG_DIR"
DEFAULT_LOG_DIR = "logs"
#: Log files a directory keeps: ``start`` removes the oldest beyond this many.
KEEP = 200

_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def log_dir() -> Path:
    """Where log files go: env ``LAKESTATE_LOG_DIR``, else ``./logs``."""
    return Path(os.environ.get(LOG_DIR_ENV) or DEFAULT_LOG_DIR).expanduser().resolve()


class _Handler(logging.FileHandler):
    """A FileHandler that creates the file (and its directory) on the first record."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, mode="a", encoding="utf-8", delay=True)

    def _open(self):  # noqa: ANN202 (logging's signature)
        Path(self.baseFilename).parent.mkdir(parents=True, exist_ok=True)
        return super()._open()


class LogFile:
    """One invocation's log file (``path``; it may not exist yet)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.handler = _Handler(path)
        self.handler.setFormatter(logging.Formatter(_FORMAT))

    def open_for_child(self) -> BinaryIO:
        """The file opened for appending, for a child process's stdout and stderr (the
        caller closes it once the child started). Appending: the child's writes and this
        process's interleave instead of overwriting each other."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        return open(self.path, "ab")  # noqa: SIM115 (handed to Popen, closed by the caller)

    def exists(self) -> bool:
        return self.path.is_file()


_current: LogFile | None = None
_saved_levels: dict[str, int] = {}


def current() -> LogFile | None:
    """The log file ``start`` made current, if any."""
    return _current


def start(command: str) -> LogFile:
    """Make a new log file for this invocation of ``command`` the current one, and send
    Python logging and warnings to it."""
    global _current
    if _current is not None:
        stop()
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in command) or "command"
    directory = log_dir()
    _prune(directory, KEEP - 1)
    log = LogFile(directory / f"lakestate-{safe}-{stamp}-{os.getpid()}.log")
    root, own = logging.getLogger(), logging.getLogger("lakestate")
    _saved_levels.update(root=root.level, lakestate=own.level)
    root.setLevel(logging.WARNING)
    own.setLevel(logging.INFO)
    root.addHandler(log.handler)
    logging.captureWarnings(True)
    _current = log
    return log


def _prune(directory: Path, keep: int) -> None:
    """Remove all but the newest ``keep`` log files of ``directory``."""

    def age(path: Path) -> float:
        try:
            return path.stat().st_mtime
        except OSError:  # removed meanwhile by another invocation
            return 0.0

    files = sorted(directory.glob("lakestate-*.log"), key=age)
    for old in files[: max(len(files) - keep, 0)]:
        with contextlib.suppress(OSError):
            old.unlink()


def stop() -> None:
    """Detach the current log file (its content stays)."""
    global _current
    if _current is None:
        return
    root = logging.getLogger()
    root.removeHandler(_current.handler)
    _current.handler.close()
    root.setLevel(_saved_levels.get("root", logging.WARNING))
    logging.getLogger("lakestate").setLevel(_saved_levels.get("lakestate", logging.NOTSET))
    logging.captureWarnings(False)
    _current = None
