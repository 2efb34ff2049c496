"""What happens to a record that fails: Kafka Streams' exception handlers (KIP-1033's
``processing.exception.handler``, ``deserialization.exception.handler``) and KIP-1034's
dead-letter queue, decided in one place for the test driver and the engine.

- log-and-fail (the default of both): the error is raised; its task's batch fails and
  commits nothing (so no dead letter either: the record is retried by the next run).
- log-and-continue: the record is skipped as if it never arrived (the runtime undoes
  whatever it had done: see ``Task.abort`` and runtime/task_executor.py) and becomes a dead
  letter: a record of the dead-letter topic, committed exactly once with its batch, with
  the failed record's key, value and timestamp as read and the error in its headers.

The dead-letter topic is ``errors.dead.letter.queue.topic.name``; unlike Kafka, where a
skipped record is only logged unless that is set, lakestate always writes dead letters when
a handler continues: to ``<app>-dead-letters`` by default, so that nothing is lost.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lakestate.errors import StreamsException

PROCESSING_EXCEPTION_HANDLER = "processing.exception.handler"
DESERIALIZATION_EXCEPTION_HANDLER = "deserialization.exception.handler"
# Kafka's name before 4.0 (KIP-1056), accepted as the same setting.
DEFAULT_DESERIALIZATION_EXCEPTION_HANDLER = "default.deserialization.exception.handler"
DEAD_LETTER_QUEUE_TOPIC = "errors.dead.letter.queue.topic.name"

FAIL = "log_and_fail"
CONTINUE = "log_and_continue"

_KAFKA = "org.apache.kafka.streams.errors."
_PROCESSING_HANDLERS = {
    _KAFKA + "LogAndFailProcessingExceptionHandler": FAIL,
    _KAFKA + "LogAndContinueProcessingExceptionHandler": CONTINUE,
    FAIL: FAIL,
    CONTINUE: CONTINUE,
}
_DESERIALIZATION_HANDLERS = {
    _KAFKA + "LogAndFailExceptionHandler": FAIL,
    _KAFKA + "LogAndContinueExceptionHandler": CONTINUE,
    FAIL: FAIL,
    CONTINUE: CONTINUE,
}

# The kinds of failure, as the handler that deals with them.
PROCESSING = "processing"
DESERIALIZATION = "deserialization"

# Kafka's dead-letter headers (ExceptionHandlerUtils), values as strings like Kafka's.
HEADER_EXCEPTION = "__streams.errors.exception"
HEADER_MESSAGE = "__streams.errors.message"
HEADER_STACKTRACE = "__streams.errors.stacktrace"
HEADER_TOPIC = "__streams.errors.topic"
HEADER_PARTITION = "__streams.errors.partition"
HEADER_OFFSET = "__streams.errors.offset"
# lakestate's additions.
HEADER_NODE = "__streams.errors.node"
HEADER_APP = "__streams.errors.app"
HEADER_TASK = "__streams.errors.task"
HEADER_HANDLER = "__streams.errors.handler"
# The failed record's own headers, when they are not a JSON object (kept as read).
HEADER_ORIGINAL = "__streams.errors.original.headers"
# "base64" when the dead letter's key and value are the record's raw bytes, base64 strings.
HEADER_RAW_ENCODING = "__streams.errors.raw.encoding"

# Frames of the failure's stack trace kept in a dead letter (the innermost ones).
STACK_FRAMES = 8

DROPPED_RECORDS = "dropped-records"
DEAD_LETTER_RECORDS = "dead-letter-records"

log = logging.getLogger("lakestate.errors")


def default_dead_letter_topic(application_id: str) -> str:
    return f"{application_id}-dead-letters"


@dataclass(frozen=True)
class ExceptionHandlers:
    """An app's handlers. ``dead_letter_topic``: where skipped records go; None when no
    handler continues (a failure then always fails the batch). ``topic_if_continued``:
    where they would go if a handler continued (what a failure's advice names)."""

    processing: str = FAIL
    deserialization: str = FAIL
    dead_letter_topic: str | None = None
    topic_if_continued: str | None = None

    @classmethod
    def from_config(cls, config: Mapping[str, Any], application_id: str) -> ExceptionHandlers:
        """The handlers ``config`` names; a clear StreamsException for an unknown one."""
        processing = _choice(config, PROCESSING_EXCEPTION_HANDLER, _PROCESSING_HANDLERS)
        deserialization = _choice(
            config, DESERIALIZATION_EXCEPTION_HANDLER, _DESERIALIZATION_HANDLERS
        )
        old = _choice(config, DEFAULT_DESERIALIZATION_EXCEPTION_HANDLER, _DESERIALIZATION_HANDLERS)
        if DESERIALIZATION_EXCEPTION_HANDLER not in config:
            deserialization = old
        topic = config.get(DEAD_LETTER_QUEUE_TOPIC)
        if topic is not None and (not isinstance(topic, str) or not topic.strip()):
            raise StreamsException(
                f"config {DEAD_LETTER_QUEUE_TOPIC} must be a topic name, got {topic!r}"
            )
        if topic is None:
            topic = default_dead_letter_topic(application_id)
        # With no handler continuing every failure fails its batch: nothing is written there.
        written = topic if CONTINUE in (processing, deserialization) else None
        return cls(processing, deserialization, written, topic)

    def handler(self, kind: str) -> str:
        return self.processing if kind == PROCESSING else self.deserialization

    def advice(self, kind: str) -> str:
        """What to do about a record that failed under log-and-fail (``kind``: PROCESSING
        or DESERIALIZATION): the handler setting, its values and the dead-letter topic."""
        key = (
            PROCESSING_EXCEPTION_HANDLER
            if kind == PROCESSING
            else DESERIALIZATION_EXCEPTION_HANDLER
        )
        return (
            f"{key} is {FAIL}, so the batch failed and the next run retries the record: fix "
            f"the record or the app, or set {key} to {CONTINUE} (values: {FAIL}, "
            f"{CONTINUE}) to skip failing records to the dead-letter topic "
            f"{self.topic_if_continued!r} ({DEAD_LETTER_QUEUE_TOPIC})"
        )


def _choice(config: Mapping[str, Any], key: str, known: dict[str, str]) -> str:
    value = config.get(key, FAIL)
    found = known.get(value) if isinstance(value, str) else None
    if found is None:
        raise StreamsException(
            f"config {key} = {value!r} is not a handler lakestate has; use one of "
            + ", ".join(repr(k) for k in known)
        )
    return found


@dataclass(frozen=True)
class RecordFailure:
    """A record that failed, with what a dead letter needs: where it was read, its key,
    value and headers as JSON text as read (``None``: null), the node that failed, and the
    error (``message``: the one line naming all of them; ``error``: the exception itself)."""

    kind: str  # PROCESSING or DESERIALIZATION
    node: str
    topic: str
    partition: int
    offset: int | None
    timestamp: int
    key_text: str | None
    value_text: str | None
    headers_text: str | None
    message: str
    error: BaseException
    # The key and value texts are the record's raw bytes, as base64 JSON strings (a Kafka
    # record read with serdes other than Json).
    raw_bytes: bool = False


def one_line(text: str) -> str:
    """``text`` on one line (an exception's message may hold newlines)."""
    return " | ".join(part.strip() for part in str(text).splitlines() if part.strip())


def exception_text(exc: BaseException) -> str:
    """``Type: message``, on one line."""
    return f"{type(exc).__name__}: {one_line(str(exc))}"


def log_continued(failure: RecordFailure, topic: str) -> None:
    log.warning("skipped (%s, dead letter in %r): %s", CONTINUE, topic, failure.message)


def dead_letter_headers(
    failure: RecordFailure, application_id: str, task: str, original: Any
) -> dict[str, Any]:
    """The dead letter's headers: the failed record's own (``original``, decoded; anything
    but a JSON object is kept as text under HEADER_ORIGINAL), then the error's."""
    headers: dict[str, Any] = {}
    if isinstance(original, dict):
        headers.update(original)
    elif failure.headers_text is not None:
        headers[HEADER_ORIGINAL] = failure.headers_text
    error = failure.error
    kind = type(error)
    name = (
        kind.__qualname__
        if kind.__module__ == "builtins"
        else f"{kind.__module__}.{kind.__qualname__}"
    )
    frames = traceback.extract_tb(error.__traceback__)[-STACK_FRAMES:]
    lines = "".join(traceback.format_list(frames)).splitlines()
    # Without the lines of carets under a frame's code (Python 3.11+): just the frames.
    stack = "\n".join(line for line in lines if line.strip(" ^~")) + "\n" + exception_text(error)
    headers.update(
        {
            HEADER_EXCEPTION: name,
            HEADER_MESSAGE: str(error),
            HEADER_STACKTRACE: stack,
            HEADER_TOPIC: failure.topic,
            HEADER_PARTITION: str(failure.partition),
            HEADER_OFFSET: "" if failure.offset is None else str(failure.offset),
            HEADER_NODE: failure.node,
            HEADER_APP: application_id,
            HEADER_TASK: task,
            HEADER_HANDLER: failure.kind,
        }
    )
    if failure.raw_bytes:
        headers[HEADER_RAW_ENCODING] = "base64"
    return headers


__all__ = [
    "CONTINUE",
    "DEAD_LETTER_QUEUE_TOPIC",
    "DESERIALIZATION_EXCEPTION_HANDLER",
    "FAIL",
    "PROCESSING_EXCEPTION_HANDLER",
    "ExceptionHandlers",
    "RecordFailure",
    "dead_letter_headers",
    "default_dead_letter_topic",
]
