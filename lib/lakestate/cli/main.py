"""The ``lakestate`` command line.

This module holds the parser, the ``Context`` a command runs with and the dispatch. Each
subcommand is a module of this package (``cli/run.py``, ``cli/sql.py``, ``cli/status.py``,
``cli/demo.py`` ...) with two functions, ``configure(parser)`` adding its arguments and
``run(args, ctx) -> int``, registered in one table, ``COMMANDS``. To add one, write the
module and add a ``Command`` to ``COMMANDS``. A command module imports what it runs inside
``run``, so that parsing the command line loads none of it (``lakestate status`` starts no
JVM; the demo's printers load only for ``lakestate demo``).

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
from lakestate.cli import (
    compact,
    consume,
    convert,
    demo,
    describe,
    maintain,
    produce,
    rebalance,
    rewind,
    run,
    sql,
    status,
)
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

            from lakestate.object_store import is_s3
            from lakestate.runtime.spark_session import get_spark

            self._owns_spark = SparkSession.getActiveSession() is None
            self._spark = get_spark(self.master, s3=is_s3(self.warehouse.root))
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


# -- the table ----------------------------------------------------------------------------

#: Every subcommand, by name, in the order ``--help`` lists them.
COMMANDS: dict[str, Command] = {
    "produce": Command(
        help="append JSON-lines records to a topic's log table",
        configure=produce.configure,
        run=produce.run,
    ),
    "consume": Command(
        help="print a topic's records as JSON lines, in partition/offset order",
        configure=consume.configure,
        run=consume.run,
    ),
    "run": Command(
        help="run micro-batches of an app (exactly once, state in Delta)",
        configure=run.configure,
        run=run.run,
    ),
    "sql": Command(
        help="run Spark SQL over every topic and state table of the warehouse (in process "
        "with DuckDB; --engine spark on Spark)",
        configure=sql.configure,
        run=sql.run,
    ),
    "describe": Command(
        help="an app's sub-topologies, tasks, topics (partitions, end offsets), stores "
        "(kind, SQL views, changelogs) and config; or a topic's partitions and end offsets",
        configure=describe.configure,
        run=describe.run,
    ),
    "status": Command(
        help="every task of an app: committed, end and local offsets, lag, last batch, "
        "stream time, metrics totals per operator (no Spark)",
        configure=status.configure,
        run=status.run,
    ),
    "convert": Command(
        help="convert an app's state from lakestate's first format (batch log, MERGE-written "
        "state tables) to changelogs",
        configure=convert.configure,
        run=convert.run,
    ),
    "compact": Command(
        help="rewrite an app's changelogs up to each task's last complete batch as one row "
        "per live key (safe while batches run)",
        configure=compact.configure,
        run=compact.run,
    ),
    "maintain": Command(
        help="compaction, OPTIMIZE and VACUUM of an app's tables (safe while batches run)",
        configure=maintain.configure,
        run=maintain.run,
    ),
    "rewind": Command(
        help="restore an app's sinks and state to an earlier batch (Delta time travel) so "
        "its next run reprocesses from there; asks first",
        configure=rewind.configure,
        run=rewind.run,
    ),
    "rebalance": Command(
        help="compute the app's next assignment of tasks to its instances when the instances "
        "or their lags changed (or --force), put it in force, print old and new (no Spark)",
        configure=rebalance.configure,
        run=rebalance.run,
    ),
    "demo": Command(
        help="produce sample events, run the demo DAG through Airflow, print the results",
        configure=demo.configure,
        run=demo.run,
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
            ctx.warehouse.check()  # an object store that cannot be used fails here, at once
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
