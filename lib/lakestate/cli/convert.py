"""``lakestate convert``: an app's state from lakestate's first format (batch log,
MERGE-written state tables) to changelogs (``lakestate.ops.convert``)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lakestate.cli.main import Context


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("app", help="the app module, e.g. jobs/demo.py")


def run(args: argparse.Namespace, ctx: Context) -> int:
    from lakestate.app import load_app
    from lakestate.ops.convert import convert as convert_app

    convert_app(ctx.spark, ctx.warehouse, load_app(args.app), say=ctx.print)
    return 0
