"""The assignor's inputs and output (KIP-441's configs, client states and assignment)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lakestate.task_id import TaskId

#: Kafka's config names and defaults for the three settings the assignor reads.
ACCEPTABLE_RECOVERY_LAG = "acceptable.recovery.lag"
MAX_WARMUP_REPLICAS = "max.warmup.replicas"
NUM_STANDBY_REPLICAS = "num.standby.replicas"


def _int_setting(name: str, value: Any, minimum: int) -> int:
    """``value`` as an int >= ``minimum`` (ints or strings of digits, as Kafka's configs)."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an integer >= {minimum}, not {value!r}")
    if isinstance(value, str):
        text = value.strip()
        if not text.lstrip("-").isdigit():
            raise ValueError(f"{name} must be an integer >= {minimum}, not {value!r}")
        value = int(text)
    if not isinstance(value, int):
        raise ValueError(f"{name} must be an integer >= {minimum}, not {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, not {value}")
    return value


@dataclass(frozen=True)
class AssignorConfig:
    """The assignor's settings, Kafka Streams' names and defaults.

    ``acceptable_recovery_lag``: a client whose store lags a task's committed offsets by at most
    this many records is *caught up* for it and may own it. ``max_warmup_replicas`` (>= 1): the
    most warmup replicas in the whole assignment. ``num_standby_replicas``: standbys per task.
    """

    acceptable_recovery_lag: int = 10000
    max_warmup_replicas: int = 2
    num_standby_replicas: int = 0

    def __post_init__(self) -> None:
        # frozen: store the checked ints (a string of digits is accepted, as in from_config)
        for attr, key, minimum in (
            ("acceptable_recovery_lag", ACCEPTABLE_RECOVERY_LAG, 0),
            ("max_warmup_replicas", MAX_WARMUP_REPLICAS, 1),
            ("num_standby_replicas", NUM_STANDBY_REPLICAS, 0),
        ):
            object.__setattr__(self, attr, _int_setting(key, getattr(self, attr), minimum))

    @staticmethod
    def from_config(config: Mapping[str, Any]) -> AssignorConfig:
        """The settings under Kafka's dotted keys in ``config`` (absent: the defaults).

        Other keys are ignored (an app's config holds many); a bad value raises ValueError
        naming the key.
        """
        defaults = AssignorConfig()
        return AssignorConfig(
            acceptable_recovery_lag=_int_setting(
                ACCEPTABLE_RECOVERY_LAG,
                config.get(ACCEPTABLE_RECOVERY_LAG, defaults.acceptable_recovery_lag),
                0,
            ),
            max_warmup_replicas=_int_setting(
                MAX_WARMUP_REPLICAS,
                config.get(MAX_WARMUP_REPLICAS, defaults.max_warmup_replicas),
                1,
            ),
            num_standby_replicas=_int_setting(
                NUM_STANDBY_REPLICAS,
                config.get(NUM_STANDBY_REPLICAS, defaults.num_standby_replicas),
                0,
            ),
        )


@dataclass(frozen=True)
class ClientState:
    """One instance as the assignor sees it.

    ``lags``: per task, how many records the instance's local store is behind the task's
    committed offsets; None, or the task absent, means it holds no store for the task.
    ``capacity`` (>= 1): its relative size (Kafka's thread count); tasks are balanced per unit.
    """

    lags: Mapping[TaskId, int | None] = field(default_factory=dict)
    capacity: int = 1

    def lag(self, task: TaskId) -> int | None:
        """The lag of this client's store for ``task``; None when it holds none."""
        return self.lags.get(task)


@dataclass(frozen=True)
class Assignment:
    """Who does what for each task.

    ``active``: task -> the one instance that processes it. ``standby``: task -> instances
    keeping a hot copy of its store. ``warmup``: task -> instances restoring its store because
    the task is meant to move there once they have caught up. An instance holds at most one
    role per task. ``standby`` and ``warmup`` only hold non-empty sets (normalized on
    construction, so assignments compare equal however they were built).
    ``probing_rebalance_needed``: some task is not yet where the balanced assignment puts it;
    rebalance again once warmups (or standbys) have caught up.
    """

    active: dict[TaskId, str]
    standby: dict[TaskId, frozenset[str]] = field(default_factory=dict)
    warmup: dict[TaskId, frozenset[str]] = field(default_factory=dict)
    probing_rebalance_needed: bool = False

    def __post_init__(self) -> None:
        # frozen: normalize through object.__setattr__ so equal assignments compare equal
        object.__setattr__(self, "active", dict(sorted(self.active.items())))
        for name in ("standby", "warmup"):
            roles = getattr(self, name)
            object.__setattr__(
                self,
                name,
                {t: frozenset(roles[t]) for t in sorted(roles) if roles[t]},
            )
