"""Log tables, through the topic interface (``lakestate.io.topics``), on real Spark + Delta:
dense offsets when other writers commit in between, end offsets from the appends' commits
across OPTIMIZE, Spark's ranged reads (``runtime/spark_topics``), validation, table
properties, and the produce/consume CLI. The partitioner and warehouse tests at the top,
and tests/unit/test_topics.py, need no Spark."""

from __future__ import annotations

import json
import os

import pytest
from delta.tables import DeltaTable
from lakestate import cli
from lakestate.io import topics
from lakestate.io.logtable import ENDS_METADATA_KEY, PARTITIONS_PROPERTY
from lakestate.io.logtable import ends as log_ends
from lakestate.io.partitioner import canonical_json, murmur2, partition_for
from lakestate.runtime import spark_topics
from lakestate.warehouse import Warehouse

# -- partitioner (no Spark) ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "expected"),
    [  # Kafka's UtilsTest.testMurmur2
        (b"21", -973932308),
        (b"foobar", -790332482),
        (b"a-little-bit-long-string", -985981536),
        (b"a-little-bit-longer-string", -1486304829),
        (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        (b"abc", 479470107),
    ],
)
def test_murmur2_matches_kafka(data, expected):
    assert murmur2(data) == expected


def test_partition_for_is_kafka_default_partitioning_of_canonical_json():
    # The key "foobar" is the JSON text "\"foobar\"": hash those bytes, as Kafka would.
    for key, n in [("foobar", 7), (42, 5), ({"b": 1, "a": [1, 2]}, 12), ("ü", 3)]:
        data = canonical_json(key).encode()
        assert partition_for(key, n) == (murmur2(data) & 0x7FFFFFFF) % n
    assert canonical_json({"b": 1, "a": "ü"}) == '{"a":"ü","b":1}'
    assert partition_for({"a": 1, "b": 2}, 16) == partition_for({"b": 2, "a": 1}, 16)
    assert partition_for(None, 8) == 0
    assert partition_for("anything", 1) == 0
    # Pinned values: a change here moves every key of every existing topic.
    assert [partition_for(f"user-{i}", 4) for i in range(8)] == [1, 2, 3, 1, 3, 1, 0, 3]
    assert (partition_for({"id": 9}, 10), partition_for(17, 6)) == (5, 0)
    assert {partition_for(f"user-{i}", 4) for i in range(100)} == {0, 1, 2, 3}
    with pytest.raises(ValueError):
        partition_for("k", 0)


def test_partition_for_is_stable_across_processes():
    import subprocess
    import sys

    code = (
        "from lakestate.io.partitioner import partition_for;"
        "print([partition_for(k, 10) for k in ['a', 'order-17', 3, [1, 'x'], {'id': 9}]])"
    )
    env = {**os.environ, "PYTHONHASHSEED": "random"}
    outs = {
        subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        ).stdout
        for _ in range(2)
    }
    assert len(outs) == 1
    assert outs.pop().strip() == str(
        [partition_for(k, 10) for k in ["a", "order-17", 3, [1, "x"], {"id": 9}]]
    )


# -- warehouse (no Spark) -----------------------------------------------------------------


