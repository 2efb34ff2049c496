"""``lakestate consume``: print a topic's records as JSON lines, partition by partition in
offset order (through delta-rs, or ``--engine spark``); with ``--bootstrap-servers`` a Kafka
topic's, as a read_committed consumer sees them."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from lakestate.cli import kafka_arg

if TYPE_CHECKING:
    from lakestate.cli.main import Context


def configure(p: argparse.ArgumentParser) -> None:
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
    kafka_arg.configure(p)


def run(args: argparse.Namespace, ctx: Context) -> int:
    """Print the topic's records as JSON lines, partition by partition in offset order."""
    from lakestate.io import topics

    topic = kafka_arg.topic_of(args, ctx, args.topic)
    if not topic.exists():
        raise ValueError(f"topic {args.topic!r} does not exist in {kafka_arg.where(args, ctx)}")
    n = topic.partitions()
    wrong = sorted({p for p in args.partition or () if not 0 <= p < n})
    if wrong:
        raise ValueError(
            f"topic {args.topic!r} has {n} partition{'s' if n != 1 else ''} (0..{n - 1}); "
            f"no partition {', '.join(map(str, wrong))}"
        )
    limit = None if args.max_messages is None else max(args.max_messages, 0)
    if args.engine == "spark":
        from lakestate.runtime import spark_topics

        df = spark_topics.read_topic(ctx.spark, topic, partitions=args.partition)
        records = spark_topics.iter_records(df if limit is None else df.limit(limit))
    else:
        records = (
            record
            for table in topic.read_partitions(args.partition, limit)
            for record in topics.records_of(table)
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
