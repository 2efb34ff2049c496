"""Benchmark of Kafka connectors (issue 26, item 7): N JSON records in a Kafka topic ->
filter(amount > 0) -> count per key, with lakestate (to a Kafka topic, and to a typed Delta
table) against Spark Structured Streaming's Kafka source with the same query into Delta.

Run from the repository root::

    .venv/bin/python tests/benchmarks/bench_kafka.py                    # N = 1,000,000
    .venv/bin/python tests/benchmarks/bench_kafka.py --records 100000   # a quick check
    .venv/bin/python tests/benchmarks/bench_kafka.py --cache-bytes 10485760  # record cache on

The broker is the tests' single-node KRaft broker (``tests/integration/kafka_broker.py``:
Kafka's jars from the project's cache, started on free ports in a temporary directory).
Input (deterministic, ``--seed``): N records of ``--keys`` users, key the user as JSON text
(``"u-17"``), value ``{"user": ..., "amount": 0..9}`` (amount 0 in 10%: filtered out),
produced with Kafka's own partitioner (murmur2) into a topic of 2 partitions. Each side gets
its own copy of the topic (its increment goes there).

Sides, each a fresh process with the same Spark confs (``local[2]``, 2 shuffle partitions):

- **lakestate -> Kafka**: ``run_app(until_caught_up=True)`` of an app whose config has
  ``bootstrap.servers``: ``stream -> filter -> group_by_key().count() -> to_stream() ->
  to(topic)`` (transactional producer, exactly once). ``auto`` transport: at most
  ``lakestate.inprocess.max.records`` pending records run in the process, no JVM.
- **lakestate -> Delta**: the same app with ``to(ls.DeltaSink(...))``: a typed table
  (``key`` string, ``value`` long).
- **SSS**: ``readStream.format("kafka")`` (spark-sql-kafka-0-10 of pyspark's version, from
  Maven Central through ``spark.jars.packages``, cached in ``.cache/ivy``) ->
  ``where(get_json_object(value, '$.amount') > 0)`` -> ``groupBy(key).count()`` in update
  mode -> Delta in ``foreachBatch`` (idempotent through txnAppId/txnVersion), RocksDB state
  store, ``Trigger.AvailableNow`` (``common.count_query``'s query with a Kafka source).

Figures: records/s = N / the seconds from the process's spawn to the end of its main run
(interpreter start, imports, JVM start and Ivy's resolution from the cache included), and
N / the run's own time (the ``run_app`` call; SSS's query from ``start()`` to its end); the
ratio lakestate / SSS of the former (target >= 1.0), and of the latter. Then,
in the same (warm) process, the latency of an increment: ``--increment`` records produced
(flushed), then one run (``run_app``) / one AvailableNow trigger on the same checkpoint,
timed until the output is visible to a reader (read_committed end offsets of the output
topic moved; the Delta table's new version). The counts per key of every side, read from
its output, must equal each other and the expected counts (the input, filtered and
counted in Python). The load average (``os.getloadavg``) is printed beside each figure:
other jobs share the machine. Results go to ``tests/benchmarks/results/kafka.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from common import log  # tests/benchmarks/common.py (first on sys.path)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DEFAULT_JSON = HERE / "results" / "kafka.json"
PARTITIONS = 2
TARGET_RATIO = 1.0
SIDES = ("lakestate_kafka", "lakestate_delta", "sss")
LABELS = {
    "lakestate_kafka": "lakestate -> Kafka",
    "lakestate_delta": "lakestate -> typed Delta",
    "sss": "SSS -> Delta",
}
SPARK_ENV = {"LAKESTATE_SHUFFLE_PARTITIONS": "2"}
#: The parent's ``time.monotonic()`` when it spawned the side's process (system-wide on
#: Linux), so the child can say how long after its spawn the main run ended.
SPAWNED_AT_ENV = "BENCH_SPAWNED_AT"
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"

APP_SOURCE = """\
import lakestate as ls

