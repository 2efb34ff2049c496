"""A run's transport (runtime/transport.py): which one a run uses and why (the run's option,
else the app's ``lakestate.transport``, else the pending-records threshold), clear errors
for a bad value, the batch's reads giving each task exactly its planned ranges, and the
in-process path never importing pyspark."""

from __future__ import annotations

import subprocess
import sys

import pytest
from lakestate.checkpoint.batch import TaskPlan, global_key
from lakestate.cli import build_parser
from lakestate.cli.submit import build_parser as submit_parser
from lakestate.errors import StreamsException
from lakestate.runtime.batch_rows import GLOBAL_INPUT
from lakestate.runtime.transport import (
    MAX_RECORDS_CONFIG,
    TRANSPORT_CONFIG,
    TRANSPORTS,
    choose,
    input_reads,
    local_master,
)
from lakestate.task_id import TaskId


@pytest.mark.parametrize(
    ("pending", "limit", "in_process"),
    [(0, 10, True), (10, 10, True), (11, 10, False), (0, 0, False), (5, 0, False)],
)
def test_auto_is_in_process_up_to_the_threshold(pending, limit, in_process):
    choice = choose(None, {}, pending, limit)
    assert choice.in_process is in_process
    where = "in this process, no Spark" if in_process else "in Spark"
    assert choice.line() == (
        f"transport: {where} ({pending} records pending; {MAX_RECORDS_CONFIG} {limit})"
    )


@pytest.mark.parametrize(
    ("pending", "limit", "in_process", "why"),
    [
        (10, 10, True, ""),
        (11, 10, True, "; Spark's master is local: in process at any size"),
        (5, 0, False, ""),  # 0: always Spark, whatever the master
    ],
)
def test_auto_with_a_local_master_is_in_process_at_any_size(pending, limit, in_process, why):
    choice = choose(None, {}, pending, limit, local=True)
    assert choice.in_process is in_process
    assert choice.why == f"{pending} records pending; {MAX_RECORDS_CONFIG} {limit}{why}"
    # Asked for, Spark it is, local or not.
    assert not choose("spark", {}, pending, limit, local=True).in_process


@pytest.mark.parametrize(
    ("master", "env", "submit", "local"),
    [
        ("local[2]", None, False, True),
        ("local", None, False, True),
        ("spark://host:7077", "local[2]", False, False),  # the run's master wins
        (None, "local[*]", True, True),
        (None, "spark://host:7077", False, False),
        (None, None, False, True),  # Spark's default: local[*]
        (None, None, True, False),  # spark-submit's --master decides: not known
    ],
)
def test_local_master_follows_the_master_spark_would_start_on(
    monkeypatch, master, env, submit, local
):
    monkeypatch.delenv("LAKESTATE_SPARK_MASTER", raising=False)
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    if env:
        monkeypatch.setenv("LAKESTATE_SPARK_MASTER", env)
    if submit:
        monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "40000")
    assert local_master(master) is local


def test_the_run_option_wins_over_the_app_config_which_wins_over_auto():
    spark_app = {TRANSPORT_CONFIG: "spark"}
    assert choose(None, spark_app, 3, 10).line() == (
        f"transport: in Spark ({TRANSPORT_CONFIG} spark; 3 records pending)"
    )
    assert choose("inprocess", spark_app, 3, 10).line() == (
        "transport: in this process, no Spark (--transport inprocess; 3 records pending)"
    )
    # Asked for, the transport does not depend on the threshold either way.
    assert choose("inprocess", {}, 10**9, 0).in_process
    assert not choose("spark", {TRANSPORT_CONFIG: "inprocess"}, 0, 10).in_process
    # --transport auto: the threshold, whatever the app says.
    assert choose("auto", spark_app, 3, 10).in_process
    assert choose(None, {TRANSPORT_CONFIG: "auto"}, 3, 10).in_process


@pytest.mark.parametrize(
    ("option", "config", "named"),
    [("gpu", {}, "--transport"), (None, {TRANSPORT_CONFIG: "Spark"}, TRANSPORT_CONFIG)],
)
def test_a_bad_value_is_a_clear_error(option, config, named):
    with pytest.raises(StreamsException) as caught:
        choose(option, config, 1, 10)
    message = str(caught.value)
    assert named in message and "auto, inprocess, spark" in message
    assert repr(option or config[TRANSPORT_CONFIG]) in message


def test_the_command_lines_take_the_transports():
    for parser, argv in ((build_parser(), ["run", "app.py"]), (submit_parser(), ["app.py"])):
        assert parser.parse_args(argv).transport is None  # the app's config decides
        for value in TRANSPORTS:
            assert parser.parse_args([*argv, "--transport", value]).transport == value


def test_the_cli_rejects_a_bad_transport(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "app.py", "--transport", "gpu"])
    assert "invalid choice: 'gpu'" in capsys.readouterr().err


def _plans() -> list[TaskPlan]:
    g0, g1 = global_key("products", 0), global_key("products", 1)
    return [
        TaskPlan(TaskId(0, 0), 3, {"a": (0, 5), "b": (2, 4), g0: (0, 7), g1: (0, 2)}),
        TaskPlan(TaskId(0, 1), 1, {"a": (4, 9), g0: (0, 7), g1: (0, 2)}),
        TaskPlan(TaskId(0, 2), 8, {"b": (1, 3), g0: (5, 7)}),  # its store held more
        TaskPlan(TaskId(1, 1), 2, {"rep": (10, 20)}),
    ]


def test_each_task_reads_exactly_its_planned_ranges():
    inputs = {0: ["a", "b"], 1: ["rep"]}
    plans = _plans()
    reads = input_reads(inputs, ("products",), plans)
    for plan in plans:
        got: dict[str, tuple[int, int]] = {}
        for read in reads:
            for partition, bounds in read.ranges_of(plan.task).items():
                key = global_key(read.topic, partition) if read.is_global else read.topic
                assert key not in got, f"{plan.task} reads {key} twice"
                got[key] = bounds
                if not read.is_global:
                    assert partition == plan.task.partition
                    assert read.input_index == inputs[plan.task.subtopology].index(read.topic)
        assert got == plan.ranges, plan.task
    # One read per sub-topology and input; the global ranges read once per distinct set.
    shape = sorted((r.topic, r.input_index, r.readers) for r in reads)
    assert shape == [
        ("a", 0, (TaskId(0, 0), TaskId(0, 1))),
        ("b", 1, (TaskId(0, 0), TaskId(0, 2))),
        ("products", GLOBAL_INPUT, (TaskId(0, 0), TaskId(0, 1))),
        ("products", GLOBAL_INPUT, (TaskId(0, 2),)),
        ("rep", 0, (TaskId(1, 1),)),
    ]


def test_the_in_process_path_imports_no_pyspark():
    code = (
        "import sys\n"
        "import lakestate.runtime.runner, lakestate.runtime.inprocess\n"
        "import lakestate.runtime.routing, lakestate.runtime.transport\n"
        "import lakestate.scaleout.instance_run, lakestate.cli.main, lakestate.cli.run\n"
        "from lakestate import run_app\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j')))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "[]"
