"""The options that point ``produce``, ``consume`` and ``describe`` at a topic of a Kafka
cluster instead of the warehouse: ``--bootstrap-servers HOST:PORT`` and the topic's key and
value serdes (``--key-serde``, ``--value-serde``, as Kafka's console tools'
``key.deserializer``)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lakestate.cli.main import Context
    from lakestate.io.topics import Topic

#: The serdes a command line can name (``lakestate.serdes.Serdes``' methods, lower case).
SERDE_NAMES = ("json", "string", "long", "integer", "double", "bytes")
FLAG = "--bootstrap-servers"


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        FLAG,
        metavar="HOST:PORT",
        help="a topic of this Kafka cluster (comma-separated brokers), not of the warehouse",
    )
    for part in ("key", "value"):
        p.add_argument(
            f"--{part}-serde",
            choices=SERDE_NAMES,
            help=f"a Kafka topic's {part} serde (default json); records give the {part} in "
            "its JSON form: a long as a number, bytes as base64 text",
        )


def topic_of(args: argparse.Namespace, ctx: Context, name: str) -> Topic:
    """Topic ``name``: of the Kafka cluster ``--bootstrap-servers`` names (checked to answer
    within seconds), with the serdes given, else of the warehouse."""
    from lakestate.io import topics

    if args.bootstrap_servers is None:
        given = [f"--{p}-serde" for p in ("key", "value") if getattr(args, f"{p}_serde")]
        if given:
            raise ValueError(
                f"{' and '.join(given)} apply to a Kafka topic: give {FLAG} HOST:PORT (a "
                "log table holds every key and value as JSON text)"
            )
        return topics.topic(ctx.warehouse, name)
    from lakestate.io.kafka import connect
    from lakestate.serdes import Serde, Serdes, TopicSerdes

    def serde(choice: str | None) -> Serde:
        return getattr(Serdes, (choice or "json").capitalize())()

    cluster = connect({"bootstrap.servers": args.bootstrap_servers}, FLAG)
    serdes = TopicSerdes(serde(args.key_serde), serde(args.value_serde))
    return topics.topic(ctx.warehouse, name, cluster=cluster, serdes=serdes)


def where(args: argparse.Namespace, ctx: Context) -> str:
    """Where ``topic_of`` looked, for an error message."""
    if args.bootstrap_servers is None:
        return str(ctx.warehouse.root)
    return f"the Kafka cluster {args.bootstrap_servers} ({FLAG})"
