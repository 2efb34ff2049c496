"""Benchmark of lakestate's TopologyTestDriver against Kafka Streams' own, on the same
topologies and input (issue 28 item 4; target: lakestate >= 2x Kafka's records/s).

Run from the repository root::

    .venv/bin/python tests/benchmarks/bench_test_driver.py            # 20,000 records
    .venv/bin/python tests/benchmarks/bench_test_driver.py --records 50000 --rounds 3
    .venv/bin/python tests/benchmarks/bench_test_driver.py --profile  # + cProfile of lakestate

The topologies are the conformance suite's (tests/conformance: lakestate_kinds.py and the
Java runner's Topologies.java build the same ones):

- **count**: ``stream("in").groupByKey().count().toStream().to("out")`` (the demo app's
  count, without its filter);
- **windowed-final**: 1-minute tumbling windows with 30 s grace, ``count()``, then
  ``suppress(untilWindowCloses(unbounded()))``: one final count per window.

Input: N records, keys from 100 users, long values 1..19, timestamps 100 ms apart (so a
window holds ~600 records and closes every minute of stream time).

Kafka's side: ``apps/TtdBench.java``, compiled into the conformance runner's package and run
on its classpath (scripts/fetch_kstreams.sh builds it), one JVM with full JIT, in-memory
stores (``dsl.store.suppliers.class``) and no record cache, as the conformance runner's
config; ``--warmup`` untimed plays of each scenario first (a warm JVM), then ``--rounds``
timed ones. lakestate's side: the driver with its default in-memory backend, one untimed
play, then the same rounds. Both time piping and reading only (driver built before, closed
after), in two modes: **record** (pipe one input, read the output topic, per input: the
conformance runner's way) and **list** (``pipe_record_list`` / ``pipeRecordList`` of all,
one read). Each side's figure is its best round; the output counts must agree.

Prints records/s per side, the ratio lakestate / Kafka, and the load average; writes
``tests/benchmarks/results/test_driver.json``.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "conformance"))

from harness import kstreams_runner  # noqa: E402
from lakestate.testing import TestRecord, TopologyTestDriver  # noqa: E402
from lakestate_kinds import build  # noqa: E402
from scenario import AggregateParams, Input, Scenario, Suppress, TimeWindowedParams  # noqa: E402

JAVA_SOURCE = ROOT / "tests" / "benchmarks" / "apps" / "TtdBench.java"
RESULTS = ROOT / "tests" / "benchmarks" / "results" / "test_driver.json"
MODES = ("record", "list")


def scenarios(n: int) -> list[Scenario]:
    rng = random.Random(28)
    inputs = tuple(
        Input(f"user-{rng.randrange(100)}", rng.randrange(1, 20), 1_700_000_000_000 + i * 100)
        for i in range(n)
    )
    windowed = TimeWindowedParams(
        "count", size=60_000, grace=30_000, suppress=Suppress("window_closes")
    )
    return [
        Scenario("count", AggregateParams("count"), inputs),
        Scenario("windowed-final", windowed, inputs),
    ]


def run_kafka(items: list[Scenario], warmup: int, rounds: int) -> dict[str, Any]:
    """{(name, mode): {"nanos": [...], "outputs": n}} from one JVM."""
    runner = kstreams_runner()
    classpath = (
        f"{runner / 'runner.jar'}{os.pathsep}{(runner / 'classpath.txt').read_text().strip()}"
    )
    with tempfile.TemporaryDirectory(prefix="lakestate-ttd-bench-") as tmp:
        classes = Path(tmp) / "classes"
        subprocess.run(
            ["javac", "-d", str(classes), "-cp", classpath, str(JAVA_SOURCE)], check=True
        )
        request, response = Path(tmp) / "in.json", Path(tmp) / "out.json"
        request.write_text(
            json.dumps(
                {"warmup": warmup, "rounds": rounds, "scenarios": [s.to_json() for s in items]}
            )
        )
        java = [
            "java",
            "-Xmx1g",
            f"-Djava.io.tmpdir={tmp}",
            "-cp",
            f"{classes}{os.pathsep}{classpath}",
        ]
        subprocess.run(
            [*java, "lakestate.conformance.TtdBench", str(request), str(response)], check=True
        )
        answer = json.loads(response.read_text())
    return {
        "jar": answer["kafka_streams_jar"],
        "results": {(r["name"], r["mode"]): r for r in answer["results"]},
    }


def play_lakestate(scenario: Scenario, mode: str) -> tuple[float, int]:
    """One play: (seconds, output records)."""
    inputs = [(i.key, i.value, i.ts) for i in scenario.inputs]
    with TopologyTestDriver(build(scenario.params)) as driver:
        topic = driver.create_input_topic("in")
        out = driver.create_output_topic("out")
        outputs = 0
        start = time.perf_counter()
        if mode == "list":
            topic.pipe_record_list(TestRecord(k, v, ts) for k, v, ts in inputs)
            outputs += len(out.read_records_to_list())
        else:
            for key, value, ts in inputs:
                topic.pipe_input(key, value, ts)
                outputs += len(out.read_records_to_list())
        return time.perf_counter() - start, outputs


def profile_lakestate(scenario: Scenario, mode: str, top: int = 15) -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    play_lakestate(scenario, mode)
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(top)
    return text.getvalue()


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=20_000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--warmup", type=int, default=5, help="untimed JVM plays per scenario")
    p.add_argument("--profile", action="store_true", help="cProfile lakestate's record mode")
    args = p.parse_args(argv)
    items = scenarios(args.records)
    report: dict[str, Any] = {"records": args.records, "rounds": args.rounds}
    report["load_average"] = {"start": loadavg()}
    kafka = run_kafka(items, args.warmup, args.rounds)
    report["kafka_streams_jar"] = kafka["jar"]
    report["load_average"]["after_kafka"] = loadavg()
    rows = []
    for scenario in items:
        for mode in MODES:
            play_lakestate(scenario, mode)  # warm-up
            plays = [play_lakestate(scenario, mode) for _ in range(args.rounds)]
            ours = args.records / min(s for s, _ in plays)
            k = kafka["results"][(scenario.name, mode)]
            theirs = args.records / (min(k["nanos"]) / 1e9)
            if plays[0][1] != k["outputs"]:
                raise SystemExit(
                    f"{scenario.name}/{mode}: lakestate output {plays[0][1]} records, "
                    f"Kafka {k['outputs']}"
                )
            rows.append(
                {
                    "scenario": scenario.name,
                    "mode": mode,
                    "outputs": k["outputs"],
                    "lakestate_records_per_s": round(ours),
                    "kafka_records_per_s": round(theirs),
                    "ratio": round(ours / theirs, 2),
                }
            )
    report["load_average"]["end"] = loadavg()
    report["rows"] = rows
    print(f"{args.records:,} records, best of {args.rounds} rounds; {kafka['jar']}")
    print(f"{'scenario':16} {'mode':7} {'outputs':>8} {'lakestate/s':>12} {'kafka/s':>10} ratio")
    for r in rows:
        print(
            f"{r['scenario']:16} {r['mode']:7} {r['outputs']:>8,} "
            f"{r['lakestate_records_per_s']:>12,} {r['kafka_records_per_s']:>10,} {r['ratio']:.2f}"
        )
    print(f"load average (1, 5, 15 min): {report['load_average']}")
    if args.profile:
        for scenario in items:
            text = profile_lakestate(scenario, "record")
            report.setdefault("profiles", {})[scenario.name] = text
            print(f"-- cProfile, lakestate, {scenario.name}, record mode, by own time\n{text}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