b = ls.StreamsBuilder()
counts = b.stream({topic!r}).filter(lambda k, v: v["amount"] > 0).group_by_key().count()
sink = {sink}
counts.to_stream().to(sink)
config = {{"bootstrap.servers": {bootstrap!r}, "statestore.cache.max.bytes": {cache_bytes}}}
app = ls.App({app_id!r}, b.build(), config)
"""


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# -- input ---------------------------------------------------------------------------------------


def make_records(n: int, keys: int, seed: int) -> list[tuple[str, int]]:
    """(user, amount) per record; amount 0 (filtered out) in about 10%."""
    rng = random.Random(seed)
    return [(f"u-{rng.randrange(keys)}", rng.randrange(10)) for _ in range(n)]


def expected_counts(records: list[tuple[str, int]]) -> dict[str, int]:
    return dict(Counter(user for user, amount in records if amount > 0))


def produce(bootstrap: str, topic: str, records: list[tuple[str, int]]) -> float:
    """Produce ``records`` as JSON (Kafka's murmur2 partitioner on the key, as the Java
    client's); returns the seconds until every one is acknowledged."""
    from confluent_kafka import Producer

    started = time.monotonic()
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "partitioner": "murmur2_random",
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
            "acks": "all",
        }
    )
    for user, amount in records:
        value = json.dumps({"user": user, "amount": amount}).encode()
        while True:
            try:
                producer.produce(topic, value, json.dumps(user).encode())
                break
            except BufferError:
                producer.poll(0.05)
    left = producer.flush(120)
    if left:
        raise RuntimeError(f"{left} records of {topic} not acknowledged")
    return time.monotonic() - started


def create_topic(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> None:
    from lakestate.io.kafka import KafkaCluster, KafkaTopic

    KafkaTopic(KafkaCluster.from_config({"bootstrap.servers": bootstrap}), topic).create(partitions)


# -- reading each side's output ------------------------------------------------------------------


def kafka_counts(bootstrap: str, topic: str) -> dict[str, int]:
    """The latest count per key in a sink topic, as a read_committed consumer sees it."""
    from lakestate.io.kafka import KafkaCluster, KafkaTopic
    from lakestate.io.topic_records import records_of

    cluster = KafkaCluster.from_config({"bootstrap.servers": bootstrap})
    out: dict[str, int] = {}
    for table in KafkaTopic(cluster, topic).read_partitions():
        for r in records_of(table):  # offset order: the last one of a key is its latest
            out[r.key] = r.value
    return out


def kafka_end(bootstrap: str, topic: str) -> int:
    from lakestate.io.kafka import KafkaCluster, KafkaTopic

    cluster = KafkaCluster.from_config({"bootstrap.servers": bootstrap})
    return sum(KafkaTopic(cluster, topic).end_offsets().values())


def delta_counts(path: str, key: str, value: str) -> dict[str, int]:
    """The highest count per key in a Delta table of (key, count) rows (counts only grow)."""
    from deltalake import DeltaTable

    t = DeltaTable(path).to_pyarrow_table(columns=[key, value])
    out: dict[str, int] = {}
    for k, v in zip(t.column(key).to_pylist(), t.column(value).to_pylist(), strict=True):
        out[k] = max(v, out.get(k, 0))
    return out


def delta_version(path: str) -> int:
    from deltalake import DeltaTable

    try:
        return DeltaTable(path).version()
    except Exception:  # not created yet
        return -1


def wait_visible(check, timeout: float = 120.0) -> float:
    """Poll ``check()`` until true; the seconds it took (``TimeoutError`` past ``timeout``)."""
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > timeout:
            raise TimeoutError("the increment's output did not become visible")
        time.sleep(0.02)
    return time.monotonic() - started


# -- the sides, each in its own process ----------------------------------------------------------


def since_spawn() -> float:
    """Seconds since the parent spawned this process (interpreter start and imports included)."""
    return time.monotonic() - float(os.environ[SPAWNED_AT_ENV])


def child_lakestate(args: argparse.Namespace) -> dict[str, Any]:
    """``_lakestate``: run the app until caught up; then an increment, one run, visible."""
    work = Path(args.work)
    out_topic, table = f"{args.topic}-counts", str(work / "counts-table")
    if args.sink == "kafka":
        sink = repr(out_topic)
    else:
        schema = {"key": "string", "value": "long"}
        sink = f"ls.DeltaSink('counts-typed', {table!r}, schema={schema!r})"
    app = work / "app.py"
    app.write_text(
        APP_SOURCE.format(
            topic=args.topic,
            sink=sink,
            app_id=f"bench-{args.topic}",
            bootstrap=args.bootstrap,
            cache_bytes=args.cache_bytes,
        )
    )
    from lakestate import run_app

    def run() -> Any:
        return run_app(
            str(app),
            warehouse=str(work / "wh"),
            state_dir=str(work / "state"),
            until_caught_up=True,
            master=args.master,
            say=lambda _: None,
        )

    load = loadavg()
    started = time.monotonic()
    result = run()
    run_s = time.monotonic() - started
    main = {"run_s": run_s, "records": result.records, "batches": len(result.batches)}
    main["process_s"] = since_spawn()
    main.update(transport=result.transport, load=load)
    if args.sink == "kafka":
        version = lambda: kafka_end(args.bootstrap, out_topic)  # noqa: E731
    else:
        version = lambda: delta_version(table)  # noqa: E731
    before = version()
    increment = make_records(args.increment, args.keys, args.seed + 1)
    load = loadavg()
    started = time.monotonic()
    produce(args.bootstrap, args.topic, increment)
    inc = run()
    wait_visible(lambda: version() > before)
    latency = {"s": time.monotonic() - started, "records": inc.records, "load": load}
    latency["transport"] = inc.transport
    if args.sink == "kafka":
        counts = kafka_counts(args.bootstrap, out_topic)
    else:
        counts = delta_counts(table, "key", "value")
    return {"main": main, "increment": latency, "counts": counts}


def sss_trigger(spark, bootstrap: str, topic: str, table: str, checkpoint: str) -> None:
    """One AvailableNow run of the SSS query on ``checkpoint``: the Kafka topic ->
    filter -> count per key (update mode) -> appended to the Delta ``table`` in
    ``foreachBatch``, idempotently (txnAppId/txnVersion, as Delta's documentation says)."""
    from pyspark.sql import functions as F

    counts = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
        .select(F.col("key").cast("string").alias("key"), F.col("value").cast("string"))
        .where(F.get_json_object("value", "$.amount").cast("long") > 0)
        .groupBy("key")
        .count()
    )

    def write(batch, epoch: int) -> None:
        batch.write.format("delta").mode("append").option("txnAppId", "bench-kafka").option(
            "txnVersion", epoch
        ).save(table)

    query = (
        counts.writeStream.outputMode("update")
        .foreachBatch(write)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"Structured Streaming query failed: {query.exception()}")