def test_warehouse_layout(tmp_path, monkeypatch):
    wh = Warehouse(tmp_path)
    assert wh.topic_path("orders") == str(tmp_path / "topics" / "orders")
    assert wh.app_path("shop") == str(tmp_path / "apps" / "shop")
    assert wh.changelog_path("shop", "counts") == str(
        tmp_path / "apps" / "shop" / "changelog" / "counts"
    )
    assert wh.progress_path("shop") == str(tmp_path / "apps" / "shop" / "_progress")
    assert wh.old_format_path("shop") == str(tmp_path / "apps" / "shop" / "_batches")
    for bad in ["", "..", "a/b", "x y", "../etc"]:
        with pytest.raises(ValueError, match="illegal topic name"):
            wh.topic_path(bad)

    assert wh.list_topics() == [] and wh.list_state_tables() == []
    for d in ["topics/b/_delta_log", "topics/a/_delta_log", "topics/not_a_table"]:
        (tmp_path / d).mkdir(parents=True)
    for d in [
        "apps/shop/changelog/s2/_delta_log",
        "apps/shop/changelog/s1/_delta_log",
        "apps/x/changelog",
    ]:
        (tmp_path / d).mkdir(parents=True)
    (tmp_path / "apps/shop/_progress/_delta_log").mkdir(parents=True)
    assert wh.list_topics() == ["a", "b"]
    assert [(t.app, t.store) for t in wh.list_state_tables()] == [("shop", "s1"), ("shop", "s2")]
    assert wh.list_state_tables("x") == []

    monkeypatch.setenv("LAKESTATE_WAREHOUSE", str(tmp_path / "env"))
    assert Warehouse().root == str(tmp_path / "env")
    monkeypatch.delenv("LAKESTATE_WAREHOUSE")
    monkeypatch.chdir(tmp_path)
    assert Warehouse().root == str(tmp_path / "warehouse")
    assert Warehouse("s3a://bucket/wh/").topic_path("t") == "s3a://bucket/wh/topics/t"


# -- log tables (Spark + Delta) -----------------------------------------------------------


def _offsets(spark, warehouse, topic):
    """{partition: [offsets]} as stored."""
    out: dict[int, list[int]] = {}
    for r in spark_topics.collect_records(
        spark_topics.read_topic(spark, topics.topic(warehouse, topic))
    ):
        out.setdefault(r.partition, []).append(r.offset)
    return out


@pytest.mark.integration
def test_offsets_are_dense_per_partition_across_appends(spark, warehouse):
    topics.topic(warehouse, "orders").create(3)
    assert topics.topic(warehouse, "orders").end_offsets() == {0: 0, 1: 0, 2: 0}

    first = topics.topic(warehouse, "orders").append(
        [
            {"key": "a", "value": 1, "timestamp": 10, "partition": 0},
            {"key": "b", "value": 2, "timestamp": 11, "partition": 2},
            ("c", 3, 12, 0),
            {"key": "d", "value": {"x": [1, None]}, "timestamp": 13, "partition": 0},
        ]
    )
    assert first.ranges == {0: (0, 3), 2: (0, 1)} and not first.skipped
    second = topics.topic(warehouse, "orders").append(
        [("e", 5, 20, 2), ("f", 6, 21, 1), ("g", None, 22, 0), ("h", 8, 23, 2)]
    )
    assert second.ranges == {0: (3, 4), 1: (0, 1), 2: (1, 3)}
    assert second.counts == {0: 1, 1: 1, 2: 2} and second.total == 4
    assert second.version == first.version + 1  # one commit per append

    assert topics.topic(warehouse, "orders").end_offsets() == {0: 4, 1: 1, 2: 3}
    assert _offsets(spark, warehouse, "orders") == {0: [0, 1, 2, 3], 1: [0], 2: [0, 1, 2]}

    # another writer (here: plain Spark) commits in between: offsets are re-read, not cached
    spark.createDataFrame(
        [(1, 1, 30, '"x"', "1", None)], spark_topics.spark_record_schema()
    ).write.format("delta").mode("append").save(warehouse.topic_path("orders"))
    third = topics.topic(warehouse, "orders").append([("y", 1, 31, 1)])
    assert third.ranges == {1: (2, 3)}
    # within a partition, offsets follow the order the records were given in
    p0 = [
        r
        for r in spark_topics.collect_records(
            spark_topics.read_topic(spark, topics.topic(warehouse, "orders"), [0])
        )
    ]
    assert [(r.key, r.value, r.timestamp) for r in p0] == [
        ("a", 1, 10),
        ("c", 3, 12),
        ("d", {"x": [1, None]}, 13),
        ("g", None, 22),
    ]


