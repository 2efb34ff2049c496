"""How many worker processes a batch run in process gets (runtime/worker_pool.py)."""

import pytest
from lakestate.errors import StreamsException
from lakestate.runtime.worker_pool import (
    DEFAULT_MIN_RECORDS,
    MIN_RECORDS_CONFIG,
    WORKERS_CONFIG,
    available_cores,
    workers_wanted,
)

BIG = DEFAULT_MIN_RECORDS


def test_default_is_the_cores_available_at_most_one_per_task():
    cores = available_cores()
    assert workers_wanted({}, tasks=64, records=BIG) == (cores if cores >= 2 else 0)
    assert workers_wanted({WORKERS_CONFIG: 8}, tasks=3, records=BIG) == 3


@pytest.mark.parametrize(
    ("config", "tasks", "records"),
    [
        ({WORKERS_CONFIG: 4}, 1, BIG),  # one task: nothing to share
        ({WORKERS_CONFIG: 4}, 4, BIG - 1),  # small batch: a worker's start costs more
        ({WORKERS_CONFIG: 1}, 4, BIG),
        ({WORKERS_CONFIG: 0}, 4, BIG),
    ],
)
def test_the_driver_processes_alone(config, tasks, records):
    assert workers_wanted(config, tasks, records) == 0


def test_min_records_is_the_apps():
    assert workers_wanted({WORKERS_CONFIG: 2, MIN_RECORDS_CONFIG: 0}, tasks=2, records=1) == 2


@pytest.mark.parametrize("value", [-1, "2", 1.5, True])
@pytest.mark.parametrize("key", [WORKERS_CONFIG, MIN_RECORDS_CONFIG])
def test_a_bad_setting_is_named(key, value):
    with pytest.raises(StreamsException, match=f"{key} must be an int >= 0, got {value!r}"):
        workers_wanted({key: value}, tasks=2, records=BIG)
