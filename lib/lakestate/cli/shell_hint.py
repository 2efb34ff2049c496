"""Commands the CLI prints for people to paste into a POSIX shell (bash, zsh, sh).

A hint must run as printed: ``lakestate sql "... WHERE key = '"customer-19"'"`` does not (the
shell ends the double-quoted word at the first inner ``"``, and the query it gets compares
with ``'customer-19'``, finding nothing). ``sql_command`` quotes the query so that the shell
hands it over unchanged.
"""

from __future__ import annotations

import re
import shlex

__all__ = ["sql_command"]

# Inside double quotes the shell still expands these: $ (unless before ".", as in a JSON
# path '$.key'), `, \ and ", so each gets a backslash.
_SPECIAL = re.compile(r'[`"\\]|\$(?!\.)')


def sql_command(query: str) -> str:
    """``lakestate sql QUERY`` as a shell command that passes ``query`` as it is: in double
    quotes (readable: SQL's own quotes are single), with a backslash before each character
    the shell would expand; in single quotes when the query holds a ``!`` (interactive
    bash expands it even in double quotes)."""
    if "!" in query:
        return f"lakestate sql {shlex.quote(query)}"
    return 'lakestate sql "' + _SPECIAL.sub(lambda m: "\\" + m.group(0), query) + '"'