@pytest.mark.integration
def test_end_offsets_come_from_the_appends_commits_without_a_scan(spark, warehouse, monkeypatch):
    scans = []
    real_scan = log_ends._scan_end_offsets

    def counting_scan(path, n):
        scans.append(path)
        return real_scan(path, n)

    def end_offsets_in_a_new_process():
        log_ends.clear_cache()
        return topics.topic(warehouse, "ends").end_offsets()

    monkeypatch.setattr(log_ends, "_scan_end_offsets", counting_scan)
    topics.topic(warehouse, "ends").create(2)
    path = warehouse.topic_path("ends")
    assert end_offsets_in_a_new_process() == {0: 0, 1: 0}
    topics.topic(warehouse, "ends").append([("a", 1, 10, 0), ("b", 2, 11, 1), ("c", 3, 12, 1)])
    topics.topic(warehouse, "ends").append([("d", 4, 13, 1)])
    assert end_offsets_in_a_new_process() == {0: 1, 1: 3}
    newest = DeltaTable.forPath(spark, path).history(1).first()
    assert json.loads(newest["userMetadata"]) == {ENDS_METADATA_KEY: {"0": 1, "1": 3}}
    # OPTIMIZE changes no data: the appends' record still holds.
    spark.sql(f"OPTIMIZE delta.`{path}`")
    assert DeltaTable.forPath(spark, path).history(1).first()["operation"] == "OPTIMIZE"
    assert end_offsets_in_a_new_process() == {0: 1, 1: 3}
    assert scans == []
    # Another writer (plain Spark) records nothing: the offsets are scanned once, and the
    # next append records them again.
    spark.createDataFrame(
        [(1, 3, 30, '"x"', "1", None)], spark_topics.spark_record_schema()
    ).write.format("delta").mode("append").save(path)
    assert end_offsets_in_a_new_process() == {0: 1, 1: 4}
    assert len(scans) == 1
    assert topics.topic(warehouse, "ends").append([("y", 1, 31, 1)]).ranges == {1: (4, 5)}
    assert end_offsets_in_a_new_process() == {0: 1, 1: 5}
    assert len(scans) == 1
    assert _offsets(spark, warehouse, "ends") == {0: [0], 1: [0, 1, 2, 3, 4]}


@pytest.mark.integration
def test_concurrent_appends_keep_offsets_dense(spark, warehouse):
    from concurrent.futures import ThreadPoolExecutor

    topics.topic(warehouse, "busy").create(2)

    def produce(i):
        return topics.topic(warehouse, "busy").append(
            [(f"w{i}-{j}", j, j, j % 2) for j in range(4)]
        )

    busy = topics.topic(warehouse, "busy")
    with busy.append_lock(), busy.append_lock():  # reentrant
        pass
    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(produce, range(3)))
    assert sorted(r.ranges[0] for r in results) == [(0, 2), (2, 4), (4, 6)]
    assert _offsets(spark, warehouse, "busy") == {0: list(range(6)), 1: list(range(6))}


@pytest.mark.integration
def test_default_partition_and_timestamp(spark, warehouse):
    import time

    topics.topic(warehouse, "t").create(4)
    before = int(time.time() * 1000)
    keys = [f"user-{i}" for i in range(12)] + [None]
    topics.topic(warehouse, "t").append([{"key": k, "value": k} for k in keys])
    after = int(time.time() * 1000)
    records = spark_topics.collect_records(
        spark_topics.read_topic(spark, topics.topic(warehouse, "t"))
    )
    assert sorted((r.key or "", r.partition) for r in records) == sorted(
        (k or "", partition_for(k, 4)) for k in keys
    )
    assert all(before <= r.timestamp <= after for r in records)
    raw = spark.read.format("delta").load(warehouse.topic_path("t"))
    # None is SQL NULL, not the JSON text "null"; other keys are canonical JSON text
    assert raw.where("key IS NULL").count() == 1
    assert {row.key for row in raw.where("key IS NOT NULL").collect()} == {
        json.dumps(k) for k in keys if k
    }


