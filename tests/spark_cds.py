"""A class-data-sharing archive (Java's AppCDS) for the tests' Spark driver JVMs.

A Spark driver JVM spends much of its start loading, parsing and verifying the classes of
Spark, Scala, Delta and Hadoop from their jars, and the suite starts a few hundred of them
(one per process of each kill chain). A dynamic archive of those classes, written once by
one JVM (``-XX:ArchiveClassesAtExit``), is mapped by later ones (``-XX:SharedArchiveFile``):
measured on Java 17, a driver start plus a small Delta write and read took 11.9-13.1 CPU s
instead of 18.0-20.3 (the suite's FAST_TEST_CONF JVM options), 20.5 instead of 32.7 with
Spark's own (G1, C2).

The archive is built once per machine (about a minute; the first test run after a clean
clone, or ``python tests/spark_cds.py``) into ``.cache/spark-cds/``, named by what it
depends on (the JDK, pyspark and its jars), and handed to every driver the tests start
through ``SPARK_SUBMIT_OPTS``, which Spark's launcher adds to the driver JVM's options (and
only the driver's: not the standalone cluster's daemons nor the Kafka broker). A JVM the
archive does not fit (another class path) ignores it (``-Xshare:auto``, Java's default),
logging why in its own output. ``SPARK_SUBMIT_OPTS`` also carries FAST_TEST_CONF's JVM
options (``DRIVER_OPTIONS``) to the drivers started without FAST_TEST_CONF: with Spark's
own (G1, the optimizing compiler) the same start took 32.7 CPU s. ``LAKESTATE_TEST_SPARK_CDS=0``
turns both off.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

CACHE = Path(__file__).resolve().parents[1] / ".cache" / "spark-cds"
#: FAST_TEST_CONF's driver JVM options (tiny data: compiling costs more than it saves), for
#: the drivers a test starts without it too (the CLI in a fresh process, the README's runs).
DRIVER_OPTIONS = ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]
#: Bumped when the workload below changes (a new name, so a new archive).
WORKLOAD_VERSION = "1"

# The JVM's work while it records its classes: what the tests' drivers do (Delta written
# and read, a shuffle, Arrow to Python and back), with the tests' Spark settings. It stops
# the JVM itself: the archive is written as the JVM exits normally.
_WORKLOAD = """
import sys
sys.path.insert(0, {integration!r})
from engine_helpers import FAST_TEST_CONF
from lakestate.runtime.spark_session import get_spark, stop_spark
spark = get_spark(master="local[2]", app_name="lakestate-cds", extra_conf=FAST_TEST_CONF)
table = {table!r}
rows = spark.range(200).selectExpr("id", "cast(id % 7 as string) as k")
rows.write.format("delta").mode("overwrite").save(table)
read = spark.read.format("delta").load(table)
read.groupBy("k").count().collect()
read.mapInArrow(lambda batches: batches, read.schema).collect()
spark.sql(f"SELECT k, max(id) FROM delta.`{{table}}` GROUP BY k").collect()
stop_spark()
from pyspark import SparkContext
gateway = SparkContext._gateway
gateway.shutdown()
gateway.proc.stdin.close()
gateway.proc.wait(120)
"""


def enabled() -> bool:
    return os.environ.get("LAKESTATE_TEST_SPARK_CDS", "1") != "0"


def archive_path() -> Path | None:
    """Where the archive for this machine's JDK and pyspark is (or would be); None without
    a ``java`` on PATH."""
    java = shutil.which("java")
    if java is None:
        return None
    import pyspark

    java = Path(java).resolve()
    release = java.parents[1] / "release"
    # The archive holds the class path the driver's launcher gives, from pyspark's folder
    # resolved (SPARK_HOME): another folder's JVMs could not use it.
    home = Path(pyspark.__file__).resolve().parent
    jars = sorted(p.name for p in (home / "jars").glob("*.jar"))
    parts = [WORKLOAD_VERSION, str(java), str(home), pyspark.__version__, *jars]
    parts.append(release.read_text() if release.is_file() else str(java.stat().st_mtime))
    digest = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
    return CACHE / f"driver-{digest}.jsa"


def ensure_archive() -> Path | None:
    """The archive, built first if missing (one builder at a time, across processes and
    worktrees sharing the cache). None when it cannot be built: the tests then run without."""
    path = archive_path()
    if path is None or path.is_file():
        return path
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.is_file():
            _build(path)
    return path if path.is_file() else None


def _build(path: Path) -> None:
    work = CACHE / f"build-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    partial = work / "driver.jsa"
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESTATE_SPARK")}
    env["SPARK_SUBMIT_OPTS"] = f"-XX:ArchiveClassesAtExit={partial}"
    env["LAKESTATE_LOG_DIR"] = str(work / "logs")
    tests = Path(__file__).resolve().parent
    env["PYTHONPATH"] = os.pathsep.join(
        [str(tests.parent / "lib"), str(tests), env.get("PYTHONPATH", "")]
    )
    code = _WORKLOAD.format(integration=str(tests / "integration"), table=str(work / "table"))
    print(f"spark_cds: building {path} (once per machine, about a minute)", file=sys.stderr)
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=900
        )
    except subprocess.TimeoutExpired:  # the tests run without it; the next run tries again
        print("spark_cds: not built (no end after 900 s)", file=sys.stderr)
    else:
        if done.returncode == 0 and partial.is_file():
            partial.rename(path)
        else:
            said = done.stderr[-2000:]
            print(f"spark_cds: not built ({done.returncode}): {said}", file=sys.stderr)
    shutil.rmtree(work, ignore_errors=True)


def use_archive() -> None:
    """Hands the archive (built if missing) and ``DRIVER_OPTIONS`` to the Spark drivers
    this process and its children start, through ``SPARK_SUBMIT_OPTS``."""
    if not enabled():
        return
    path = ensure_archive()
    options = [*DRIVER_OPTIONS, f"-XX:SharedArchiveFile={path}"] if path else DRIVER_OPTIONS
    opts = os.environ.get("SPARK_SUBMIT_OPTS", "").split()
    os.environ["SPARK_SUBMIT_OPTS"] = " ".join(opts + [o for o in options if o not in opts])


if __name__ == "__main__":
    print(ensure_archive())
