"""The exceptions lakestate raises. Names follow Kafka Streams."""


class StreamsException(Exception):
    """Base class of every lakestate error."""


class TopologyException(StreamsException):
    """The topology is invalid; the message names the offending node."""


class SerializationException(StreamsException):
    """A key or value could not be encoded or decoded."""


class ProcessingException(StreamsException):
    """Processing a record failed; the message names the node and the record.

    The record's changes are not applied: the state stays as it was before it.
    """


class InvalidStateStoreException(StreamsException):
    """A store or transaction was used in a state that does not allow it (closed, committed)."""


class TaskMigratedException(StreamsException):
    """Another run committed the batch first; this run must stop without committing."""
