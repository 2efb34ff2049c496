"""The SparkSession factory: one place that knows how lakestate configures Spark and Delta.

``get_spark()`` builds (or returns the already running) SparkSession with Delta Lake enabled.
The Delta jars, and for a warehouse on a bucket (``get_spark(s3=True)``) Spark's S3A
connector (``S3A_PACKAGES``: 13 MB, not the AWS SDK's 686 MB bundle), come from Maven Central through Spark's own Ivy resolution
(``spark.jars.packages``) and are cached in a project-local Ivy directory, so only the first
run on a machine needs the network. The first start records the jar files Ivy resolved them
to (``resolved_jars``); later starts hand Spark those files (``spark.jars``) and skip Ivy. ``s3://`` paths go to S3A (``s3a_conf``), configured from
the ``AWS_*`` variables delta-rs reads (``lakestate.object_store.S3Settings``).

Environment:

``LAKESTATE_SPARK_MASTER``
    Spark master when ``get_spark`` is given none (default ``local[*]``).
``LAKESTATE_DELTA_JAR_VERSION``
    Delta jar release to resolve (default: matches the installed delta-spark).
``LAKESTATE_IVY_DIR``
    Ivy directory for the resolved jars (default ``<repo>/.cache/ivy``).
``LAKESTATE_SHUFFLE_PARTITIONS``
    ``spark.sql.shuffle.partitions`` (default 4: the data per batch is small).
``LAKESTATE_DRIVER_MEMORY``
    ``spark.driver.memory`` (default 4g: a batch's output is collected to the driver as
    Arrow, to be committed from there through delta-rs).
``LAKESTATE_SPARK_CONF``
    A JSON object of further Spark confs (applied after the defaults above).
``LAKESTATE_LOG_LEVEL``
    Spark's log level once the session is up (default ``WARN``).

The JVM's stdout and stderr (Ivy's resolution report, log4j's console output, Spark's
Python workers' output) never reach the terminal: under the ``lakestate`` command they go to
the command's log file (``lakestate.logfile``), and a JVM started from plain Python (a
notebook, a script calling ``get_spark``) writes to a file of its own,
``$LAKESTATE_LOG_DIR`` (else ``./logs``) ``/lakestate-spark-<UTC time>-<pid>.log``. Under
spark-submit, whose JVM is already up, nothing changes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import threading
import urllib.parse
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from pyspark.sql import SparkSession

if TYPE_CHECKING:
    from lakestate.object_store import S3Settings

__all__ = [
    "DELTA_CONF",
    "S3A_EXCLUDES",
    "S3A_PACKAGES",
    "delta_jar_version",
    "delta_maven_coordinates",
    "get_spark",
    "ivy_dir",
    "jars_cached",
    "s3a_conf",
    "spark_conf",
    "stop_spark",
]

DEFAULT_MASTER = "local[*]"
DEFAULT_SHUFFLE_PARTITIONS = 4
DEFAULT_LOG_LEVEL = "WARN"
DEFAULT_DRIVER_MEMORY = "4g"
SCALA_BINARY_VERSION = "2.13"

#: Session confs that turn Delta on. lakestate's tables are plain Delta (no deletion vectors,
#: no Change Data Feed): changelogs are their own change feed, and the engine commits
#: through delta-rs.
DELTA_CONF: dict[str, str] = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}

_lock = threading.Lock()

#: Spark's S3A connector: hadoop-aws at the version of pyspark's hadoop-client jars (3.5.0)
#: and, instead of the AWS SDK bundle it names (software.amazon.awssdk:bundle 2.35.4, 686 MB),
#: the two SDK modules S3A calls (``s3``, and ``s3-transfer-manager`` which it opens with its
#: client), with their own dependencies: 18 MB in all.
HADOOP_AWS_VERSION = "3.5.0"
AWS_SDK_VERSION = "2.35.4"  # hadoop-aws 3.5.0's (hadoop-project's aws-java-sdk-v2.version)
S3A_PACKAGES = (
    f"org.apache.hadoop:hadoop-aws:{HADOOP_AWS_VERSION}",
    f"software.amazon.awssdk:s3:{AWS_SDK_VERSION}",
    f"software.amazon.awssdk:s3-transfer-manager:{AWS_SDK_VERSION}",
)
#: Left out of the resolution: the bundle, and what Spark's own jars already have (netty
#: 4.2, Apache HttpClient, commons-codec/-logging, slf4j), which come first on its class path.
S3A_EXCLUDES = (
    "software.amazon.awssdk:bundle",
    "io.netty:*",
    "org.apache.httpcomponents:*",
    "commons-codec:commons-codec",
    "commons-logging:commons-logging",
    "org.slf4j:slf4j-api",
)


#: delta-spark releases on PyPI whose jars are not on Maven Central, mapped to the jar release
#: to use instead. delta-spark 4.4.1 was published to PyPI only: Maven Central has no
#: ``io.delta:*:4.4.1`` artifacts (its metadata lists 4.4.0 as the latest), and the 4.4.1 wheel
#: differs from 4.4.0 in ``delta/version.py`` alone, so the 4.4.0 jar is the exact match.
JAR_VERSION_FOR_PIP_VERSION: dict[str, str] = {"4.4.1": "4.4.0"}


def delta_jar_version() -> str:
    """The Delta jar release: env ``LAKESTATE_DELTA_JAR_VERSION``, else the one matching the
    installed delta-spark Python package."""
    env = os.environ.get("LAKESTATE_DELTA_JAR_VERSION")
    if env:
        return env
    pip_version = metadata.version("delta-spark")
    return JAR_VERSION_FOR_PIP_VERSION.get(pip_version, pip_version)


def delta_maven_coordinates() -> str:
    """The Maven coordinates of the Delta jar matching the installed delta-spark and pyspark.

    Same artifact rule as ``delta.pip_utils.configure_spark_with_delta_pip`` in delta-spark
    4.x: the artifact name carries Spark's major.minor and Scala's binary version. With
    pyspark 4.2.0 and delta-spark 4.4.1: ``io.delta:delta-spark_4.2_2.13:4.4.0`` (see
    ``JAR_VERSION_FOR_PIP_VERSION``).
    """
    import pyspark

    spark_major_minor = ".".join(pyspark.__version__.split(".")[:2])
    return f"io.delta:delta-spark_{spark_major_minor}_{SCALA_BINARY_VERSION}:{delta_jar_version()}"


def _project_root() -> Path | None:
    """The lakestate checkout this module runs from (editable install), or None."""
    for parent in Path(__file__).resolve().parents:
        if (parent / "pyproject.toml").is_file() and (parent / "lib" / "lakestate").is_dir():
            return parent
    return None


def ivy_dir() -> Path:
    """Where Spark's Ivy keeps the resolved jars: env LAKESTATE_IVY_DIR, else
    ``<repo>/.cache/ivy``, else (not running from a checkout) ``~/.cache/lakestate/ivy``."""
    env = os.environ.get("LAKESTATE_IVY_DIR")
    if env:
        return Path(env).expanduser().resolve()
    root = _project_root()
    if root is not None:
        return root / ".cache" / "ivy"
    return Path.home() / ".cache" / "lakestate" / "ivy"


def _packages(s3: bool) -> tuple[str, ...]:
    return (delta_maven_coordinates(), *(S3A_PACKAGES if s3 else ()))


def jars_cached(s3: bool = True) -> bool:
    """Whether the Delta jars (and with ``s3`` the S3A ones) are already in the Ivy cache
    (then starting Spark needs no network): Spark's Ivy copies resolved jars to
    ``<ivy>/jars/<org>_<artifact>-<rev>.jar``."""
    for coordinates in _packages(s3):
        org, artifact, version = coordinates.split(":")
        if not (ivy_dir() / "jars" / f"{org}_{artifact}-{version}.jar").is_file():
            return False
    return True


def _resolution_file(s3: bool) -> Path:
    """Where a start records the jar files Ivy resolved the packages (of ``s3``) to."""
    what = ",".join((*_packages(s3), *(S3A_EXCLUDES if s3 else ())))
    return ivy_dir() / f"lakestate-resolved-{hashlib.sha256(what.encode()).hexdigest()[:16]}.txt"


def resolved_jars(s3: bool) -> list[str] | None:
    """The jar files (``file:`` URIs) an earlier start resolved the packages to, when every
    one is still there; None: resolve them (Ivy's resolution costs seconds at every start,
    even with every jar cached)."""
    try:
        jars = _resolution_file(s3).read_text().split()
    except FileNotFoundError:
        return None
    if not jars or not all(Path(urllib.parse.urlparse(j).path).is_file() for j in jars):
        return None
    return jars


def _record_resolution(spark: SparkSession, s3: bool) -> None:
    """Record the jars Ivy resolved this start's packages to (``resolved_jars``): those in
    its ``jars`` directory, not any the user's confs added."""
    resolved = (ivy_dir() / "jars").resolve()
    given = spark.sparkContext.getConf().get("spark.jars", "").split(",")
    jars = [j for j in given if j and Path(urllib.parse.urlparse(j).path).parent == resolved]
    if not jars:
        return
    path = _resolution_file(s3)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text("\n".join(jars) + "\n")
    os.replace(tmp, path)  # whole or not at all, for a start racing this one


