"""``lakestate produce``: append JSON-lines records to a topic (created if missing): its log
table, through delta-rs, or with ``--bootstrap-servers`` a Kafka topic. No JVM."""

from __future__ import annotations

import argparse
import json
import sys
from typing import IO, TYPE_CHECKING, Any

from lakestate.cli import kafka_arg

if TYPE_CHECKING:
    from lakestate.cli.main import Context


def configure(p: argparse.ArgumentParser) -> None:
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
    kafka_arg.configure(p)


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


def run(args: argparse.Namespace, ctx: Context) -> int:
    from lakestate.io import topics

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
    topic = kafka_arg.topic_of(args, ctx, args.topic)  # read and written without a JVM
    created = False
    if topic.exists():
        n = topic.partitions()
        if args.partitions is not None and args.partitions != n:
            raise ValueError(
                f"topic {args.topic!r} exists with {n} partitions; --partitions {args.partitions} "
                "does not match (a topic's partition count never changes)"
            )
    else:
        n = args.partitions or 1
        # Validate before creating, so a bad file leaves no empty topic behind.
        topics.validate_records(records, n, labels)
        topic.create(n)
        created = True
        on = "" if topic.kind != "kafka" else f" in {kafka_arg.where(args, ctx)}"
        ctx.say(f"created topic {args.topic}{on} with {n} partition{'s' if n != 1 else ''}")
    result = topic.append(records, labels=labels)
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
