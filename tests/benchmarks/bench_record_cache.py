"""Task-level benchmark of the record cache (state/record_cache.py): a count
(``stream -> group_by_key().count() -> to_stream() -> to``) of N records in batches
(``process_chunk`` then a commit per batch) on an in-memory store, keys drawn uniformly
from K (seeded), with ``statestore.cache.max.bytes`` 10 MB against no cache, runs
interleaved (cache, none, cache, ...) in one process; prints records per CPU second and
updates emitted.

    PYTHONPATH=$PWD/lib .venv/bin/python tests/benchmarks/bench_record_cache.py
    .venv/bin/python tests/benchmarks/bench_record_cache.py --keys 1000 100000 --runs 3
    .venv/bin/python tests/benchmarks/bench_record_cache.py --profile 100000  # cProfile
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import random
import time

from lakestate import Materialized, StreamsBuilder
from lakestate.processors.task import Task
from lakestate.records import Record
from lakestate.state.base import TopicPartition
from lakestate.state.memory import in_memory_store


def run(records: int, batch: int, keys: int, cache_bytes: int, seed: int = 7) -> tuple[float, int]:
    """CPU seconds of this process (less noisy than wall time on a shared machine) to
    process and commit every batch, and the updates emitted."""
    b = StreamsBuilder()
    b.stream("in").group_by_key().count(Materialized.as_("c")).to_stream().to("out")
    config = {"statestore.cache.max.bytes": cache_bytes} if cache_bytes else {}
    task = Task(b.build(), 0, 0, in_memory_store("0_0"), config, "app")
    rng = random.Random(seed)
    names = [f"k{i}" for i in range(keys)]
    batches = [
        [Record(names[rng.randrange(keys)], 1, start + i) for i in range(batch)]
        for start in range(0, records, batch)
    ]
    emitted, offset = 0, 0
    began = time.process_time()
    for rs in batches:
        offsets = list(range(offset, offset + len(rs)))
        assert task.process_chunk("in", offsets, rs)
        offset += len(rs)
        emitted += len(task.commit({TopicPartition("in", 0): offset}))
    return time.process_time() - began, emitted


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=400_000)
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--keys", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--cache-bytes", type=int, default=10 * 1024 * 1024)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--profile", type=int, help="cProfile one cached run of this many keys")
    args = parser.parse_args()
    if args.profile:
        profile = cProfile.Profile()
        profile.runcall(run, args.records, args.batch, args.profile, args.cache_bytes)
        pstats.Stats(profile).sort_stats("tottime").print_stats(15)
        return
    for keys in args.keys:
        for _ in range(args.runs):
            for label, size in (("cache", args.cache_bytes), ("none", 0)):
                seconds, emitted = run(args.records, args.batch, keys, size)
                rate = args.records / seconds
                print(f"keys={keys} {label}: {rate:,.0f} rec/cpu-s, {emitted:,} updates", flush=True)


if __name__ == "__main__":
    main()
