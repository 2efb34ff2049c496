"""Which Spark partition each task's records go to in a batch: a partition of its own.

``DataFrame.repartition(n, column)`` places a row in partition ``pmod(hash(column), n)``,
where ``hash`` is Spark's Murmur3 (x86_32, seed 42). Hashing task ids directly can put two
tasks in one partition, and then they run one after the other on one core. Instead every
task gets a *route*: an int chosen so that its hash lands on the task's own slot. Only
speed depends on this arithmetic: a task's records always stay together, whatever the hash.
The Spark column that routes rows is ``spark_transport.route_column``; this module is plain
arithmetic (no pyspark).
"""

from __future__ import annotations

SPARK_HASH_SEED = 42
_MASK = 0xFFFFFFFF
# A task's key in the route map: sub * TASK_KEY_STRIDE + partition.
TASK_KEY_STRIDE = 1 << 20


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _MASK


def spark_hash_int(value: int, seed: int = SPARK_HASH_SEED) -> int:
    """Spark's ``hash()`` of an IntegerType value (Murmur3_x86_32.hashInt), signed."""
    k1 = (value & _MASK) * 0xCC9E2D51 & _MASK
    k1 = _rotl(k1, 15) * 0x1B873593 & _MASK
    h1 = (seed & _MASK) ^ k1
    h1 = (_rotl(h1, 13) * 5 + 0xE6546B64) & _MASK
    h1 ^= 4  # length in bytes
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & _MASK
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & _MASK
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


def routes(n: int) -> list[int]:
    """For each slot ``0 <= j < n``, the smallest int whose Spark hash goes to slot j."""
    found: dict[int, int] = {}
    value = 0
    while len(found) < n:
        found.setdefault(spark_hash_int(value) % n, value)  # Python's % is pmod for n > 0
        value += 1
    return [found[j] for j in range(n)]
