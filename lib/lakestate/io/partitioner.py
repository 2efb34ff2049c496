"""Which partition a key goes to: the one place that decides it (``produce``, sinks of
every kind, repartition topics, a foreign-key join's subscription and response topics).

As Kafka's default partitioner (``Utils.toPositive(Utils.murmur2(keyBytes)) %
numPartitions``), which Kafka Streams uses for every topic it writes: murmur2 of the key's
serialized bytes under the topic's key serde (``partition_of_key``, ``partitions_of_keys``;
a windowed serde's inner serde, Kafka's ``WindowedStreamPartitioner``). For a Json key
(the default, and every key whose serde is not known) those bytes are its canonical JSON
text (``canonical_json``: sorted object keys, no spaces, UTF-8), so ``"c1"`` is hashed
with its quotes; for a String key they are the string's UTF-8 (``c1``), for a Long its 8
big-endian bytes. Two topics are co-partitioned when their writers agree on the key serde.
Which serde a topic hashes by is its writer's: a Kafka topic's key serde; Json for a log
table, which holds JSON text (``runtime/batch_rows.key_serdes_of`` names an app's topics
of the first kind, its internal topics among them when the app is on Kafka).
The result is the same in every process, on every machine and every Python version
(Python's ``hash()`` is salted per process and is never used).

A ``None`` key always goes to partition 0: deterministic, so a replayed batch puts its
records where the first attempt did (Kafka's producer spreads null keys instead, which a
replay could not reproduce).

Keys that Python considers equal but JSON spells differently are different keys here, as
they would be in Kafka: ``1``, ``1.0`` and ``True`` encode as ``1``, ``1.0`` and ``true``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from lakestate.serdes import JsonSerde, Serde, base_key_serde
from lakestate.state.serde import json_text
from lakestate.state.serde import loads as json_loads

__all__ = [
    "canonical_json",
    "murmur2",
    "murmur2_rows",
    "partition_for",
    "partition_of_bytes",
    "partition_of_key",
    "partition_of_text",
    "partitions_of_keys",
    "partitions_of_texts",
]

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK32 = 0xFFFFFFFF


def canonical_json(value: Any) -> str:
    """The canonical JSON text of a Python value: object keys sorted, no whitespace,
    non-ASCII kept as is. NaN and infinities are rejected (they are not JSON).

    Raises ``TypeError``/``ValueError`` for values JSON cannot represent.
    """
    return "null" if value is None else json_text(value)


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``: 32-bit murmur2 with Kafka's seed, as a signed 32-bit int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK32
    end = length - length % 4
    for i in range(0, end, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK32
        k ^= k >> 24
        k = (k * _M) & _MASK32
        h = (h * _M) & _MASK32
        h ^= k
    rest = length % 4
    if rest == 3:
        h ^= data[end + 2] << 16
    if rest >= 2:
        h ^= data[end + 1] << 8
    if rest >= 1:
        h ^= data[end]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: Any, num_partitions: int) -> int:
    """The partition of ``key`` among ``num_partitions``: murmur2 of the key's canonical
    JSON (UTF-8), made positive, modulo the count. ``None`` → partition 0."""
    if isinstance(num_partitions, bool) or not isinstance(num_partitions, int):
        raise TypeError(f"num_partitions must be an int, got {num_partitions!r}")
    if num_partitions < 1:
        raise ValueError(f"num_partitions must be at least 1, got {num_partitions}")
    if key is None:
        return 0
    return partition_of_text(canonical_json(key), num_partitions)


def partition_of_text(key_text: str | None, num_partitions: int) -> int:
    """``partition_for`` of a key given as its canonical JSON text (None: a None key)."""
    if key_text is None:
        return 0
    return (murmur2(key_text.encode("utf-8")) & 0x7FFFFFFF) % num_partitions


def partition_of_bytes(data: bytes | None, num_partitions: int) -> int:
    """Kafka's default partitioner of a key's serialized bytes (None: partition 0)."""
    if data is None:
        return 0
    return (murmur2(data) & 0x7FFFFFFF) % num_partitions


def _hashed_serde(key_serde: Serde | None) -> Serde | None:
    """The serde whose bytes a key's partition is taken of; None: its JSON text's."""
    serde = None if key_serde is None else base_key_serde(key_serde)
    return None if serde is None or type(serde) is JsonSerde else serde


def partition_of_key(key: Any, key_serde: Serde | None, num_partitions: int) -> int:
    """The partition of ``key`` (a value in ``key_serde``'s JSON form, ``Serde.to_json``)
    in a topic whose key serde is ``key_serde`` (None: Json): Kafka's default partitioner
    of its serialized bytes, ``partition_for`` for Json. ``None`` -> partition 0. Raises
    ``SerializationException`` for a key the serde cannot hold."""
    serde = _hashed_serde(key_serde)
    if serde is None or key is None:
        return partition_for(key, num_partitions)
    return partition_of_bytes(serde.serialize(serde.from_json(key)), num_partitions)


def partitions_of_keys(
    key_texts: Sequence[str | None], key_serde: Serde | None, num_partitions: int
) -> list[int]:
    """``partition_of_key`` of every key given as its JSON form's canonical text (None: a
    None key), hashed with numpy; each distinct key serialized once."""
    serde = _hashed_serde(key_serde)
    if serde is None:
        return partitions_of_texts(key_texts, num_partitions)
    found: dict[str, bytes] = {}
    raws: list[bytes | None] = []
    for text in key_texts:
        if text is None:
            raws.append(None)
            continue
        raw = found.get(text)
        if raw is None:
            raw = found[text] = serde.serialize(serde.from_json(json_loads(text))) or b""
        raws.append(raw)
    return _partitions_of_raw(raws, num_partitions)


def murmur2_rows(data: np.ndarray) -> np.ndarray:
    """``murmur2`` of every row of ``data`` (uint8, shape (n, length): n keys of one
    length), as uint32 (the signed result's bits): one numpy pass per 4 bytes of key."""
    m = np.uint32(_M)
    n, length = data.shape
    h = np.full(n, (_SEED ^ length) & _MASK32, dtype=np.uint32)
    end = length - length % 4
    d = data.astype(np.uint32)
    for i in range(0, end, 4):
        k = d[:, i] | (d[:, i + 1] << 8) | (d[:, i + 2] << 16) | (d[:, i + 3] << 24)
        k = k * m
        k ^= k >> 24
        k = k * m
        h = h * m
        h ^= k
    rest = length % 4
    if rest == 3:
        h ^= d[:, end + 2] << 16
    if rest >= 2:
        h ^= d[:, end + 1] << 8
    if rest >= 1:
        h ^= d[:, end]
        h = h * m
    h ^= h >> 13
    h = h * m
    h ^= h >> 15
    return h


def partitions_of_texts(key_texts: Sequence[str | None], num_partitions: int) -> list[int]:
    """``partition_of_text`` of every key text (None: a None key, partition 0), computed
    with numpy over the keys of each byte length at once."""
    return _partitions_of_raw(
        [None if text is None else text.encode("utf-8") for text in key_texts], num_partitions
    )


def _partitions_of_raw(raws: Sequence[bytes | None], num_partitions: int) -> list[int]:
    """``partition_of_bytes`` of every key's bytes (None: partition 0), with numpy over the
    keys of each length at once."""
    out = [0] * len(raws)
    by_length: dict[int, tuple[list[int], list[bytes]]] = {}
    for i, raw in enumerate(raws):
        if raw is None:
            continue
        group = by_length.get(len(raw))
        if group is None:
            group = by_length[len(raw)] = ([], [])
        group[0].append(i)
        group[1].append(raw)
    for length, (rows, group_raws) in by_length.items():
        data = np.frombuffer(b"".join(group_raws), dtype=np.uint8).reshape(len(rows), length)
        hashes = (murmur2_rows(data) & np.uint32(0x7FFFFFFF)) % np.uint32(num_partitions)
        for i, p in zip(rows, hashes.tolist(), strict=True):
            out[i] = p
    return out
