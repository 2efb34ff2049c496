"""Spark starts without Ivy once a start has resolved the packages (spark_session.py): the
jar files recorded then are handed to Spark as ``spark.jars``, as long as every one is
still there; otherwise Ivy resolves them again, as on the first start."""

from __future__ import annotations

from pathlib import Path

import pytest
from lakestate.runtime import spark_session


@pytest.fixture
def ivy(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("LAKESTATE_IVY_DIR", str(tmp_path / "ivy"))
    (tmp_path / "ivy").mkdir()
    return tmp_path / "ivy"


def _record(s3: bool, jars: list[Path]) -> None:
    spark_session._resolution_file(s3).write_text("\n".join(j.as_uri() for j in jars) + "\n")


def test_without_a_recorded_resolution_ivy_resolves_the_packages(ivy):
    conf = spark_session.spark_conf("local[1]")
    assert conf["spark.jars.packages"] == spark_session.delta_maven_coordinates()
    assert conf["spark.jars.ivy"] == str(ivy)
    assert "spark.jars" not in conf


def test_a_recorded_resolution_whose_jars_are_there_skips_ivy(ivy, tmp_path):
    jars = [tmp_path / "a.jar", tmp_path / "b.jar"]
    for jar in jars:
        jar.write_bytes(b"PK")
    _record(False, jars)
    conf = spark_session.spark_conf("local[1]")
    assert conf["spark.jars"] == ",".join(j.as_uri() for j in jars)
    assert "spark.jars.packages" not in conf and "spark.jars.ivy" not in conf
    # The S3A set is another resolution: not recorded yet, so Ivy resolves it.
    s3 = spark_session.spark_conf("local[1]", s3=True)
    assert "spark.jars" not in s3
    assert s3["spark.jars.packages"].endswith(spark_session.S3A_PACKAGES[-1])
    assert s3["spark.jars.excludes"] == ",".join(spark_session.S3A_EXCLUDES)


def test_a_recorded_jar_gone_means_resolving_again(ivy, tmp_path):
    jar = tmp_path / "a.jar"
    jar.write_bytes(b"PK")
    _record(False, [jar, tmp_path / "gone.jar"])
    assert spark_session.resolved_jars(False) is None
    assert "spark.jars.packages" in spark_session.spark_conf("local[1]")


def test_a_user_s_jars_go_beside_the_recorded_ones(ivy, tmp_path, monkeypatch):
    jar = tmp_path / "a.jar"
    jar.write_bytes(b"PK")
    _record(False, [jar])
    monkeypatch.setenv("LAKESTATE_SPARK_CONF", '{"spark.jars": "file:///opt/mine.jar"}')
    conf = spark_session.spark_conf("local[1]")
    assert conf["spark.jars"] == f"{jar.as_uri()},file:///opt/mine.jar"