@pytest.mark.integration
def test_replayed_append_with_same_txn_is_skipped(spark, warehouse):
    topics.topic(warehouse, "out").create(2)
    batch = [("k1", 1, 100, 0), ("k2", 2, 101, 1)]
    r1 = topics.topic(warehouse, "out").append(batch, txn_app_id="app-1", txn_version=7)
    assert r1.ranges == {0: (0, 1), 1: (0, 1)} and not r1.skipped

    replay = topics.topic(warehouse, "out").append(batch, txn_app_id="app-1", txn_version=7)
    assert replay.skipped and replay.ranges == {} and replay.version == r1.version
    older = topics.topic(warehouse, "out").append(batch, txn_app_id="app-1", txn_version=3)
    assert older.skipped
    assert topics.topic(warehouse, "out").end_offsets() == {0: 1, 1: 1}

    # the next batch, and another app id with the same version, are written
    r2 = topics.topic(warehouse, "out").append(batch, txn_app_id="app-1", txn_version=8)
    r3 = topics.topic(warehouse, "out").append(batch, txn_app_id="app-2", txn_version=7)
    assert r2.ranges == {0: (1, 2), 1: (1, 2)} and r3.ranges == {0: (2, 3), 1: (2, 3)}
    assert topics.topic(warehouse, "out").end_offsets() == {0: 3, 1: 3}
    with pytest.raises(ValueError, match="together"):
        topics.topic(warehouse, "out").append(batch, txn_app_id="app-1")


@pytest.mark.integration
def test_read_range_boundaries(spark, warehouse):
    topics.topic(warehouse, "r").create(2)
    topics.topic(warehouse, "r").append(
        [(f"k{i}", i, i, 0) for i in range(5)] + [(f"k{i}", i, i, 1) for i in range(3)]
    )

    def read(ranges):
        return [
            (r.partition, r.offset)
            for r in spark_topics.collect_records(
                spark_topics.read_range(spark, topics.topic(warehouse, "r"), ranges)
            )
        ]

    assert read({0: (1, 3)}) == [(0, 1), (0, 2)]  # start inclusive, end exclusive
    assert read({0: (0, 5), 1: (0, 3)}) == [(0, o) for o in range(5)] + [(1, o) for o in range(3)]
    assert read({1: (2, 100), 0: (4, 5)}) == [(0, 4), (1, 2)]  # ordered by partition, offset
    assert read({0: (2, 2)}) == []  # empty range
    assert read({0: (5, 9)}) == []  # at/after the end offset
    assert read({}) == []
    assert read({1: (0, 1)}) == [(1, 0)]  # other partitions are not read
    df = spark_topics.read_range(spark, topics.topic(warehouse, "r"), {0: (0, 2)})
    assert df.columns == ["partition", "offset", "timestamp", "key", "value", "headers"]
    # Unordered: the same records, and no sort in the plan (the engine orders each task's).
    unordered = spark_topics.read_range(
        spark, topics.topic(warehouse, "r"), {1: (2, 100), 0: (0, 5)}, ordered=False
    )
    assert sorted((r.partition, r.offset) for r in spark_topics.collect_records(unordered)) == [
        *[(0, o) for o in range(5)],
        (1, 2),
    ]
    assert unordered.columns == df.columns
    assert "Sort" not in unordered._jdf.queryExecution().executedPlan().toString()
    assert "Sort" in df._jdf.queryExecution().executedPlan().toString()
    for bad in [{0: (3, 1)}, {0: (-1, 2)}, {0: (0,)}, {-1: (0, 1)}]:
        with pytest.raises(ValueError, match="read_range"):
            spark_topics.read_range(spark, topics.topic(warehouse, "r"), bad)


