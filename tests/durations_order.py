"""Longest-first test order across pytest-xdist workers, from recorded durations.

xdist's ``worksteal`` scheduler hands worker i the i-th consecutive slice of the collection
(slices of ``len // workers_left`` items) and later moves the *tail* of a busy worker's queue
to an idle one. A long test at the end of a slice therefore runs last while the other worker
idles. This module orders the collection so that each slice holds about the same recorded
time, longest first, and ends with the quickest tests, which are the ones stolen.

The unit of placement is a test, or a whole module (class) when one of its tests uses a
module- (class-) scoped fixture: splitting those would set the fixture up twice. Within a
module pytest's own order (grouped by fixture parameters) is kept.

Durations come from ``tests/durations.json`` (test id -> setup + call + teardown seconds),
written by a run with ``--store-durations``. A test not in it counts as the median of its
module's recorded tests, else as its directory's default (``DEFAULT_SECONDS``).
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path

DURATIONS_FILE = Path(__file__).resolve().with_name("durations.json")

#: Seconds assumed for a test of a module with no recorded test, by the tests/ subdirectory.
DEFAULT_SECONDS = {"unit": 0.3, "conformance": 1.0, "integration": 8.0, "e2e": 10.0}
_OTHER_SECONDS = 5.0


def load_durations(path: Path = DURATIONS_FILE) -> dict[str, float]:
    """The recorded durations (test id -> seconds); empty when there is no file."""
    if not path.is_file():
        return {}
    return {k: float(v) for k, v in json.loads(path.read_text(encoding="utf-8")).items()}


def estimate(nodeids: list[str], recorded: dict[str, float]) -> dict[str, float]:
    """Each test's expected seconds: recorded, else its module's median, else a default."""
    by_module: dict[str, list[float]] = defaultdict(list)
    for nodeid, seconds in recorded.items():
        by_module[nodeid.split("::")[0]].append(seconds)
    out = {}
    for nodeid in nodeids:
        if nodeid in recorded:
            out[nodeid] = recorded[nodeid]
            continue
        module = nodeid.split("::")[0]
        if by_module.get(module):
            out[nodeid] = statistics.median(by_module[module])
        else:
            parts = module.split("/")
            folder = parts[1] if len(parts) > 2 and parts[0] == "tests" else ""
            out[nodeid] = DEFAULT_SECONDS.get(folder, _OTHER_SECONDS)
    return out


def slice_sizes(count: int, workers: int) -> list[int]:
    """The sizes of the slices worksteal's first distribution sends to each worker."""
    sizes = []
    left = count
    for i in range(workers):
        size = left // (workers - i)
        sizes.append(size)
        left -= size
    return sizes


def order(units: list[list[str]], seconds: dict[str, float], workers: int) -> list[str]:
    """The test ids in run order: ``units`` (lists of ids that stay together, in their
    order) placed longest first onto the least loaded slice with room left, each slice's
    units then longest first. A unit larger than every slice's room is split."""
    sizes = slice_sizes(sum(len(u) for u in units), max(1, workers))
    room = list(sizes)
    load = [0.0] * len(sizes)
    placed: list[list[tuple[float, list[str]]]] = [[] for _ in sizes]
    pending = sorted(units, key=lambda u: -sum(seconds[i] for i in u))
    while pending:
        unit = pending.pop(0)
        fits = [s for s in range(len(sizes)) if room[s] >= len(unit)]
        if not fits:
            # Only when every slice is nearly full: fill the roomiest, the rest goes back.
            s = max(range(len(sizes)), key=lambda s: room[s])
            unit, rest = unit[: room[s]], unit[room[s] :]
            if rest:
                pending.insert(0, rest)
            fits = [s]
        s = min(fits, key=lambda s: load[s])
        cost = sum(seconds[i] for i in unit)
        placed[s].append((cost, unit))
        load[s] += cost
        room[s] -= len(unit)
    result = []
    for slice_units in placed:
        for _, unit in sorted(slice_units, key=lambda cu: -cu[0]):
            result.extend(unit)
    return result