def record_kafka_jars(spark, path: Path) -> None:
    """Record the jar files Ivy resolved the Kafka connector to (those of its ``jars``
    directory that are not lakestate's recorded Delta jars), for the next start."""
    from lakestate.runtime.spark_session import resolved_jars

    delta = set(resolved_jars(False) or [])
    ivy_jars = str((path.parent / "jars").resolve())
    # Beside jars given in spark.jars, Spark lists a package's jars in this conf.
    given = spark.sparkContext.getConf().get("spark.repl.local.jars", "").split(",")
    jars = [j for j in given if ivy_jars in j and j not in delta]
    if jars:
        path.write_text("\n".join(jars) + "\n")


def child_sss(args: argparse.Namespace) -> dict[str, Any]:
    """``_sss``: the query until the topic is processed (AvailableNow); then an increment,
    one more AvailableNow trigger on the same checkpoint, visible."""
    import pyspark
    from lakestate.runtime.spark_session import get_spark, ivy_dir

    work = Path(args.work)
    table, checkpoint = str(work / "counts-table"), str(work / "checkpoint")
    load_start = loadavg()
    started = time.monotonic()
    package = f"org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark.__version__}"
    recorded = ivy_dir() / f"bench-kafka-resolved-{pyspark.__version__}.txt"
    jars = recorded.read_text().split() if recorded.is_file() else []
    if jars and all(Path(j.removeprefix("file:")).is_file() for j in jars):
        # As lakestate's own start does with the Delta jars: the files Ivy resolved the
        # package to the first time, so that no start pays Ivy's resolution again.
        conf = {"spark.jars": ",".join(jars)}
    else:
        conf = {"spark.jars.packages": package, "spark.jars.ivy": str(ivy_dir())}
    if args.sss_state == "rocksdb":
        conf["spark.sql.streaming.stateStore.providerClass"] = ROCKSDB_PROVIDER
    spark = get_spark(args.master, app_name="bench-kafka-sss", extra_conf=conf)
    spark_start_s = time.monotonic() - started
    if "spark.jars.packages" in conf:
        record_kafka_jars(spark, recorded)

    def trigger() -> None:  # the same query on the same checkpoint, each time
        sss_trigger(spark, args.bootstrap, args.topic, table, checkpoint)

    load = loadavg()
    started = time.monotonic()
    trigger()
    main = {"run_s": time.monotonic() - started, "spark_start_s": spark_start_s, "load": load}
    main["process_s"] = since_spawn()
    main["load_start"] = load_start
    before = delta_version(table)
    increment = make_records(args.increment, args.keys, args.seed + 1)
    load = loadavg()
    started = time.monotonic()
    produce(args.bootstrap, args.topic, increment)
    trigger()
    wait_visible(lambda: delta_version(table) > before)
    latency = {"s": time.monotonic() - started, "records": args.increment, "load": load}
    counts = {json.loads(k): v for k, v in delta_counts(table, "key", "count").items()}
    return {"main": main, "increment": latency, "counts": counts}


