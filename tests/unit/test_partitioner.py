"""The vectorized partitioner agrees with the scalar one (Kafka's murmur2); a key's
partition is Kafka's default partitioner of its bytes under its topic's key serde."""

from __future__ import annotations

import json
import struct
from datetime import timedelta

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from lakestate.io.partitioner import (
    murmur2,
    murmur2_rows,
    partition_of_key,
    partition_of_text,
    partitions_of_keys,
    partitions_of_texts,
)
from lakestate.serdes import Serdes, WindowedSerdes

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
    assert partitions_of_texts(['"k"'], 1) == [0]
    expected = (murmur2(b'"foobar"') & 0x7FFFFFFF) % 7
    assert partitions_of_texts(['"foobar"'] * 3, 7) == [expected] * 3


def _kafka(data: bytes, n: int) -> int:
    """Kafka's default partitioner: toPositive(murmur2(bytes)) % n."""
    return (murmur2(data) & 0x7FFFFFFF) % n


@given(
    st.lists(
        st.none() | st.text(max_size=12) | st.integers(-(1 << 63), (1 << 63) - 1), max_size=20
    ),
    st.integers(min_value=1, max_value=16),
)
def test_a_keys_partition_is_kafkas_of_its_serdes_bytes(keys, n) -> None:
    """String keys hash their UTF-8, Long keys their 8 big-endian bytes, Json keys their
    canonical JSON text (quotes and all), a windowed key its inner key's bytes; a None key
    is partition 0; the batch form (keys as JSON text) agrees with the scalar one."""
    strings = [k for k in keys if k is None or isinstance(k, str)]
    longs = [k for k in keys if not isinstance(k, str)]
    windowed = WindowedSerdes.time_windowed_serde_from(Serdes.String(), timedelta(seconds=1))
    for serde, values, model in (
        (Serdes.String(), strings, lambda k: _kafka(k.encode("utf-8"), n)),
        (windowed, strings, lambda k: _kafka(k.encode("utf-8"), n)),
        (Serdes.Long(), longs, lambda k: _kafka(struct.pack(">q", k), n)),
        (
            Serdes.Json(),
            keys,
            lambda k: _kafka(json.dumps(k, ensure_ascii=False).encode("utf-8"), n),
        ),
        (None, keys, lambda k: _kafka(json.dumps(k, ensure_ascii=False).encode("utf-8"), n)),
    ):
        expected = [0 if k is None else model(k) for k in values]
        assert [partition_of_key(k, serde, n) for k in values] == expected
        texts = [None if k is None else json.dumps(k, ensure_ascii=False) for k in values]
        assert partitions_of_keys(texts, serde, n) == expected


def test_string_keys_fall_apart_from_their_json_text() -> None:
    """The case co-partitioning turns on: "c1" and '"c1"' hash to different partitions."""
    assert partition_of_key("c1", Serdes.String(), 2) == _kafka(b"c1", 2) == 1
    assert partition_of_key("c1", Serdes.Json(), 2) == _kafka(b'"c1"', 2) == 0