def _jars_conf(s3: bool) -> dict[str, str]:
    """The confs that give Spark its jars: the recorded resolution's files, else the
    packages for Ivy to resolve (``resolved_jars``)."""
    jars = resolved_jars(s3)
    if jars:
        return {"spark.jars": ",".join(jars)}
    conf = {"spark.jars.packages": ",".join(_packages(s3)), "spark.jars.ivy": str(ivy_dir())}
    if s3:
        conf["spark.jars.excludes"] = ",".join(S3A_EXCLUDES)
    return conf


def s3a_conf(settings: S3Settings | None = None) -> dict[str, str]:
    """The Spark confs that send ``s3://`` (and ``s3a://``) paths to S3A, at the endpoint,
    region and scheme of ``settings`` (default: the environment's ``AWS_*``). The
    credentials are not among them: ``s3a_credentials`` sets those on the running JVM, so
    they never appear on a command line."""
    from lakestate.object_store import S3Settings

    settings = settings or S3Settings.from_env()
    s3a = "org.apache.hadoop.fs.s3a"
    conf = {
        "spark.hadoop.fs.s3.impl": f"{s3a}.S3AFileSystem",
        "spark.hadoop.fs.AbstractFileSystem.s3.impl": f"{s3a}.S3A",
        # Fail within seconds, as the engine's own client does, not after S3A's minutes of
        # retries, when the store is down.
        "spark.hadoop.fs.s3a.attempts.maximum": "3",
        "spark.hadoop.fs.s3a.retry.limit": "3",
    }
    if settings.region:
        conf["spark.hadoop.fs.s3a.endpoint.region"] = settings.region
    if settings.endpoint:
        # An S3-compatible server (SeaweedFS, MinIO, moto): its buckets by path, not by
        # DNS name; http:// when AWS_ALLOW_HTTP allows it.
        conf["spark.hadoop.fs.s3a.endpoint"] = settings.endpoint
        conf["spark.hadoop.fs.s3a.path.style.access"] = "true"
        http = settings.endpoint.startswith("http://")
        conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(not http).lower()
    return conf


