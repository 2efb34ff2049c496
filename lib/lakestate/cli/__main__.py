"""``python -m lakestate.cli``: the ``lakestate`` command."""

from lakestate.cli.main import entrypoint

entrypoint()
