"""A Kafka cluster an app reads and writes: its client settings, from the app's config, and
the clients made from them (confluent-kafka, librdkafka)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

#: The app config key that puts an app's source and sink topics in a Kafka cluster.
BOOTSTRAP_SERVERS = "bootstrap.servers"
# Client settings taken from an app's config as they are (Kafka Streams passes these to all
# its clients); Kafka Streams' own settings (application.id, statestore.*) are not.
_CLIENT_KEYS = ("bootstrap.servers", "security.protocol", "client.dns.lookup")
_CLIENT_PREFIXES = ("sasl.", "ssl.", "socket.")
# Seconds an admin request may take before the operation fails naming the cluster.
ADMIN_TIMEOUT = 30.0
#: The app config key of its sink producers' transaction timeout (Kafka Streams' producer
#: prefix); a task batch's transaction must complete within it.
TRANSACTION_TIMEOUT_KEY = "producer.transaction.timeout.ms"
DEFAULT_TRANSACTION_TIMEOUT_MS = 120_000


@dataclass(frozen=True)
class KafkaCluster:
    """Client settings of one cluster, as ``(key, value)`` pairs (hashable: clients are
    made once per cluster and process)."""

    settings: tuple[tuple[str, str], ...]
    transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> KafkaCluster | None:
        """The cluster an app's config names (``bootstrap.servers``), or None."""
        if not config.get(BOOTSTRAP_SERVERS):
            return None
        picked = {
            key: str(value)
            for key, value in config.items()
            if key in _CLIENT_KEYS or key.startswith(_CLIENT_PREFIXES)
        }
        timeout = int(config.get(TRANSACTION_TIMEOUT_KEY, DEFAULT_TRANSACTION_TIMEOUT_MS))
        if timeout <= 0:
            raise ValueError(f"{TRANSACTION_TIMEOUT_KEY} must be a positive number of ms")
        return cls(tuple(sorted(picked.items())), timeout)

    @property
    def bootstrap_servers(self) -> str:
        return dict(self.settings)[BOOTSTRAP_SERVERS]

    def client_config(self, **extra: Any) -> dict[str, Any]:
        """The settings as a librdkafka config, with ``extra`` (dots as underscores)."""
        config: dict[str, Any] = dict(self.settings)
        config.update({key.replace("_", "."): value for key, value in extra.items()})
        return config


@cache
def admin_client(cluster: KafkaCluster) -> Any:
    """The process's admin client of ``cluster``."""
    from confluent_kafka.admin import AdminClient

    return AdminClient(cluster.client_config())
