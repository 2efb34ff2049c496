"""The checks every DSL operator applies to its arguments when it is called, so that a
mistake fails at build time naming the operator, rather than silently meaning something
else or failing on every record at run time.

- A duration is a ``datetime.timedelta``, everywhere: an int is refused, not taken as
  milliseconds (an unlabelled number means seconds to some users and ms to others).
- A user function must be callable with the arguments the operator passes it, when Python
  can tell: builtins and C functions may have no signature, and are accepted.
"""

from __future__ import annotations

import inspect
import os
from typing import Any

from lakestate.errors import TopologyException
from lakestate.records import duration_millis


def duration_ms(value: Any, argument: str, operator: str, positive: bool = False) -> int:
    """Milliseconds of ``value``, a ``timedelta`` of zero or more (more than zero when
    ``positive``); else a TopologyException naming ``argument`` of ``operator``."""
    try:
        return duration_millis(value, f"{operator}: {argument}", positive)
    except (TypeError, ValueError) as exc:
        raise TopologyException(str(exc)) from None


def check_function(fn: Any, node: str, operator: str, signature: str) -> None:
    """``fn`` must be callable as ``signature`` says (``"mapper(value)"``: one positional
    argument); else a TopologyException naming the node, the operator and the signature."""
    what, _, rest = signature.partition("(")
    params = [p for p in rest.rstrip(")").split(", ") if p]
    if not callable(fn):
        raise TopologyException(
            f"node {node}: {what} must be callable ({operator} calls {signature}), got {fn!r}"
        )
    try:
        own = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # no signature to check (a builtin, a C function): accepted
    try:
        own.bind(*params)
    except TypeError:
        count = f"{len(params)} argument{'s' if len(params) != 1 else ''}"
        raise TopologyException(
            f"node {node}: {operator} calls {signature} with {count}, but {what} is "
            f"{_describe(fn, own)}: pass a function of ({', '.join(params)})"
        ) from None


def _describe(fn: Any, signature: inspect.Signature) -> str:
    """The function's name and parameters, and where it is defined when Python knows
    (a lambda's name says nothing)."""
    name = getattr(fn, "__name__", None) or type(fn).__name__
    code = getattr(fn, "__code__", None)
    if code is None:
        return f"{name}{signature}"
    return f"{name}{signature} at {os.path.basename(code.co_filename)}:{code.co_firstlineno}"
