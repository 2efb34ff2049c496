"""Progress bars for long work, shown on a person's terminal and nowhere else.

The engine reports progress without knowing who watches::

    from lakestate import console

    with console.progress("restore 0_0 demo-counts", total=rows) as bar:
        for chunk in chunks:
            ...
            bar.advance(len(chunk))

``progress`` is a no-op (nothing imported, nothing printed) unless the CLI turned the
display on with ``enable()``, which it does only when stderr is a terminal and neither
``--quiet`` nor ``--json`` was given. So Airflow task logs, tests and library callers never
see a bar. Bars go to stderr; they vanish when their work ends (the engine's own
one-line messages say what was done). Bars opened inside another one's ``with`` show
beneath it (e.g. a run's batches, and the records of the batch). Updates may come from any
thread.

``echo(text, file)`` prints a line without tearing a bar that is being drawn; the CLI prints
through it.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from typing import IO, Any

__all__ = ["Bar", "disable", "echo", "enable", "enabled", "progress"]

_lock = threading.Lock()
_enabled = False
_stream: IO[str] | None = None
_display: Any = None  # the rich Progress being drawn, while at least one bar is open
_open = 0  # bars open on _display


class Bar:
    """One bar: ``advance(n)`` adds ``n`` units of work done; ``update(total=...)`` sets
    the total once it is known (None: unknown, the bar then counts without a fraction)."""

    def __init__(self, display: Any = None, task: Any = None) -> None:
        self._display = display
        self._task = task

    def advance(self, n: int | float = 1) -> None:
        if self._display is not None:
            self._display.advance(self._task, n)

    def update(self, *, total: int | float | None = None, description: str | None = None) -> None:
        if self._display is not None:
            changes: dict[str, Any] = {"total": total}
            if description is not None:
                changes["description"] = description
            self._display.update(self._task, **changes)


_NO_BAR = Bar()


def enable(stream: IO[str] | None = None) -> None:
    """Show progress bars on ``stream`` (default stderr) from now on."""
    global _enabled, _stream
    with _lock:
        _enabled, _stream = True, stream if stream is not None else sys.stderr


def disable() -> None:
    """Show no progress bars (the default)."""
    global _enabled
    with _lock:
        _enabled = False


def enabled() -> bool:
    """Whether ``progress`` draws bars."""
    return _enabled


@contextlib.contextmanager
def progress(description: str, total: int | float | None = None) -> Iterator[Bar]:
    """A bar for one piece of long work, of ``total`` units (records, rows, batches; None
    when unknown), for the duration of the ``with`` block; a no-op bar when disabled."""
    if not _enabled:
        yield _NO_BAR
        return
    display, task = _open_bar(description, total)
    try:
        yield Bar(display, task)
    finally:
        _close_bar(display, task)


def echo(text: str, file: IO[str] | None = None) -> None:
    """Print ``text`` (one line) to ``file`` (default stdout), above any bar being drawn."""
    out = file if file is not None else sys.stdout
    display = _display
    if display is not None and _isatty(out):
        display.console.print(text, markup=False, highlight=False, soft_wrap=True)
    else:
        print(text, file=out)


def _open_bar(description: str, total: int | float | None) -> tuple[Any, Any]:
    global _display, _open
    with _lock:
        if _display is None:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            _display = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=Console(file=_stream, stderr=_stream is None),
                transient=True,
                # The CLI prints through echo(); nothing else is taken over.
                redirect_stdout=False,
                redirect_stderr=False,
            )
            _display.start()
        _open += 1
        task = _display.add_task(description, total=total)
        _display.refresh()  # shown at once, not at the next tick
        return _display, task


def _close_bar(display: Any, task: Any) -> None:
    global _display, _open
    with _lock:
        display.remove_task(task)
        _open -= 1
        if _open == 0:
            display.stop()
            _display = None


def _isatty(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
