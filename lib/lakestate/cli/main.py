"""The ``lakestate`` command line.

Each subcommand is a small function ``run(args, ctx) -> int`` plus a function adding its
arguments, registered in one table, ``COMMANDS``. To add one (``run``, ``sql``, ``status``,
``compact``, ``demo`` ...) write the two functions and add a ``Command`` to ``COMMANDS``.

Global options: ``--warehouse DIR`` (else env ``LAKESTATE_WAREHOUSE``, else ``./warehouse``)
and ``--master URL`` (else env ``LAKESTATE_SPARK_MASTER``, else ``local[*]``). Spark starts
only when a command asks ``ctx.spark``; it is stopped on exit if the CLI started it.

Exit codes: 0 success, 1 an error (bad input, a missing topic, a failing record...), 2 usage
error, 130 interrupted.

What a person reads: results on stdout; on a failure one line on stderr,
``lakestate COMMAND: error: MESSAGE``, and the path of the invocation's log file
(``lakestate.logfile``), which holds the full traceback, Spark's and Ivy's output and the
commands' progress messages. ``--quiet``: ``run``, ``produce``, ``compact`` and ``maintain``
print nothing but errors. ``--json``: results as JSON only. Progress bars
(``lakestate.console``) are drawn on stderr when it is a terminal, unless ``--quiet`` or
``--json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO, Any

from lakestate import console, logfile
from lakestate.cli import commands
from lakestate.runtime.failure import message_of
from lakestate.warehouse import Warehouse

__all__ = ["COMMANDS", "Command", "Context", "build_parser", "main"]

log = logging.getLogger("lakestate.cli")


class Context:
    """What a command runs with: the warehouse, output streams and a lazy SparkSession."""

    def __init__(
        self,
        warehouse: Warehouse,
        master: str | None = None,
        stdout: IO[str] | None = None,
        stderr: IO[str] | None = None,
        quiet: bool = False,
        json_output: bool = False,
    ) -> None:
        self.warehouse = warehouse
        self.master = master
        #: ``--quiet``: print results and errors only (no progress, no chatter).
        self.quiet = quiet
        #: ``--json``: print results as JSON (a document, or JSON lines for records).
        self.json_output = json_output
        self.stdout = stdout if stdout is not None else sys.stdout
        self.stderr = stderr if stderr is not None else sys.stderr
        self._spark: Any = None
        self._owns_spark = False

    @property
    def spark(self) -> Any:
        """The SparkSession (started on first use; an already running one is reused)."""
        if self._spark is None:
            from pyspark.sql import SparkSession

            from lakestate.runtime.spark_session import get_spark

            self._owns_spark = SparkSession.getActiveSession() is None
            self._spark = get_spark(self.master)
        return self._spark

    def print(self, *values: Any) -> None:
        """Print a result (always, ``--quiet`` or not)."""
        console.echo(" ".join(str(v) for v in values), self.stdout)

    def say(self, text: str) -> None:
        """Say what is happening or what was done: to the log file always, and to stdout
        unless ``--quiet`` or ``--json`` (whose stdout holds the JSON result only)."""
        log.info("%s", text)
        if not (self.quiet or self.json_output):
            console.echo(text, self.stdout)

    def print_json(self, document: Any) -> None:
        """Print ``document`` as one line of JSON (the result under ``--json``)."""
        console.echo(json.dumps(document, ensure_ascii=False, sort_keys=True), self.stdout)

    def close(self) -> None:
        if self._spark is not None and self._owns_spark:
            from lakestate.runtime.spark_session import stop_spark

            stop_spark()
        self._spark = None


@dataclass(frozen=True)
class Command:
    """A subcommand: its help line, a function adding its arguments, and what it runs."""

    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, Context], int]
    description: str | None = None


# -- produce ------------------------------------------------------------------------------


def _produce_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("topic", help="topic to append to (created if missing)")
    p.add_argument(
        "file",
        help='JSON lines, one record a line: {"key": ..., "value": ..., "timestamp": ms '
        '(optional), "partition": n (optional), "headers": {...} (optional)}; "-" for stdin',
    )
    p.add_argument(
        "--partitions",
        type=int,
        metavar="N",
        help="partition count when the topic is created (default 1); if the topic exists "
        "it must have N partitions",
    )


def _read_jsonl(stream: IO[str]) -> tuple[list[Any], list[str]]:
    records: list[Any] = []
    labels: list[str] = []
    errors: list[str] = []
    for lineno, line in enumerate(stream, start=1):
        if not line.strip():
            continue
        # Without its newline: a line cut short is then wrong at its end, not at column 1
        # of a next line.
        text = line.rstrip("\r\n")
        try:
            records.append(json.loads(text))
        except json.JSONDecodeError as e:
            at = "the end of the line" if e.pos >= len(text.rstrip()) else f"column {e.colno}"
            errors.append(f"line {lineno}: not valid JSON: {e.msg} at {at}")
            continue
        labels.append(f"line {lineno}")
    if errors:
        raise ValueError(
            f"{len(errors)} invalid line{'s' if len(errors) != 1 else ''}, nothing written:\n  "
            + "\n  ".join(errors[:10])
            + (f"\n  ... and {len(errors) - 10} more" if len(errors) > 10 else "")
        )
    return records, labels


def _produce(args: argparse.Namespace, ctx: Context) -> int:
    from lakestate.io import logtable

    if args.partitions is not None and args.partitions < 1:
        raise ValueError(f"--partitions must be at least 1, got {args.partitions}")
    if args.file == "-":
        records, labels = _read_jsonl(sys.stdin)
    else:
        try:
            with open(args.file, encoding="utf-8") as f:
                records, labels = _read_jsonl(f)
        except OSError as e:
            raise ValueError(f"cannot read {args.file}: {e.strerror}") from None
    spark = None  # log tables are read and written by delta-rs: no JVM
    created = False
    if logtable.topic_exists(spark, ctx.warehouse, args.topic):
        n = logtable.partitions(spark, ctx.warehouse, args.topic)
        if args.partitions is not None and args.partitions != n:
            raise ValueError(
                f"topic {args.topic!r} exists with {n} partitions; --partitions {args.partitions} "
                "does not match (a topic's partition count never changes)"
            )
    else:
        n = args.partitions or 1
        # Validate before creating, so a bad file leaves no empty topic behind.
        logtable.validate_records(records, n, labels)
        logtable.create_topic(ctx.warehouse, args.topic, n)
        created = True
        ctx.say(f"created topic {args.topic} with {n} partition{'s' if n != 1 else ''}")
    result = logtable.append_records(spark, ctx.warehouse, args.topic, records, labels=labels)
    if ctx.json_output:
        ranges = {str(p): {"start": s, "end": e} for p, (s, e) in sorted(result.ranges.items())}
        ctx.print_json(
            {"topic": args.topic, "created": created, "records": result.total, "partitions": ranges}
        )
        return 0
    ctx.say(f"appended {result.total} record{'s' if result.total != 1 else ''} to {args.topic}")
    for p, (start, end) in sorted(result.ranges.items()):
        ctx.say(f"  partition {p}: {end - start} (offsets {start}..{end - 1})")
    return 0


# -- consume ------------------------------------------------------------------------------


def _consume_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("topic", help="topic to read")
    p.add_argument(
        "--from-beginning",
        action="store_true",
        default=True,
        help="read from offset 0 (the default: log tables keep every record)",
    )
    p.add_argument(
        "--partition", type=int, action="append", metavar="P", help="only partition P (repeatable)"
    )
    p.add_argument(
        "--max-messages", type=int, metavar="N", help="stop after N records (in output order)"
    )
    p.add_argument(
        "--engine",
        choices=("arrow", "spark"),
        default="arrow",
        help="arrow (default): read through delta-rs in this process, no JVM; spark: read "
        "with Spark",
    )


def _consume(args: argparse.Namespace, ctx: Context) -> int:
    """Print the topic's records as JSON lines, partition by partition in offset order."""
    from lakestate.io import logtable

    if not logtable.topic_exists(None, ctx.warehouse, args.topic):
        raise ValueError(f"topic {args.topic!r} does not exist in {ctx.warehouse.root}")
    n = logtable.partitions(None, ctx.warehouse, args.topic)
    wrong = sorted({p for p in args.partition or () if not 0 <= p < n})
    if wrong:
        raise ValueError(
            f"topic {args.topic!r} has {n} partition{'s' if n != 1 else ''} (0..{n - 1}); "
            f"no partition {', '.join(map(str, wrong))}"
        )
    limit = None if args.max_messages is None else max(args.max_messages, 0)
    if args.engine == "spark":
        df = logtable.read_topic(ctx.spark, ctx.warehouse, args.topic, partitions=args.partition)
        records = logtable.iter_records(df if limit is None else df.limit(limit))
    else:
        records = (
            logtable.LogRecord(
                r["partition"],
                r["offset"],
                r["timestamp"],
                logtable.decode_json(r["key"]),
                logtable.decode_json(r["value"]),
                logtable.decode_json(r["headers"]),
            )
            for table in logtable.read_partitions_arrow(
                ctx.warehouse, args.topic, args.partition, limit
            )
            for r in table.to_pylist()
        )
    for r in records:
        out: dict[str, Any] = {
            "partition": r.partition,
            "offset": r.offset,
            "timestamp": r.timestamp,
            "key": r.key,
            "value": r.value,
        }
        if r.headers is not None:
            out["headers"] = r.headers
        ctx.print(json.dumps(out, ensure_ascii=False))
    return 0


