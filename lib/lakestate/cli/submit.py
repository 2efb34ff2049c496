"""spark-submit entry point: ``spark-submit lib/lakestate/cli/submit.py jobs/APP.py [options]``.

Takes the arguments of ``lakestate run`` minus ``--master`` (spark-submit's own ``--master``
decides) and calls ``lakestate.run_app``: for a driver that must run where
spark-submit puts it (a cluster's deploy mode). The Airflow DAGs run ``lakestate run``
itself (``lakestate.airflow.operator``). For templated callers the options also take
explicit values: ``--max-batches=none``, ``--max-records=none``, ``--until-caught-up=false``,
``--time-budget=none``, ``--wait=none``.
"""

import os
import sys

# spark-submit puts this file's directory first on sys.path: the engine's modules must not
# shadow top-level ones (``spark``, or a future ``engine/io.py`` shadowing the stdlib).
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import argparse  # noqa: E402


def _optional_int(text: str) -> int | None:
    return None if text.strip().lower() in ("", "none", "null") else int(text)


def _optional_seconds(text: str) -> float | None:
    return None if text.strip().lower() in ("", "none", "null") else float(text)


def _flag(text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false", "1", "0", "yes", "no"):
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return value in ("true", "1", "yes")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="submit.py", description=__doc__.splitlines()[0])
    p.add_argument("app", help="the app module, e.g. jobs/demo.py")
    p.add_argument("--max-batches", type=_optional_int, metavar="N")
    p.add_argument("--max-records", type=_optional_int, metavar="N")
    p.add_argument("--until-caught-up", type=_flag, nargs="?", const=True, default=False)
    p.add_argument(
        "--time-budget",
        type=_optional_seconds,
        metavar="SECONDS",
        help="start no new batch after this many seconds (default: no budget)",
    )
    p.add_argument(
        "--wait",
        type=_optional_seconds,
        metavar="SECONDS",
        help="wait up to this long for another run of the app (default: the time budget)",
    )
    p.add_argument(
        "--until-timestamp",
        metavar="MS|ISO",
        help="cut each input partition at its first record stamped at or after this time",
    )
    p.add_argument(
        "--transport",
        choices=("auto", "inprocess", "spark"),
        help="as lakestate run's (default: the app's lakestate.transport, else auto)",
    )
    p.add_argument("--warehouse", metavar="DIR")
    p.add_argument("--state-dir", metavar="DIR")
    return p


def _adopt_submit_master() -> None:
    """Make spark-submit's ``--master`` the one ``lakestate.runtime.spark_session.get_spark`` uses
    (it would otherwise set env ``LAKESTATE_SPARK_MASTER`` or ``local[*]`` over it)."""
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # not under spark-submit: get_spark decides
        return
    try:
        from pyspark import SparkConf, SparkContext

        SparkContext._ensure_initialized()  # joins the JVM spark-submit started; cheap
        master = SparkConf().get("spark.master", None)
    except Exception:  # no JVM to ask: get_spark decides
        return
    if master:
        os.environ["LAKESTATE_SPARK_MASTER"] = master


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _adopt_submit_master()
    from lakestate.runtime.cutoff import parse_timestamp
    from lakestate.scaleout.instance_run import run_app  # lazily: the file imports without Spark

    until = None if args.until_timestamp is None else parse_timestamp(args.until_timestamp)
    run_app(
        args.app,
        warehouse=args.warehouse,
        state_dir=args.state_dir,
        max_batches=args.max_batches,
        max_records=args.max_records,
        until_caught_up=args.until_caught_up,
        time_budget_s=args.time_budget,
        lock_wait_s=args.wait,
        until_timestamp=until,
        transport=args.transport,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
