"""The bound on a batch's records in all (runtime/plan.py): ``batch_cap`` against a brute
force model, the config's checks and the default from the machine's memory."""

import pytest
from hypothesis import given
from hypothesis import strategies as st
from lakestate.errors import StreamsException
from lakestate.runtime.plan import (
    BATCH_MAX_RECORDS_CONFIG,
    BYTES_PER_RECORD,
    MAX_BATCH_RECORDS,
    MIN_BATCH_RECORDS,
    batch_cap,
    batch_max_records,
    default_batch_max_records,
)


def _model(records: list[int], bound: int) -> int:
    """The largest cap whose capped total fits the bound, by trying every cap."""
    fits = [c for c in range(1, max(records) + 1) if sum(min(r, c) for r in records) <= bound]
    return max(fits, default=1)


@given(st.lists(st.integers(1, 60), min_size=1, max_size=6), st.integers(1, 200))
def test_batch_cap_is_the_largest_cap_that_fits(records, bound):
    if sum(records) <= bound:
        assert batch_cap(records, bound) == max(records)
    else:
        assert batch_cap(records, bound) == _model(records, bound)


def test_batch_cap_leaves_small_tasks_whole_and_shares_the_rest():
    # 10 + 3 x 30 = 100: the small task keeps its 10, the others share the 90 left.
    assert batch_cap([10, 500, 400, 300], 100) == 30
    assert batch_cap([5, 5], 3) == 1  # fewer records than tasks: each still gets one


def test_the_config_is_checked_and_defaults_to_a_share_of_memory():
    assert batch_max_records({BATCH_MAX_RECORDS_CONFIG: 50}) == 50
    for bad in (0, -1, 1.5, True, "100"):
        with pytest.raises(StreamsException, match=BATCH_MAX_RECORDS_CONFIG):
            batch_max_records({BATCH_MAX_RECORDS_CONFIG: bad})
    assert batch_max_records({}) == default_batch_max_records()
    gib = 2**30
    assert default_batch_max_records(16 * gib) == 16 * gib // 4 // BYTES_PER_RECORD
    assert default_batch_max_records(gib // 8) == MIN_BATCH_RECORDS
    assert default_batch_max_records(1024 * gib) == MAX_BATCH_RECORDS
