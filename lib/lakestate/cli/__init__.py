"""The ``lakestate`` command: one module per command, ``main`` parses and dispatches."""

from lakestate.cli.main import Context, build_parser, entrypoint, main

__all__ = ["Context", "build_parser", "entrypoint", "main"]
