"""Suite-wide hooks: the longest-first order across xdist workers (``durations_order.py``),
``--store-durations``, which records this run's per-test seconds into
``tests/durations.json`` for that order (``bash scripts/test.sh --store-durations``), and the
Spark drivers' class archive and JVM options (``spark_cds.py``)."""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

import pytest
import spark_cds
from durations_order import DURATIONS_FILE, estimate, load_durations, order


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("lakestate")
    group.addoption(
        "--store-durations",
        action="store_true",
        help="merge this run's per-test seconds into tests/durations.json",
    )
    group.addoption(
        "--no-duration-order",
        action="store_true",
        help="keep pytest's collection order (no longest-first order across workers)",
    )


def _workers(config: pytest.Config) -> int:
    """The number of xdist workers this run has (1 without xdist)."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        return int(workerinput["workercount"])
    return int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))


def _unit_key(item: pytest.Item) -> str:
    """The tests that must run together: a module's (class's) when the test uses a fixture
    of that scope, else the test alone."""
    info = getattr(item, "_fixtureinfo", None)
    scopes = set()
    for defs in info.name2fixturedefs.values() if info else ():
        scopes.update(str(getattr(d, "scope", "function")) for d in defs)
    if scopes & {"module", "package"}:
        return item.nodeid.split("::")[0]
    if "class" in scopes and getattr(item, "cls", None) is not None:
        return item.nodeid.rsplit("::", 1)[0]
    return item.nodeid


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Longest first, balanced over the worksteal slices of this run's workers."""
    if config.getoption("--no-duration-order") or not items:
        return
    by_id = {item.nodeid: item for item in items}
    units: dict[str, list[str]] = defaultdict(list)
    for item in items:
        units[_unit_key(item)].append(item.nodeid)
    seconds = estimate(list(by_id), load_durations())
    items[:] = [by_id[i] for i in order(list(units.values()), seconds, _workers(config))]


class _DurationRecorder:
    """Sums each test's setup, call and teardown seconds from the (controller's) reports."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid] += float(report.duration)

    def write(self, path: Path = DURATIONS_FILE) -> None:
        merged = load_durations(path)
        merged.update({k: round(v, 2) for k, v in self.seconds.items()})
        root = path.parent.parent
        kept = {k: v for k, v in merged.items() if (root / k.split("::")[0]).is_file()}
        text = json.dumps(dict(sorted(kept.items())), indent=0)
        path.write_text(text + "\n", encoding="utf-8")


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        return  # xdist's workers inherit the controller's environment
    # The Spark drivers' class archive, built before any worker starts (spark_cds.py).
    spark_cds.use_archive()
    # Recorded once, by the controller (xdist relays every worker's reports to it).
    if config.getoption("--store-durations"):
        config.pluginmanager.register(_DurationRecorder(), "lakestate-duration-recorder")


def pytest_sessionfinish(session: pytest.Session) -> None:
    recorder = session.config.pluginmanager.get_plugin("lakestate-duration-recorder")
    if recorder is not None and recorder.seconds:
        recorder.write()
