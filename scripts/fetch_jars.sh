#!/usr/bin/env bash
# Resolves the Delta Lake jars and Spark's S3A connector (hadoop-aws and the AWS SDK's s3
# modules, 13 MB; not the SDK's 686 MB bundle), with their dependencies, from Maven Central
# into the project's Ivy cache (.cache/ivy, or $LAKESTATE_IVY_DIR), once: later Spark starts
# need no network.
# Idempotent: does nothing when the jars are already cached.
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python - <<'PY'
import time

from lakestate import logfile
from lakestate.runtime.spark_session import (
    S3A_PACKAGES, delta_maven_coordinates, get_spark, ivy_dir, jars_cached, stop_spark,
)

coords, ivy = ", ".join((delta_maven_coordinates(), *S3A_PACKAGES)), ivy_dir()
if jars_cached():
    print(f"fetch_jars: {coords} already cached in {ivy}")
else:
    print(f"fetch_jars: resolving {coords} into {ivy} (once; needs Maven Central)")
    start = time.monotonic()
    # Ivy's resolution report (and Spark's start) goes to a log file of its own.
    log = logfile.start("fetch-jars")
    print(f"fetch_jars: Ivy's and Spark's output: {log.path}")
    try:
        get_spark(master="local[1]", app_name="lakestate-fetch-jars", s3=True)
        stop_spark()
    except Exception as exc:
        raise SystemExit(f"fetch_jars: Spark did not start ({exc}); see {log.path}") from None
    if not jars_cached():
        raise SystemExit(f"fetch_jars: {coords} was not cached in {ivy}; see {log.path}")
    print(f"fetch_jars: done in {time.monotonic() - start:.0f}s")
PY