def s3a_credentials(spark: SparkSession, settings: S3Settings | None = None) -> None:
    """The environment's ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` (and
    ``AWS_SESSION_TOKEN``) as S3A's credentials, on the running session's Hadoop
    configuration (shipped to the executors with each job's). Unset: S3A's default chain."""
    from lakestate.object_store import S3Settings

    settings = settings or S3Settings.from_env()
    if not (settings.access_key and settings.secret_key):
        return
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    hadoop.set("fs.s3a.access.key", settings.access_key)
    hadoop.set("fs.s3a.secret.key", settings.secret_key)
    provider = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
    if settings.session_token:
        hadoop.set("fs.s3a.session.token", settings.session_token)
        provider = "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
    hadoop.set("fs.s3a.aws.credentials.provider", provider)


def _under_spark_submit() -> bool:
    """Whether this Python process was started by spark-submit (whose JVM, with its own
    ``--master``, is already up)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def _resolve_master(master: str | None) -> str:
    return master or os.environ.get("LAKESTATE_SPARK_MASTER") or DEFAULT_MASTER


def configured_master(master: str | None) -> str | None:
    """The master ``get_spark(master)`` starts Spark on; None under spark-submit without
    one given (spark-submit's ``--master`` then decides)."""
    if master or os.environ.get("LAKESTATE_SPARK_MASTER") or not _under_spark_submit():
        return _resolve_master(master)
    return None


def spark_conf(
    master: str | None = None,
    app_name: str = "lakestate",
    extra_conf: dict[str, str] | None = None,
    s3: bool = False,
) -> dict[str, str]:
    """Every conf ``get_spark`` sets, as a dict (also usable for spark-submit ``--conf``);
    ``s3``: with the S3A connector (its jars and ``s3a_conf``). Only then: its 67 modules,
    even cached, add seconds to Ivy's resolution at every start."""
    shuffle_partitions = os.environ.get(
        "LAKESTATE_SHUFFLE_PARTITIONS", str(DEFAULT_SHUFFLE_PARTITIONS)
    )
    conf: dict[str, str] = {
        "spark.app.name": app_name,
        **DELTA_CONF,
        "spark.sql.shuffle.partitions": shuffle_partitions,
        # Delta rebuilds a table's snapshot from its log with this many tasks (default 50):
        # far too many for small tables on a small machine.
        "spark.databricks.delta.snapshotPartitions": shuffle_partitions,
        # A batch's processed rows are cached once and read by every Delta write of the
        # batch; compressing that cache cost more time than it saved (measured: building
        # the cache of 1.4M rows took 3.4 s compressed, 1.2 s uncompressed).
        "spark.sql.inMemoryColumnarStorage.compressed": "false",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        # A Python worker's error keeps its whole chain: a failing record's traceback, in
        # the log file, then reaches into the app's own function (the simplified one drops
        # the cause, i.e. the app's frame).
        "spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled": "false",
        # Times are epoch milliseconds everywhere; keep Spark's rendering stable too.
        "spark.sql.session.timeZone": "UTC",
        # Classic (py4j) Spark: the engine's driver-side commit needs the JVM session.
        "spark.api.mode": "classic",
    }
    conf.update(_jars_conf(s3))
    recorded = conf.get("spark.jars")
    if s3:
        conf.update(s3a_conf())
    if configured_master(master):
        conf["spark.master"] = _resolve_master(master)
    conf["spark.driver.memory"] = os.environ.get("LAKESTATE_DRIVER_MEMORY", DEFAULT_DRIVER_MEMORY)
    # The batch's output comes to the driver in one piece (toArrow): no cap below the
    # driver's memory.
    conf["spark.driver.maxResultSize"] = "0"
    env_conf = os.environ.get("LAKESTATE_SPARK_CONF")
    if env_conf:
        try:
            conf.update({k: str(v) for k, v in json.loads(env_conf).items()})
        except (ValueError, AttributeError) as exc:
            raise ValueError(
                f"LAKESTATE_SPARK_CONF must be a JSON object of Spark confs, got {env_conf!r}"
            ) from exc
    if extra_conf:
        conf.update({k: str(v) for k, v in extra_conf.items()})
    user = conf.get("spark.jars")
    if recorded and user != recorded:  # a user's jars go beside the recorded ones
        conf["spark.jars"] = ",".join(filter(None, (recorded, user)))
    return conf


def get_spark(
    master: str | None = None,
    app_name: str = "lakestate",
    extra_conf: dict[str, str] | None = None,
    s3: bool = False,
) -> SparkSession:
    """The SparkSession lakestate runs on, with Delta Lake configured.

    ``master``: the argument, else env ``LAKESTATE_SPARK_MASTER``, else spark-submit's
    ``--master`` when running under spark-submit, else ``local[*]``.
    ``extra_conf`` is applied last and overrides the defaults. ``s3``: the warehouse is on a
    bucket (``s3://``): Spark gets the S3A connector, configured from the ``AWS_*``
    environment (``s3a_conf``, ``s3a_credentials``).

    If a SparkSession is already running in this process it is returned as is (Spark allows
    one SparkContext per JVM; static confs such as the master or the jars cannot change);
    ``extra_conf`` is then applied as runtime confs where Spark allows it.
    """
    with _lock:
        _pyspark_errors_to_log()
        existing = SparkSession.getActiveSession()
        if existing is not None:
            if s3:
                _check_s3a(existing)
                s3a_credentials(existing)
            for key, value in (extra_conf or {}).items():
                try:
                    existing.conf.set(key, str(value))
                except Exception:  # a static conf: fixed once the JVM is up
                    pass
            return existing

        # Python workers run the interpreter that runs lakestate (its venv), not whatever
        # python3 is first on PATH.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        conf = spark_conf(master, app_name, extra_conf, s3=s3)
        # Under spark-submit the JVM already has spark-submit's jars, not a resolution.
        packages = ",".join(_packages(s3))
        resolving = not _under_spark_submit() and conf.get("spark.jars.packages") == packages
        if "spark.jars.ivy" in conf:
            Path(conf["spark.jars.ivy"]).mkdir(parents=True, exist_ok=True)
        _launch_jvm_into_log(conf)
        builder = SparkSession.builder
        for key, value in conf.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        if resolving:
            _record_resolution(spark, s3)
        if s3:
            s3a_credentials(spark)
        spark.sparkContext.setLogLevel(os.environ.get("LAKESTATE_LOG_LEVEL", DEFAULT_LOG_LEVEL))
        return spark


def _check_s3a(spark: SparkSession) -> None:
    """Raises unless ``spark`` (already running) has the S3A connector: jars cannot be added
    to a running JVM."""
    if spark.conf.get("spark.hadoop.fs.s3.impl", None) is None:
        from lakestate.errors import StreamsException

        raise StreamsException(
            "the SparkSession running in this process was started without Spark's S3A "
            "connector, and the warehouse is on a bucket (s3://): stop it "
            "(lakestate.runtime.spark_session.stop_spark()) or start it with "
            "get_spark(s3=True)"
        )


def _pyspark_errors_to_log() -> None:
    """Under a command's log file, pyspark's query-context loggers write there: they do not
    propagate, and print a failed query's error with its Java stack as JSON on stderr."""
    from lakestate import logfile

    if logfile.current() is None:
        return
    from pyspark.logger import PySparkLogger

    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        logfile.capture(PySparkLogger.getLogger(name))


def _launch_jvm_into_log(conf: dict[str, str]) -> None:
    """When this process has no JVM yet, start it (``spark-submit``, as ``getOrCreate``
    would, with the same confs) with its stdout and stderr on the command's log file
    (``lakestate.logfile``), or without one on a log file of its own: Ivy's resolution
    report, log4j's console output and Spark's Python workers' output then stay off the
    terminal. The JVM keeps those for its life, so a later session in this process logs
    there too."""
    if _under_spark_submit():
        return
    from lakestate import logfile
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None:
        return
    log = logfile.current() or logfile.new("spark")
    logging.getLogger("lakestate.spark").info("Spark's output goes to %s", log.path)
    spark_conf = SparkConf()
    for key, value in conf.items():
        spark_conf.set(key, value)
    try:
        with log.open_for_child() as out:
            gateway = launch_gateway(spark_conf, popen_kwargs={"stdout": out, "stderr": out})
    except Exception as exc:
        exc.add_note(f"Spark's output: {log.path}")
        raise
    # What getOrCreate's SparkContext does with a gateway it is given (pyspark 4.2).
    SparkContext._ensure_initialized(gateway=gateway)


def stop_spark() -> None:
    """Stop the running SparkSession, if any (the next ``get_spark`` starts a new one)."""
    with _lock:
        spark = SparkSession.getActiveSession()
        if spark is not None:
            spark.stop()
