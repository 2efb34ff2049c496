#!/usr/bin/env bash
# Resolves the Delta Lake jars (and their dependencies) from Maven Central into the project's
# Ivy cache (.cache/ivy, or $LAKESTATE_IVY_DIR), once: later Spark starts need no network.
# Idempotent: does nothing when the jars are already cached.
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python - <<'PY'
import time

from lakestate.runtime.spark_session import delta_maven_coordinates, get_spark, ivy_dir, jars_cached, stop_spark

coords, ivy = delta_maven_coordinates(), ivy_dir()
if jars_cached():
    print(f"fetch_jars: {coords} already cached in {ivy}")
else:
    print(f"fetch_jars: resolving {coords} into {ivy} (once; needs Maven Central)")
    start = time.monotonic()
    get_spark(master="local[1]", app_name="lakestate-fetch-jars")
    stop_spark()
    if not jars_cached():
        raise SystemExit(f"fetch_jars: {coords} was not cached in {ivy}")
    print(f"fetch_jars: done in {time.monotonic() - start:.0f}s")
PY
