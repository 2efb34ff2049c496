"""What ``scripts/setup.sh`` shows a person: one line per step, everything the steps print
(apt, pip, Ivy's resolution of the Delta jars and its warnings, Maven) in a log file, and
on a failure the log's path and its last lines. Timing-light: a set-up checkout does
nothing but check, and the failing step fails as soon as Ivy finds no such jar."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
JARS_STEP = "setup: the Delta and S3A jars in .cache/ivy (resolved from Maven Central once)"


def _setup(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LAKESTATE_")}
    clean.update(
        LAKESTATE_SETUP_LOG=str(tmp_path / "setup.log"),
        LAKESTATE_LOG_DIR=str(tmp_path / "logs"),
        **env,
    )
    return subprocess.run(
        ["bash", str(REPO / "scripts" / "setup.sh")],
        cwd=tmp_path,
        env=clean,
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_a_set_up_checkout_prints_one_line_per_step(tmp_path):
    proc = _setup(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stderr == ""
    lines = proc.stdout.splitlines()
    assert lines[:-1] == [
        JARS_STEP,
        "setup: the conformance suite's Kafka Streams runner in .cache/kstreams (built once)",
        "setup: Kafka's broker jars in .cache/m2 (resolved from Maven Central once)",
    ]
    assert lines[-1].startswith("setup: ready (lakestate ok, pyspark ")
    log = (tmp_path / "setup.log").read_text()
    assert "fetch_jars: io.delta:delta-spark_" in log and "already cached" in log
    assert "fetch_kstreams: the Kafka Streams runner is already built" in log
    assert "fetch_kafka: the broker's jars are cached" in log


def test_a_failing_step_shows_its_log_not_its_noise(tmp_path):
    """No such Delta jar: Ivy's resolution (a report, "not found" warnings) fails, and the
    terminal shows the step, then the failure with the setup log's path and last lines."""
    proc = _setup(
        tmp_path,
        LAKESTATE_IVY_DIR=str(tmp_path / "ivy"),
        LAKESTATE_DELTA_JAR_VERSION="0.0.0-no-such-release",
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.splitlines() == [JARS_STEP]
    failed, *tail = proc.stderr.splitlines()
    setup_log = tmp_path / "setup.log"
    assert failed == (
        "setup: failed: the Delta and S3A jars in .cache/ivy (resolved from Maven Central once); "
        f"its output is in {setup_log}, which ends:"
    )
    assert 0 < len(tail) <= 15 and all(line.startswith("  ") for line in tail), tail
    assert "fetch_jars: Spark did not start" in proc.stderr
    # Ivy's words are in the logs, not on the terminal.
    terminal = proc.stdout + proc.stderr
    for noise in (":: resolving dependencies", "io.delta#delta-spark", "loading settings"):
        assert noise not in terminal, noise
    [ivy_log] = (tmp_path / "logs").glob("lakestate-fetch-jars-*.log")
    assert f"see {ivy_log}" in proc.stderr
    ivy = ivy_log.read_text()
    assert ":: resolving dependencies" in ivy and "io.delta#delta-spark" in ivy
    assert f"fetch_jars: Ivy's and Spark's output: {ivy_log}" in setup_log.read_text()
