"""Who owns a Spark run's stores (runtime/executor_stores.py ``state_owner``): the app's
``lakestate.spark.state.owner``; ``auto`` gives the executors on any master (each task reads
its input and writes its files where it runs), except an app with global tables on a local
master, whose global tables need the driver's stores."""

from __future__ import annotations

import pytest
from lakestate.runtime.executor_stores import STATE_OWNER, state_owner


@pytest.mark.parametrize("master", ["local", "local[2]", "local[*]", "spark://h:7077", "yarn"])
def test_auto_is_the_executors_on_any_master(master):
    assert state_owner({}, master) == "executors"
    assert state_owner({STATE_OWNER: "auto"}, master) == "executors"


@pytest.mark.parametrize(
    ("master", "owner"),
    [("local", "driver"), ("local[2]", "driver"), ("spark://h:7077", "executors")],
)
def test_auto_with_global_tables_is_the_driver_on_a_local_master_only(master, owner):
    # on a cluster the runner refuses such an app by name (test_executor_stores.py)
    assert state_owner({}, master, global_tables=True) == owner


@pytest.mark.parametrize("owner", ["driver", "executors"])
def test_an_explicit_owner_wins(owner):
    for master in ("local[2]", "spark://h:7077"):
        for global_tables in (False, True):
            assert state_owner({STATE_OWNER: owner}, master, global_tables) == owner


def test_a_bad_owner_is_a_clear_error():
    with pytest.raises(ValueError, match=f"{STATE_OWNER} is 'both'"):
        state_owner({STATE_OWNER: "both"}, "local[2]")
