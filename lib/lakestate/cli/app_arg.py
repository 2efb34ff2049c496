"""The app argument of the commands that need only an app's name: the name, or the app's
module (``jobs/demo.py``), whose app's name is then used."""

from __future__ import annotations


def app_name(arg: str) -> str:
    """The app's name ``arg`` gives: ``arg`` itself, or the name of the app its module
    (ending ``.py``) defines."""
    if not arg.endswith(".py"):
        return arg
    from lakestate.app import load_app

    return load_app(arg).name
