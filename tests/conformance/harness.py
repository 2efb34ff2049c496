"""The conformance harness: one scenario format, played on Kafka Streams and on lakestate.

A scenario names a topology kind with its params and lists input records. ``run_kafka``
plays a list of scenarios on Kafka's own TopologyTestDriver (the Java runner in
``kstreams/``, built once by ``scripts/fetch_kstreams.sh``, one JVM for the whole list);
``run_lakestate`` plays one on ``lakestate.testing.TopologyTestDriver``. Both give an
``Outcome`` in one normalised form, and ``compare`` says where two outcomes first differ.

Every kind reads topic "in" (string keys; values by ``value_serde``) and writes topic
"out" (scenario.py has the format). To add a kind: a params dataclass in scenario.py (with its
``kind``), its builder in kstreams/.../Topologies.java's KINDS and in lakestate_kinds.py's
BUILDERS, and scenarios for it in random_scenarios.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from lakestate import Windowed
from lakestate.testing import TestRecord, TopologyTestDriver
from lakestate_kinds import build
from scenario import OUTPUT_TOPIC, Buffer, Input, Outcome, OutRecord, Scenario

ROOT = Path(__file__).resolve().parents[2]
FETCH_SCRIPT = ROOT / "scripts" / "fetch_kstreams.sh"

# -- Kafka Streams -------------------------------------------------------------------------


@dataclass(frozen=True)
class KafkaRun:
    streams_version: str  # from the kafka-streams jar the runner loaded
    outcomes: dict[str, Outcome]  # by scenario name


def for_kafka(scenario: Scenario) -> Scenario:
    """The scenario Kafka can play. Deliberate difference: lakestate can spill a full
    suppression buffer to disk, which Kafka cannot; a buffer that spills emits what an
    unbounded one does, so Kafka plays it with ``BufferConfig.unbounded()``."""
    suppress = getattr(scenario.params, "suppress", None)
    if suppress is None or suppress.buffer.when_full != "spill_to_disk":
        return scenario
    params = replace(scenario.params, suppress=replace(suppress, buffer=Buffer()))
    return replace(scenario, params=params)


def kstreams_runner() -> Path:
    """The built runner's directory (runner.jar, classpath.txt); builds it the first time."""
    done = subprocess.run(
        ["bash", str(FETCH_SCRIPT)], check=True, capture_output=True, text=True, cwd=ROOT
    )
    return Path(done.stdout.strip().splitlines()[-1])


def run_kafka(scenarios: list[Scenario]) -> KafkaRun:
    """Plays every scenario on Kafka Streams' TopologyTestDriver, in one JVM."""
    names = [s.name for s in scenarios]
    if len(set(names)) != len(names):
        raise ValueError("scenario names must be unique")
    runner = kstreams_runner()
    classpath = (
        f"{runner / 'runner.jar'}{os.pathsep}{(runner / 'classpath.txt').read_text().strip()}"
    )
    # RocksDB syncs its files as it opens and closes stores, once per scenario: on a
    # memory file system that costs nothing (4x faster on the development machine).
    scratch = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix="lakestate-conformance-", dir=scratch) as tmp:
        request, response = Path(tmp) / "scenarios.json", Path(tmp) / "outcomes.json"
        request.write_text(json.dumps({"scenarios": [for_kafka(s).to_json() for s in scenarios]}))
        # A small heap and the quick compiler only: the runner's work is short.
        java = ["java", "-Xmx512m", "-XX:TieredStopAtLevel=1", f"-Djava.io.tmpdir={tmp}"]
        main = ["lakestate.conformance.Main", str(request), str(response)]
        subprocess.run([*java, "-cp", classpath, *main], check=True)
        answer = json.loads(response.read_text())
    jar = answer["kafka_streams_jar"]
    match = re.fullmatch(r"kafka-streams-(.+)\.jar", jar)
    if match is None:
        raise RuntimeError(f"the runner's kafka-streams jar has an unexpected name: {jar}")
    outcomes = {r["name"]: _outcome(r) for r in answer["results"]}
    return KafkaRun(match.group(1), outcomes)


def _outcome(result: dict[str, Any]) -> Outcome:
    metrics = result.get("metrics") or {}
    return Outcome(
        tuple(OutRecord(**r) for r in result["records"]),
        metrics.get("dropped_records"),
        result["error"],
    )


# -- lakestate -----------------------------------------------------------------------------