@pytest.mark.integration
def test_invalid_records_write_nothing(spark, warehouse):
    topics.topic(warehouse, "v").create(2)
    topics.topic(warehouse, "v").append([("ok", 1, 5)])
    version = topics.topic(warehouse, "v").append([]).version
    cases = [
        ({"value": 1}, "record 1: missing 'key' field"),
        ({"key": "k"}, "record 1: missing 'value' field"),
        ({"key": "k", "value": {1, 2}}, "record 1: value is not JSON-serializable"),
        ({"key": object(), "value": 1}, "record 1: key is not JSON-serializable"),
        ({"key": "k", "value": float("nan")}, "record 1: value is not JSON-serializable"),
        ({"key": {1: "a"}, "value": 1}, "record 1: key is not JSON-serializable"),
        ({"key": "k", "value": 1, "timestamp": -1}, "record 1: timestamp must not be negative"),
        ({"key": "k", "value": 1, "timestamp": "now"}, "record 1: timestamp must be epoch"),
        ({"key": "k", "value": 1, "partition": 2}, "record 1: partition 2 is out of range"),
        ({"key": "k", "value": 1, "partition": -1}, "record 1: partition -1 is out of range"),
        ({"key": "k", "value": 1, "headers": [1]}, "record 1: headers must be a JSON object"),
        ({"key": "k", "value": 1, "timstamp": 5}, "record 1: unknown field 'timstamp'"),
        (("k",), "record 1: a record tuple is"),
        ("k", "record 1: a record is a dict"),
    ]
    for bad, message in cases:
        with pytest.raises(ValueError) as e:
            topics.topic(warehouse, "v").append([("fine", 1, 6), bad, ("fine", 2, 7)])
        assert message in str(e.value) and "nothing written" in str(e.value), str(e.value)

    with pytest.raises(ValueError) as e:
        topics.topic(warehouse, "v").append(
            [{"key": 1}, ("k", 1, -5), ("k", 1, 1, 9)], labels=["line 3", "line 4", "line 7"]
        )
    message = str(e.value)
    assert message.startswith("3 invalid records, nothing written")
    assert "line 3: missing 'value'" in message and "line 4: timestamp" in message
    assert "line 7: partition 9 is out of range" in message

    assert topics.topic(warehouse, "v").end_offsets() == {0: 1, 1: 0}  # partition_for("ok", 2) == 0
    assert topics.topic(warehouse, "v").append([]).version == version  # no commit at all
    with pytest.raises(ValueError, match="does not exist"):
        topics.topic(warehouse, "missing").append([("k", 1)])


@pytest.mark.integration
def test_created_tables_are_plain_delta_with_their_partition_count(spark, warehouse):
    props_topic = topics.topic(warehouse, "props")
    props_topic.create(3)
    path = props_topic.describe().location
    assert path == warehouse.topic_path("props")
    props = {
        row.key: row.value for row in spark.sql(f"SHOW TBLPROPERTIES delta.`{path}`").collect()
    }
    # No deletion vectors or change feed: any Delta writer (the engine's delta-rs) can append.
    assert props.get("delta.enableChangeDataFeed", "false") == "false"
    assert props.get("delta.enableDeletionVectors", "false") == "false"
    from lakestate.io import delta_commits

    assert delta_commits.open_table(path).protocol().writer_features in (None, [])
    assert props[PARTITIONS_PROPERTY] == "3"
    assert topics.topic(warehouse, "props").partitions() == 3
    assert warehouse.list_topics() == ["props"]

    # a topic dropped and re-created with another count is seen as such
    import shutil

    shutil.rmtree(path)
    topics.topic(warehouse, "props").create(2)
    assert topics.topic(warehouse, "props").partitions() == 2
    shutil.rmtree(path)
    topics.topic(warehouse, "props").create(3)
    assert topics.topic(warehouse, "props").partitions() == 3

    # idempotent create with the same count; a different count is refused
    topics.topic(warehouse, "props").create(3)
    assert topics.topic(warehouse, "props").partitions() == 3
    with pytest.raises(ValueError, match="already exists with 3 partitions"):
        topics.topic(warehouse, "props").create(4)
    with pytest.raises(ValueError, match="already exists"):
        topics.topic(warehouse, "props").create(3, exist_ok=False)

    # and plain Delta: an append through delta-rs (as the engine's) is read back by Spark
    from lakestate.io import delta_commits

    topics.topic(warehouse, "props").append([("k", "v", 1, 1)])
    assert delta_commits.open_table(path).to_pyarrow_table().num_rows == 1


