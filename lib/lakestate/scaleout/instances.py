"""An app's instances: the processes that share its tasks, each with its own local state.

``App.config["lakestate.instances"]`` lists them, each a dict ``{"name", "queue" (the
Airflow queue; default: the name), "state_dir" (default: ``<LAKESTATE_STATE_DIR or
./state>/<name>``), "master" (a Spark master; default: the CLI's), "capacity" (default
1)}``. Without the key, an app has one implicit instance, ``default``, whose state dir is
today's (``task_dir.state_dir_of(None)``): one instance behaves exactly as before scale-out.

Also the rebalance's own keys: ``probing.rebalance.interval.ms`` (Kafka's, default 10
minutes) and ``lakestate.warmup.max.records`` (per run, the bound on the changelog rows or lag
records a run's warmup and standby tasks restore or catch up, a restore split in pieces
across runs; default 200,000). The assignor's keys are
``AssignorConfig.from_config``'s (lakestate.assign).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lakestate.app import App
from lakestate.checkpoint import task_dir
from lakestate.errors import StreamsException

__all__ = [
    "DEFAULT_INSTANCE",
    "INSTANCES_KEY",
    "Instance",
    "instance_of",
    "instances_of",
    "probing_rebalance_interval_ms",
    "warmup_max_records",
]

INSTANCES_KEY = "lakestate.instances"
DEFAULT_INSTANCE = "default"
PROBING_INTERVAL_KEY = "probing.rebalance.interval.ms"
PROBING_INTERVAL_DEFAULT = 600_000  # Kafka's default
CLEANUP_DELAY_KEY = "state.cleanup.delay.ms"
CLEANUP_DELAY_DEFAULT = 600_000  # Kafka's default
WARMUP_MAX_KEY = "lakestate.warmup.max.records"
# A warmup run should be no longer than a normal one: a piece of 200k changelog rows took
# 0.5-0.8 s on the 2-core test machine unloaded (bench_warmup.py, 1M keys), a normal
# back-to-back run 1.8-2.6 s.
WARMUP_MAX_DEFAULT = 200_000

_KEYS = ("name", "queue", "state_dir", "master", "capacity")
# An instance's name names an Airflow task (run_<name>) and a state directory.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")


@dataclass(frozen=True)
class Instance:
    """One instance of an app: its name, Airflow queue, local state directory (absolute),
    Spark master (None: the CLI's default) and capacity (its share of tasks, relative to
    the others')."""

    name: str
    queue: str
    state_dir: str
    master: str | None = None
    capacity: int = 1

    def to_json(self) -> dict[str, Any]:
        """What a generation records of it (``_assignment.instances``)."""
        return {"name": self.name, "queue": self.queue, "capacity": self.capacity}


def instances_of(app: App, state_root: str | os.PathLike[str] | None = None) -> list[Instance]:
    """The app's instances in config order; the implicit ``default`` one when
    ``lakestate.instances`` is absent. StreamsException naming the app, the instance and
    the key for a bad entry (unknown key, bad or duplicate name, capacity < 1 ...).
    ``state_root``: where instances without a ``state_dir`` keep theirs (``<root>/<name>``;
    the implicit instance: the root itself); default env ``LAKESTATE_STATE_DIR``, else
    ``./state`` (the DAG factory gives its own, resolved where the DAG is parsed)."""
    raw = app.config.get(INSTANCES_KEY)
    if raw is None:
        return [Instance(DEFAULT_INSTANCE, DEFAULT_INSTANCE, task_dir.state_dir_of(state_root))]
    where = f"app {app.name}: config {INSTANCES_KEY!r}"
    if not isinstance(raw, list | tuple) or not raw:
        raise StreamsException(
            f"{where} must be a non-empty list of instances ({{'name': ..., 'queue': ...}}), "
            f"got {raw!r}"
        )
    found: list[Instance] = []
    for i, entry in enumerate(raw):
        instance = _parse(where, i, entry, state_root)
        if any(other.name == instance.name for other in found):
            raise StreamsException(f"{where}: instance {instance.name!r} is named twice")
        found.append(instance)
    return found


def _parse(where: str, i: int, entry: Any, state_root: str | os.PathLike[str] | None) -> Instance:
    if not isinstance(entry, Mapping):
        raise StreamsException(f"{where}: entry {i} must be a dict with a 'name', got {entry!r}")
    name = entry.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise StreamsException(
            f"{where}: entry {i} key 'name' must be 1-64 letters, digits, '_' or '-' "
            f"starting with a letter or digit, got {name!r}"
        )
    what = f"{where}: instance {name!r}"
    unknown = sorted(set(entry) - set(_KEYS))
    if unknown:
        raise StreamsException(f"{what}: unknown key {unknown[0]!r} (known: {', '.join(_KEYS)})")
    queue = entry.get("queue", name)
    if not isinstance(queue, str) or not queue:
        raise StreamsException(f"{what}: key 'queue' must be a non-empty string, got {queue!r}")
    master = entry.get("master")
    if master is not None and (not isinstance(master, str) or not master):
        raise StreamsException(f"{what}: key 'master' must be a Spark master URL, got {master!r}")
    capacity = entry.get("capacity", 1)
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
        raise StreamsException(f"{what}: key 'capacity' must be an integer >= 1, got {capacity!r}")
    state_dir = entry.get("state_dir")
    if state_dir is not None and (not isinstance(state_dir, str | os.PathLike) or not state_dir):
        raise StreamsException(f"{what}: key 'state_dir' must be a directory, got {state_dir!r}")
    if state_dir is None:
        state_dir = Path(task_dir.state_dir_of(state_root)) / name
    return Instance(name, queue, str(Path(state_dir).resolve()), master, capacity)


def instance_of(app: App, name: str | None) -> Instance:
    """The instance ``name`` of the app (None: the first configured, or the implicit
    ``default``); StreamsException listing the configured ones for an unknown name."""
    instances = instances_of(app)
    if name is None:
        return instances[0]
    for instance in instances:
        if instance.name == name:
            return instance
    raise StreamsException(
        f"app {app.name} has no instance {name!r}; its instances: "
        f"{', '.join(i.name for i in instances)}"
        + ("" if INSTANCES_KEY in app.config else f" (no {INSTANCES_KEY!r} in its config)")
    )


def _non_negative_int(app: App, key: str, default: int) -> int:
    value = app.config.get(key, default)
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise StreamsException(
            f"app {app.name}: config {key!r} must be an integer >= 0, got {value!r}"
        )
    return value


def probing_rebalance_interval_ms(app: App) -> int:
    """``probing.rebalance.interval.ms``: how long after a generation that needs a probing
    rebalance (warmups still catching up) the next one is computed even when no lag
    changed."""
    return _non_negative_int(app, PROBING_INTERVAL_KEY, PROBING_INTERVAL_DEFAULT)


def cleanup_delay_ms(app: App) -> int:
    """``state.cleanup.delay.ms`` (Kafka's): how long a local store of a task this instance
    no longer has any role for (or a warmup's shadow it no longer builds) is kept before a
    run deletes it, in case the task comes back."""
    return _non_negative_int(app, CLEANUP_DELAY_KEY, CLEANUP_DELAY_DEFAULT)


def warmup_max_records(app: App) -> int:
    """``lakestate.warmup.max.records``: per run, the most changelog rows or lag records
    a run's warmup and standby tasks restore or catch up. A restore is split in pieces of
    at most that many rows, one run each (``restore/warmup.py``); the first task
    with a lag always proceeds (by one piece, at least one row). The default, 200,000,
    keeps a warmup run about as long as a normal one: a piece of 200k rows took 0.5-0.8 s
    on the 2-core test machine unloaded, where a back-to-back run takes 1.8-2.6 s
    (tests/benchmarks/bench_warmup.py)."""
    return _non_negative_int(app, WARMUP_MAX_KEY, WARMUP_MAX_DEFAULT)
