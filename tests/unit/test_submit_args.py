"""cli/submit.py (the spark-submit entry point) takes ``lakestate run``'s options, with
explicit values for templated callers."""

from __future__ import annotations

from lakestate.cli.submit import build_parser


def test_submit_accepts_lakestate_run_arguments() -> None:
    args = build_parser().parse_args(
        ["jobs/demo.py", "--max-batches", "2", "--max-records", "10", "--until-caught-up"]
    )
    assert (args.max_batches, args.max_records, args.until_caught_up) == (2, 10, True)
    defaults = build_parser().parse_args(["jobs/demo.py"])
    assert defaults.until_caught_up is False
    assert (defaults.time_budget, defaults.wait, defaults.until_timestamp) == (None, None, None)


def test_explicit_values_and_the_lock_wait_and_cut() -> None:
    args = build_parser().parse_args(
        ["jobs/demo.py", "--max-batches=none", "--until-caught-up=false", "--time-budget=90",
         "--wait=inf", "--until-timestamp=2026-11-20T10:05:00Z"]
    )  # fmt: skip
    assert args.max_batches is None and args.until_caught_up is False
    assert args.time_budget == 90 and args.wait == float("inf")
    assert args.until_timestamp == "2026-11-20T10:05:00Z"
    assert build_parser().parse_args(["jobs/demo.py", "--wait=none"]).wait is None