def child(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="bench_kafka.py _child")
    for name in ("--side", "--bootstrap", "--topic", "--work", "--master", "--report"):
        p.add_argument(name, required=True)
    p.add_argument("--sink", choices=("kafka", "delta"), default="kafka")
    p.add_argument("--sss-state", choices=("rocksdb", "hdfs"), default="rocksdb")
    p.add_argument("--increment", type=int, required=True)
    p.add_argument("--cache-bytes", type=int, default=0)
    p.add_argument("--keys", type=int, required=True)
    p.add_argument("--seed", type=int, required=True)
    args = p.parse_args(argv)
    out = child_sss(args) if args.side == "sss" else child_lakestate(args)
    Path(args.report).write_text(json.dumps(out))
    from lakestate.runtime.spark_session import stop_spark

    stop_spark()
    return 0


def run_side(side: str, args: argparse.Namespace, bootstrap: str, work: Path) -> dict[str, Any]:
    """One side as a fresh process, timed from outside; its report read back."""
    topic = f"in-{side.replace('_', '-')}"
    side_work = work / side
    side_work.mkdir(parents=True)
    report = side_work / "report.json"
    cmd = [sys.executable, __file__, "_child", "--side", side, "--bootstrap", bootstrap]
    cmd += ["--topic", topic, "--work", str(side_work), "--master", args.master]
    cmd += ["--report", str(report), "--increment", str(args.increment)]
    cmd += ["--keys", str(args.keys), "--seed", str(args.seed), "--sss-state", args.sss_state]
    cmd += ["--sink", "delta" if side == "lakestate_delta" else "kafka"]
    cmd += ["--cache-bytes", str(args.cache_bytes)]
    env = {**os.environ, **SPARK_ENV, "LAKESTATE_LOG_DIR": str(side_work)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "lib"), env.get("PYTHONPATH")]))
    load_before = loadavg()
    log(f"{LABELS[side]}: fresh process (load {load_before})")
    started = time.monotonic()
    env[SPAWNED_AT_ENV] = repr(started)
    with open(side_work / "output.log", "w") as out:
        done = subprocess.run(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    wall_s = time.monotonic() - started
    if done.returncode != 0:
        lines = (side_work / "output.log").read_text(errors="replace").splitlines()
        tail = "\n".join([x for x in lines if not x.startswith("\tat ")][-40:])
        raise RuntimeError(f"{side} exited with {done.returncode}:\n{tail}")
    result = json.loads(report.read_text())
    result.update(wall_s=wall_s, load_before=load_before, load_after=loadavg())
    log(f"{LABELS[side]}: {wall_s:.1f} s (load {result['load_after']})")
    return result


# -- the parent ----------------------------------------------------------------------------------


def figures(r: dict[str, Any], n: int) -> None:
    """Records/s of each side, the ratios, the latencies and the counts' check."""
    for side in SIDES:
        s = r["sides"].get(side)
        if s:
            s["records_per_s_process"] = round(n / s["main"]["process_s"])
            s["records_per_s_run"] = round(n / s["main"]["run_s"])
    sss = r["sides"].get("sss")
    for side in ("lakestate_kafka", "lakestate_delta"):
        s = r["sides"].get(side)
        if s and sss:
            s["ratio_process"] = round(sss["main"]["process_s"] / s["main"]["process_s"], 3)
            s["ratio_run"] = round(sss["main"]["run_s"] / s["main"]["run_s"], 3)
    expected = r.pop("expected")
    r["counts_equal"] = {
        side: s.pop("counts") == expected for side, s in r["sides"].items() if "counts" in s
    }
    r["keys_counted"] = len(expected)


def print_results(r: dict[str, Any]) -> None:
    n = r["records"]
    print(
        f"\nKafka -> filter -> count, {n:,} records, {r['keys']:,} keys, {PARTITIONS} "
        f"partitions, master {r['master']}, {r['cpus']} cpus (load average 1/5/15 min)"
    )
    row = "{:<26} {:>16} {:>16} {:>9} {:>12}  {}"
    print(row.format("side", "rec/s (process)", "rec/s (run)", "ratio", "increment", "load"))
    for side in SIDES:
        s = r["sides"].get(side)
        if not s:
            continue
        ratio = f"{s['ratio_process']:.2f}x" if "ratio_process" in s else ""
        inc = f"{s['increment']['s']:.2f} s"
        load = f"{s['load_before']} -> {s['load_after']}; increment at {s['increment']['load']}"
        print(
            row.format(
                LABELS[side],
                f"{s['records_per_s_process']:,}",
                f"{s['records_per_s_run']:,}",
                ratio,
                inc,
                load,
            )
        )
    for side in SIDES:
        s = r["sides"].get(side)
        if s:
            m = s["main"]
            extra = f", transport {m['transport']}" if "transport" in m else ""
            extra += f", Spark start {m['spark_start_s']:.1f} s" if "spark_start_s" in m else ""
            print(
                f"  {LABELS[side]}: process start to end of run {m['process_s']:.1f} s, run "
                f"{m['run_s']:.1f} s (whole process with the increment {s['wall_s']:.1f} s)"
                f"{extra}; ratio (run) {s.get('ratio_run', '-')}"
            )
    print(f"target: lakestate / SSS >= {TARGET_RATIO}x (records/s of the process)")
    print(
        f"counts per key equal to the expected ({r['keys_counted']:,} keys, after the "
        f"increment): {r['counts_equal']}"
    )


def main(argv: list[str]) -> int:
    if argv and argv[0] == "_child":
        return child(argv[1:])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--increment", type=int, default=10_000)
    p.add_argument("--keys", type=int, default=10_000)
    p.add_argument("--seed", type=int, default=26)
    p.add_argument("--master", default="local[2]")
    p.add_argument("--sides", default=",".join(SIDES), help="a comma-separated subset")
    p.add_argument("--sss-state", choices=("rocksdb", "hdfs"), default="rocksdb")
    p.add_argument(
        "--cache-bytes",
        type=int,
        default=0,
        help="the app's statestore.cache.max.bytes (0, lakestate's default: every update is "
        "emitted; Kafka Streams' default is 10485760: a key's newest count once per batch)",
    )
    p.add_argument("--json", default=str(DEFAULT_JSON))
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = p.parse_args(argv)
    sys.path.insert(0, str(ROOT / "tests" / "integration"))
    sys.path.insert(0, str(ROOT / "lib"))
    from kafka_broker import start_broker

    work = Path(tempfile.mkdtemp(prefix="bench-kafka-"))
    broker = start_broker(work / "broker")
    r: dict[str, Any] = {"records": args.records, "keys": args.keys, "master": args.master}
    r["cache_bytes"] = args.cache_bytes
    r.update(cpus=os.cpu_count(), increment=args.increment, sides={}, load_start=loadavg())
    try:
        log(f"broker on {broker.bootstrap_servers} ({broker.start_seconds:.1f} s); work {work}")
        records = make_records(args.records, args.keys, args.seed)
        r["expected"] = expected_counts(
            records + make_records(args.increment, args.keys, args.seed + 1)
        )
        for side in args.sides.split(","):
            topic = f"in-{side.replace('_', '-')}"
            create_topic(broker.bootstrap_servers, topic)
            seconds = produce(broker.bootstrap_servers, topic, records)
            log(f"produced {len(records):,} records to {topic} in {seconds:.1f} s")
        for side in args.sides.split(","):
            try:
                r["sides"][side] = run_side(side, args, broker.bootstrap_servers, work)
            except RuntimeError as exc:  # the other sides' figures still count
                r.setdefault("errors", {})[side] = str(exc)
                log(f"ERROR: {exc}")
        figures(r, args.records)
        r["load_end"] = loadavg()
        print_results(r)
        Path(args.json).write_text(json.dumps(r, indent=2) + "\n")
        log(f"results in {args.json}")
    finally:
        from lakestate.io.kafka import close_clients

        close_clients()  # the cached admin client, before its broker goes
        broker.stop()
        if args.keep or "counts_equal" not in r or "errors" in r:  # a side's logs stay
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0 if all(r.get("counts_equal", {}).values()) and "errors" not in r else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