# -- the table ----------------------------------------------------------------------------

#: Every subcommand, by name, in the order ``--help`` lists them.
COMMANDS: dict[str, Command] = {
    "produce": Command(
        help="append JSON-lines records to a topic's log table",
        configure=_produce_args,
        run=_produce,
    ),
    "consume": Command(
        help="print a topic's records as JSON lines, in partition/offset order",
        configure=_consume_args,
        run=_consume,
    ),
    "run": Command(
        help="run micro-batches of an app (exactly once, state in Delta)",
        configure=commands.run_args,
        run=commands.run,
    ),
    "sql": Command(
        help="run Spark SQL over every topic and state table of the warehouse (in process "
        "with DuckDB; --engine spark on Spark)",
        configure=commands.sql_args,
        run=commands.sql,
    ),
    "describe": Command(
        help="an app's sub-topologies, tasks, topics (partitions, end offsets), stores "
        "(kind, SQL views, changelogs) and config; or a topic's partitions and end offsets",
        configure=commands.describe_args,
        run=commands.describe,
    ),
    "status": Command(
        help="every task of an app: committed, end and local offsets, lag, last batch, "
        "stream time, metrics totals per operator (no Spark)",
        configure=commands.status_args,
        run=commands.status,
    ),
    "convert": Command(
        help="convert an app's state from lakestate's first format (batch log, MERGE-written "
        "state tables) to changelogs",
        configure=commands.convert_args,
        run=commands.convert,
    ),
    "compact": Command(
        help="rewrite an app's changelogs up to each task's last complete batch as one row "
        "per live key (safe while batches run)",
        configure=commands.compact_args,
        run=commands.compact,
    ),
    "maintain": Command(
        help="compaction, OPTIMIZE and VACUUM of an app's tables (safe while batches run)",
        configure=commands.maintain_args,
        run=commands.maintain,
    ),
    "rewind": Command(
        help="restore an app's sinks and state to an earlier batch (Delta time travel) so "
        "its next run reprocesses from there; asks first",
        configure=commands.rewind_args,
        run=commands.rewind,
    ),
    "rebalance": Command(
        help="compute the app's next assignment of tasks to its instances when the instances "
        "or their lags changed (or --force), put it in force, print old and new (no Spark)",
        configure=commands.rebalance_args,
        run=commands.rebalance,
    ),
    "demo": Command(
        help="produce sample events, run the demo DAG through Airflow, print the results",
        configure=commands.demo_args,
        run=commands.demo,
    ),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lakestate",
        description="Kafka Streams' stateful semantics on PySpark micro-batches with Delta "
        "Lake state.",
    )
    parser.add_argument(
        "--warehouse",
        metavar="DIR",
        help="warehouse root (default: env LAKESTATE_WAREHOUSE, else ./warehouse)",
    )
    parser.add_argument(
        "--master",
        metavar="URL",
        help="Spark master (default: env LAKESTATE_SPARK_MASTER, else local[*])",
    )
    parser.add_argument("--quiet", "-q", action="store_true", help="print results and errors only")
    parser.add_argument("--json", action="store_true", help="print results as JSON")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, command in COMMANDS.items():
        p = sub.add_parser(name, help=command.help, description=command.description or command.help)
        # The global options are accepted after the subcommand too (lakestate run X --warehouse D).
        p.add_argument(
            "--warehouse",
            metavar="DIR",
            default=argparse.SUPPRESS,
            help="warehouse root (as the global option)",
        )
        p.add_argument(
            "--master",
            metavar="URL",
            default=argparse.SUPPRESS,
            help="Spark master (as the global option)",
        )
        p.add_argument(
            "--quiet",
            "-q",
            action="store_true",
            default=argparse.SUPPRESS,
            help="print results and errors only (as the global option)",
        )
        p.add_argument(
            "--json",
            action="store_true",
            default=argparse.SUPPRESS,
            help="print results as JSON (as the global option)",
        )
        command.configure(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI with ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, or a usage error argparse already printed
        return e.code if isinstance(e.code, int) else 2
    run_log = logfile.start(args.command)
    ctx = Context(
        Warehouse(args.warehouse), master=args.master, quiet=args.quiet, json_output=args.json
    )
    if not (ctx.quiet or ctx.json_output) and _is_terminal(ctx.stderr):
        console.enable(ctx.stderr)
    log.info("lakestate %s", " ".join(sys.argv[1:] if argv is None else argv))
    try:
        try:
            return COMMANDS[args.command].run(args, ctx)
        finally:
            ctx.close()
    except BrokenPipeError:  # e.g. `lakestate consume t | head`
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        log.warning("interrupted", exc_info=True)
        print(f"lakestate {args.command}: interrupted\nfull log: {run_log.path}", file=ctx.stderr)
        return 130
    except Exception as e:  # one line for a person; the traceback goes to the log file
        message = message_of(e)
        log.error("lakestate %s failed: %s", args.command, message, exc_info=True)
        print(f"lakestate {args.command}: error: {message}", file=ctx.stderr)
        print(f"full log: {run_log.path}", file=ctx.stderr)
        return 1
    finally:
        console.disable()
        logfile.stop()


def _is_terminal(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def entrypoint() -> None:
    """The ``lakestate`` command (and ``python -m lakestate.cli``): ``main()``, then an exit
    that skips the interpreter's teardown once the output is flushed.

    pyarrow's dataset scanner, behind delta-rs reads, can leave C++ threads that abort the
    process (``terminate called without an active exception``, exit 134) while Python tears
    down, after the command's work is done (apache/arrow#34314)."""
    code = main()
    for stream in (sys.stdout, sys.stderr):
        # A closed pipe: nothing left to flush to.
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    logging.shutdown()
    os._exit(code)


if __name__ == "__main__":
    entrypoint()
