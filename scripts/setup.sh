#!/usr/bin/env bash
# Sets up everything lakestate needs on a fresh machine, idempotently:
# Java 17 (Debian's package, if no java is on PATH), a Python 3.11 virtualenv in .venv with
# the project and its pinned dependencies, and (once the engine needs them) the Delta jars in
# a project-local cache so that later runs need no network; Maven and Kafka Streams (built
# once into .cache/kstreams) for the conformance suite; Chromium and its WebDriver (Debian's)
# for the Airflow UI test; Redis (Debian's redis-server) for the Celery workers' test.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3

if ! command -v java >/dev/null 2>&1; then
  echo "setup: installing Java 17 (openjdk-17-jre-headless)"
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq openjdk-17-jre-headless >/dev/null
fi

# The conformance suite builds its Kafka Streams runner with Maven, which needs the JDK.
if ! command -v mvn >/dev/null 2>&1 || ! command -v javac >/dev/null 2>&1; then
  echo "setup: installing Maven and the JDK (openjdk-17-jdk-headless) for the conformance suite"
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq maven openjdk-17-jdk-headless >/dev/null
fi

# The Airflow UI test drives headless Chromium through its WebDriver (both Debian packages, one
# version; Selenium is given the driver's path, so it downloads nothing).
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  echo "setup: installing Chromium and its WebDriver (chromium, chromium-driver) for the UI test"
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq chromium chromium-driver >/dev/null
fi

# The Celery test (tests/e2e/test_celery_instances.py) runs a Redis broker, as
# docker-compose.yml does (Debian's redis-server, started by the test on a free port).
if ! command -v redis-server >/dev/null 2>&1; then
  echo "setup: installing Redis (redis-server) for the Celery workers' test"
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq redis-server >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv with $("$PYTHON" --version)"
  "$PYTHON" -m venv .venv
fi

# Reinstall only when pyproject.toml changed since the last successful install.
stamp=.venv/.lakestate-installed
want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "setup: installing lakestate and its pinned dependencies into .venv (a few minutes the first time)"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[test]'
  echo "$want" > "$stamp"
fi
# The `lakestate` command is the project's console script ([project.scripts]):
# .venv/bin/lakestate, bare on the PATH after `source .venv/bin/activate`.
if [ ! -x .venv/bin/lakestate ]; then
  .venv/bin/python -m pip install -q --no-deps -e .
fi

if [ -x scripts/fetch_jars.sh ]; then
  scripts/fetch_jars.sh
fi
# Kafka Streams itself, for the conformance suite (tests/conformance): built once into .cache.
scripts/fetch_kstreams.sh >/dev/null
echo "setup: ready ($(.venv/bin/python -c 'import lakestate, pyspark, delta; print("lakestate ok, pyspark", pyspark.__version__)')); the command: .venv/bin/lakestate, or \`lakestate\` after \`source .venv/bin/activate\`"
