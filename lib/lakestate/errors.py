"""The exceptions lakestate raises. Names follow Kafka Streams."""


class StreamsException(Exception):
    """Base class of every lakestate error."""


class TopologyException(StreamsException):
    """The topology is invalid; the message names the offending node."""


class SerializationException(StreamsException):
    """A key or value could not be encoded or decoded. When raised for a record, ``node``
    names the node that failed (the source node when the record could not be decoded)."""

    node: str | None = None


class ProcessingException(StreamsException):
    """Processing a record failed; the message is one line naming the node, the record's
    topic, partition, offset and key, and the exception (``__cause__`` is the exception
    itself). ``node`` names the node that failed.

    The record's changes are not applied: the state stays as it was before it.
    """

    node: str | None = None


class InvalidStateStoreException(StreamsException):
    """A store or transaction was used in a state that does not allow it (closed, committed)."""


class TaskMigratedException(StreamsException):
    """Another run committed the batch first; this run must stop without committing."""
