"""Constants of the state layer, in one place."""

# Namespaces ("column families") a task's store always holds besides the user stores.
OFFSETS_NAMESPACE = "__offsets__"
META_NAMESPACE = "__meta__"
RESERVED_NAMESPACES = frozenset({OFFSETS_NAMESPACE, META_NAMESPACE})

# Keys in the meta namespace.
STREAM_TIME_KEY = b"stream_time"

# Config keys (Kafka's names) and defaults.
PROCESSING_GUARANTEE = "processing.guarantee"
EXACTLY_ONCE_V2 = "exactly_once_v2"
AT_LEAST_ONCE = "at_least_once"
UNCOMMITTED_MAX_RECORDS = "statestore.uncommitted.max.records"
UNCOMMITTED_MAX_BYTES = "statestore.uncommitted.max.bytes"
DEFAULT_UNCOMMITTED_MAX_RECORDS = 1_000_000
DEFAULT_UNCOMMITTED_MAX_BYTES = 64 * 1024 * 1024

# Fixed per-entry overhead counted by approximate_num_uncommitted_bytes (buffer bookkeeping).
ENTRY_OVERHEAD_BYTES = 64

# Sentinel returned by versioned stores' put when history retention had already passed.
PUT_RETURN_CODE_NOT_PUT = -(2**63)
PUT_RETURN_CODE_VALID_TO_UNDEFINED = -1
