"""The suite's longest-first order over xdist's worksteal slices (tests/durations_order.py)."""

from __future__ import annotations

from durations_order import estimate, order, slice_sizes


def test_slice_sizes_are_worksteals_first_distribution() -> None:
    # worksteal sends len(pending) // idle_workers_left to each idle worker in turn.
    assert slice_sizes(7, 2) == [3, 4]
    assert slice_sizes(10, 3) == [3, 3, 4]
    assert slice_sizes(5, 1) == [5]


def test_long_tests_open_both_slices_and_quick_ones_close_them() -> None:
    seconds = {"long1": 200.0, "long2": 190.0, "mid": 50.0}
    seconds.update({f"q{i}": 0.1 for i in range(9)})
    units = [[k] for k in sorted(seconds)]
    result = order(units, seconds, workers=2)
    first, second = result[:6], result[6:]
    assert {first[0], second[0]} == {"long1", "long2"}
    assert "mid" in (first[1], second[1])
    assert all(t.startswith("q") for t in first[-3:] + second[-3:])
    assert sorted(result) == sorted(seconds)


def test_a_unit_stays_together_in_its_order() -> None:
    seconds = {"m::b": 5.0, "m::a": 5.0, "x": 9.0, "y": 1.0}
    result = order([["m::b", "m::a"], ["x"], ["y"]], seconds, workers=2)
    i = result.index("m::b")
    assert result[i + 1] == "m::a"
    assert result[0] == "m::b"  # the unit (10 s) outweighs x (9 s)


def test_unknown_tests_take_their_modules_median_else_the_folders_default() -> None:
    recorded = {"tests/integration/test_a.py::t1": 10.0, "tests/integration/test_a.py::t2": 30.0}
    got = estimate(
        ["tests/integration/test_a.py::t3", "tests/unit/test_b.py::t", "tests/e2e/test_c.py::t"],
        recorded,
    )
    assert got["tests/integration/test_a.py::t3"] == 20.0
    assert got["tests/unit/test_b.py::t"] < 1
    assert got["tests/e2e/test_c.py::t"] > got["tests/unit/test_b.py::t"]
