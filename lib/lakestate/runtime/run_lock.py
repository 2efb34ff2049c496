"""One run of an app per instance at a time: its local stores are not shared. A file lock
in the instance's state directory (``<state dir>/<app>/.lock``) holding the holder's pid."""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

#: How often a run waiting for another run of its app checks the lock.
LOCK_POLL_S = 0.2


@contextlib.contextmanager
def instance_lock(
    state_dir: str, app: str, wait_s: float = 0.0, say: Callable[[str], None] = print
) -> Iterator[bool]:
    """One run of an app per instance: its local stores are not shared. A run that finds
    the lock held waits for it, polling, up to ``wait_s`` seconds (``math.inf``: as long as
    it takes); it yields True once it holds the lock, False when the other run still holds
    it after the wait (the caller then does nothing)."""
    path = Path(state_dir) / app / ".lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        started = time.monotonic()
        said = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                waited = time.monotonic() - started
                if waited >= wait_s:
                    say(
                        f"app {app} is still running on this instance{_holder(path)} after "
                        f"{waited:.0f}s of waiting (lock {path}): this run did nothing; the "
                        "running one processes what is new"
                    )
                    yield False
                    return
                if not said:
                    bound = "as long as it takes" if math.isinf(wait_s) else f"up to {wait_s:g}s"
                    say(
                        f"app {app} is running on this instance{_holder(path)}: waiting "
                        f"{bound} for it to finish (lock {path})"
                    )
                    said = True
                time.sleep(min(LOCK_POLL_S, max(0.0, wait_s - waited)))
        if said:
            say(f"the other run of app {app} finished after {time.monotonic() - started:.1f}s")
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        yield True
    finally:
        os.close(fd)


def _holder(path: Path) -> str:
    """`` (pid N)``: the process holding the lock, as it wrote it (empty if unknown)."""
    with contextlib.suppress(OSError, ValueError):
        return f" (pid {int(path.read_text().strip())})"
    return ""
