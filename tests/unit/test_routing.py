"""Routes that give every task of a batch a Spark partition of its own."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from lakestate.runtime.routing import routes, spark_hash_int


def test_spark_hash_of_known_ints() -> None:
    # Spark: SELECT hash(1), hash(0), hash(-1) (Murmur3_x86_32, seed 42)
    assert spark_hash_int(1) == -559580957
    assert spark_hash_int(0) == 933211791


@given(st.integers(min_value=1, max_value=64))
def test_routes_give_each_slot_its_own_partition(n: int) -> None:
    found = routes(n)
    assert len(found) == n
    assert [spark_hash_int(r) % n for r in found] == list(range(n))


def test_an_empty_spark_partition_yields_no_rows() -> None:
    from lakestate.runtime.task_executor import process_partition

    assert list(process_partition(iter([]), ctx=None)) == []
