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

Library callers (tests, Airflow's spark-submit) never call ``start``: their logging stays
where it was. A JVM that ``get_spark`` starts for them writes to a file of its own here,
``lakestate-spark-<UTC time>-<pid>.log`` (``new``), not to their terminal.
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
    "capture",
    "current",
    "log_dir",
    "new",
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
# Loggers ``capture`` took over, with the handlers they had.
_captured: list[tuple[logging.Logger, list[logging.Handler]]] = []


def current() -> LogFile | None:
    """The log file ``start`` made current, if any."""
    return _current


def start(command: str) -> LogFile:
    """Make a new log file for this invocation of ``command`` the current one, and send
    Python logging and warnings to it."""
    global _current
    if _current is not None:
        stop()
    log = new(command)
    root, own = logging.getLogger(), logging.getLogger("lakestate")
    _saved_levels.update(root=root.level, lakestate=own.level)
    root.setLevel(logging.WARNING)
    own.setLevel(logging.INFO)
    root.addHandler(log.handler)
    logging.captureWarnings(True)
    _current = log
    return log


def new(command: str) -> LogFile:
    """A new log file for this invocation of ``command`` (not made current; the oldest
    files beyond ``KEEP`` are removed)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in command) or "command"
    directory = log_dir()
    _prune(directory, KEEP - 1)
    return LogFile(directory / f"lakestate-{safe}-{stamp}-{os.getpid()}.log")


def capture(logger: logging.Logger) -> None:
    """Send ``logger``'s records to the current log file instead of its own handlers, until
    ``stop``: for a library's logger that does not propagate and writes to the terminal
    itself (pyspark's query-context loggers). Nothing without a current log file."""
    if _current is None or _current.handler in logger.handlers:
        return
    _captured.append((logger, list(logger.handlers)))
    # logging.Logger's own methods: a subclass's may restyle the handler (PySparkLogger
    # sets its JSON formatter on every handler it is given).
    for handler in list(logger.handlers):
        logging.Logger.removeHandler(logger, handler)
    logging.Logger.addHandler(logger, _current.handler)


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
    while _captured:
        logger, handlers = _captured.pop()
        logging.Logger.removeHandler(logger, _current.handler)
        for handler in handlers:
            logging.Logger.addHandler(logger, handler)
    _current.handler.close()
    root.setLevel(_saved_levels.get("root", logging.WARNING))
    logging.getLogger("lakestate").setLevel(_saved_levels.get("lakestate", logging.NOTSET))
    logging.captureWarnings(False)
    _current = None