# -- CLI ----------------------------------------------------------------------------------


@pytest.mark.integration
def test_cli_produce_consume_round_trip(spark, warehouse, tmp_path, capsys):
    records = [
        {"key": "alice", "value": {"amount": 3}, "timestamp": 1000},
        {"key": "bob", "value": 7, "timestamp": 1001, "headers": {"source": "test"}},
        {"key": None, "value": "no key", "timestamp": 1002},
        {"key": "alice", "value": None, "timestamp": 1003, "partition": 1},
    ]
    data = tmp_path / "orders.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in records) + "\n\n")
    wh = ["--warehouse", warehouse.root]

    assert cli.main([*wh, "produce", "orders", str(data), "--partitions", "2"]) == 0
    out = capsys.readouterr().out
    assert "created topic orders with 2 partitions" in out
    assert "appended 4 records to orders" in out
    expected_p = [partition_for("alice", 2), partition_for("bob", 2), 0, 1]
    for p in (0, 1):
        assert f"partition {p}: {expected_p.count(p)}" in out

    # a second produce continues the offsets; the existing partition count is kept
    assert cli.main([*wh, "produce", "orders", str(data)]) == 0
    capsys.readouterr()
    assert topics.topic(warehouse, "orders").end_offsets() == {
        p: 2 * expected_p.count(p) for p in (0, 1)
    }

    assert cli.main([*wh, "consume", "orders"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(o["partition"], o["offset"]) for o in lines] == sorted(
        (o["partition"], o["offset"]) for o in lines
    )
    by_partition: dict[int, list] = {0: [], 1: []}
    for o in lines:
        by_partition[o["partition"]].append(o)
    for p in (0, 1):
        mine = [r for r, rp in zip(records, expected_p, strict=True) if rp == p] * 2
        got = by_partition[p]
        assert [o["offset"] for o in got] == list(range(len(mine)))
        assert [(o["key"], o["value"], o["timestamp"]) for o in got] == [
            (r["key"], r["value"], r["timestamp"]) for r in mine
        ]
        assert [o.get("headers") for o in got] == [r.get("headers") for r in mine]
    assert set(lines[0]) >= {"partition", "offset", "timestamp", "key", "value"}

    assert cli.main([*wh, "consume", "orders", "--partition", "1", "--max-messages", "1"]) == 0
    only = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(o["partition"], o["offset"]) for o in only] == [(1, 0)]

    # the SparkSession the CLI found running is left running
    assert spark.range(1).count() == 1


@pytest.mark.integration
def test_cli_errors(spark, warehouse, tmp_path, capsys):
    wh = ["--warehouse", warehouse.root]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"key": "a", "value": 1}\n{"key": "b", "value": 2, "timestamp": -4}\n')
    assert cli.main([*wh, "produce", "t", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "line 2: timestamp must not be negative" in err and "nothing written" in err
    assert warehouse.list_topics() == []  # no empty topic left behind

    bad.write_text('{"key": "a", "value": 1}\n\n{"key": "b", "value": \n')
    assert cli.main([*wh, "produce", "t", str(bad)]) == 1
    assert "line 3: not valid JSON" in capsys.readouterr().err

    good = tmp_path / "good.jsonl"
    good.write_text('{"key": "a", "value": 1}\n')
    assert cli.main([*wh, "produce", "t", str(good), "--partitions", "3"]) == 0
    assert cli.main([*wh, "produce", "t", str(good), "--partitions", "2"]) == 1
    assert "exists with 3 partitions" in capsys.readouterr().err
    assert cli.main([*wh, "consume", "nope"]) == 1
    assert "topic 'nope' does not exist" in capsys.readouterr().err
    assert cli.main([*wh, "produce", "t", str(tmp_path / "missing.jsonl")]) == 1
    assert cli.main(["frobnicate"]) == 2
