"""The vectorized partitioner agrees with the scalar one (Kafka's murmur2)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from lakestate.io.partitioner import (
    murmur2,
    murmur2_rows,
    partition_of_text,
    partitions_of_texts,
)

# Kafka's UtilsTest.testMurmur2 (signed results).
KAFKA_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"abc", 479470107),
]


def test_murmur2_rows_gives_kafkas_hashes() -> None:
    for data, expected in KAFKA_VECTORS:
        rows = np.frombuffer(data * 3, dtype=np.uint8).reshape(3, len(data))
        assert [h - (1 << 32) if h & 0x80000000 else h for h in murmur2_rows(rows).tolist()] == [
            expected
        ] * 3


@given(
    st.lists(st.none() | st.text(max_size=12).map(lambda t: f'"{t}"') | st.text(max_size=9)),
    st.integers(min_value=1, max_value=64),
)
def test_partitions_of_texts_is_partition_of_text_of_each(texts, n) -> None:
    assert partitions_of_texts(texts, n) == [partition_of_text(t, n) for t in texts]


def test_every_length_and_none() -> None:
    texts = [None, "", *("x" * k for k in range(1, 13)), "ü€😀", None]
    assert partitions_of_texts(texts, 5) == [partition_of_text(t, 5) for t in texts]
    assert partitions_of_texts(texts, 5)[0] == 0
    assert partitions_of_texts(["\"k\""], 1) == [0]
    expected = (murmur2(b'"foobar"') & 0x7FFFFFFF) % 7
    assert partitions_of_texts(['"foobar"'] * 3, 7) == [expected] * 3
