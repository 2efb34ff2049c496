"""What a failure says, in one message a person reads, wherever it was raised.

An exception raised in Spark's Python workers reaches the driver wrapped: a
``PythonException`` holding the worker's traceback as text, or a ``Py4JJavaError`` whose
text is a Java stack trace with that traceback inside. ``message_of`` digs out the
original message (for a failing record, lakestate's ``ProcessingException``: node, topic,
partition, offset, key and the error) so that the terminal shows it, and the traces go to
the log file.
"""

from __future__ import annotations

import re

__all__ = ["message_of"]

# The last line of a Python traceback naming a lakestate exception, e.g.
# "lakestate.errors.ProcessingException: node X failed on record (...)".
_LAKESTATE_LINE = re.compile(r"^lakestate(?:\.\w+)*\.(\w+): ", re.MULTILINE)
_TRACEBACK = "Traceback (most recent call last):"
# Where a message embedded in a Java trace ends: a blank line, or the first stack frame.
_JAVA_FRAME = re.compile(r"^\s+at |^\s*\.\.\. \d+ more|^\s*Caused by: ")


def message_of(exc: BaseException) -> str:
    """The message of ``exc`` for a person: a lakestate error's own message (a plain
    ``ValueError`` too: how the CLI reports bad input); for an error
    wrapped by Spark or Py4J, the message of the innermost Python or Java exception (a
    lakestate one when there is one); for any other error, ``Type: message``."""
    from lakestate.errors import StreamsException

    if isinstance(exc, StreamsException) or type(exc) is ValueError:
        return str(exc)  # lakestate's errors, and the bad input the CLI reports
    module = type(exc).__module__
    if not module.startswith(("pyspark", "py4j")):
        return f"{type(exc).__name__}: {exc}"
    return _unwrap(str(exc)) or repr(exc)


def _unwrap(text: str) -> str:
    lines = text.strip().splitlines()
    found = list(_LAKESTATE_LINE.finditer(text))
    if found:
        last = found[-1]
        return _until_trace(text[last.end() :].splitlines())
    tb = [i for i, line in enumerate(lines) if line.strip().endswith(_TRACEBACK)]
    if tb:
        # The traceback's exception line: its first line after the frames, at column 0.
        for i in range(tb[-1] + 1, len(lines)):
            if lines[i] and not lines[i][0].isspace():
                return _until_trace(lines[i:])
    for line in lines:  # a Java trace: ": org.apache...SomeException: message"
        if line.startswith(": "):
            return line[2:].strip()
    return lines[0].strip() if lines else ""


def _until_trace(lines: list[str]) -> str:
    kept: list[str] = []
    for line in lines:
        if not line.strip() or _JAVA_FRAME.match(line):
            break
        kept.append(line.rstrip())
    return "\n".join(kept).strip()