def run_lakestate(scenario: Scenario, cuts: list[int] | None = None) -> Outcome:
    """Plays ``scenario`` on lakestate's TopologyTestDriver, one input record at a time (as
    Kafka's driver does), reading the output after each. With ``cuts``, the driver's chunked
    mode: the inputs go as record lists (``pipe_record_list``, see ``record_lists``), the
    output read after each list, so an output's ``input`` is its list's last input. Raises
    NotImplementedError for a kind (or option) lakestate does not build yet."""
    topology = build(scenario.params)
    records: list[OutRecord] = []
    error = None
    inputs = scenario.inputs
    lists = [(i, i + 1) for i in range(len(inputs))] if cuts is None else record_lists(inputs, cuts)
    with TopologyTestDriver(topology) as driver:
        out = driver.create_output_topic(OUTPUT_TOPIC)
        for start, end in lists:
            topic = driver.create_input_topic(inputs[start].topic)
            try:
                if cuts is None:
                    topic.pipe_input(inputs[start].key, inputs[start].value, inputs[start].ts)
                else:
                    topic.pipe_record_list(
                        TestRecord(i.key, i.value, i.ts) for i in inputs[start:end]
                    )
            except Exception as exc:  # as the Java runner: the error, and what came before
                error = f"{type(exc).__name__}: {exc}"
            finally:
                for r in out.read_records_to_list():
                    key, window_start, window_end = r.key, None, None
                    if isinstance(key, Windowed):
                        key, window_start, window_end = key.key, key.window.start, key.window.end
                    records.append(
                        OutRecord(key, window_start, window_end, r.value, r.timestamp, end - 1)
                    )
            if error is not None:
                break
        dropped = int(driver.metrics().get("dropped-records", 0))
    return Outcome(tuple(records), dropped, error)


def record_lists(inputs: tuple[Input, ...], cuts: list[int]) -> list[tuple[int, int]]:
    """The inputs as lists ``[start, end)`` of ``cuts[0]``, ``cuts[1]``... records in turn
    (cycling), each cut short where the next input goes to another topic."""
    lists: list[tuple[int, int]] = []
    start, n = 0, 0
    while start < len(inputs):
        end = min(start + cuts[n % len(cuts)], len(inputs))
        n += 1
        topic = inputs[start].topic
        end = next((i for i in range(start, end) if inputs[i].topic != topic), end)
        lists.append((start, end))
        start = end
    return lists


def as_listed(outcome: Outcome, lists: list[tuple[int, int]]) -> Outcome:
    """``outcome`` (one record at a time) as the chunked mode reports it: each output's
    ``input`` the last input of its list."""
    last = {i: end - 1 for start, end in lists for i in range(start, end)}
    records = tuple(replace(r, input=last[r.input]) for r in outcome.records)
    return replace(outcome, records=records)


# -- comparing -----------------------------------------------------------------------------


def compare(kafka: Outcome, lakestate: Outcome, scenario: Scenario | None = None) -> str | None:
    """None when the outcomes agree (records in order; dropped records unless both stopped
    on an error; whether an error stopped the run: the two sides' messages differ by
    nature); else a readable account of
    the first difference, with the scenario to replay it."""
    problem = None
    for index, (k, ls) in enumerate(zip(kafka.records, lakestate.records, strict=False)):
        if k != ls:
            problem = f"record {index} differs:\n  kafka:     {k}\n  lakestate: {ls}"
            break
    if problem is None and len(kafka.records) != len(lakestate.records):
        shorter = min(len(kafka.records), len(lakestate.records))
        extra = (kafka.records if len(kafka.records) > shorter else lakestate.records)[shorter]
        side = "kafka" if len(kafka.records) > shorter else "lakestate"
        problem = (
            f"kafka output {len(kafka.records)} records, lakestate {len(lakestate.records)}; "
            f"the first extra ({side}): {extra}"
        )
    if problem is None and (kafka.error is None) != (lakestate.error is None):
        problem = f"errors differ:\n  kafka:     {kafka.error}\n  lakestate: {lakestate.error}"
    # A record that fails is rolled back whole in lakestate, its metrics with its state and
    # output (exactly once); Kafka's sensors keep what it counted before failing. So after
    # an error only the records are compared.
    both_failed = kafka.error is not None and lakestate.error is not None
    if problem is None and not both_failed and kafka.dropped_records != lakestate.dropped_records:
        problem = (
            f"dropped records differ: kafka {kafka.dropped_records}, "
            f"lakestate {lakestate.dropped_records}"
        )
    if problem is None:
        return None
    return problem if scenario is None else f"{problem}\n{describe(scenario)}"


def describe(scenario: Scenario) -> str:
    """The scenario, one input per line with its index (as ``OutRecord.input`` counts)."""
    lines = [f"scenario {scenario.name}: {scenario.kind} {scenario.params}"]
    lines += [
        f"  [{i}] {item.topic} key={item.key!r} value={item.value!r} ts={item.ts}"
        for i, item in enumerate(scenario.inputs)
    ]
    return "\n".join(lines)
