#!/usr/bin/env bash
# Sets up everything lakestate needs on a fresh machine, idempotently:
# Java 17 (Debian's package, if no java is on PATH), a Python 3.11 virtualenv in .venv with
# the project and its pinned dependencies, and (once the engine needs them) the Delta jars in
# a project-local cache so that later runs need no network; Maven and Kafka Streams (built
# once into .cache/kstreams) for the conformance suite; Apache Kafka's broker jars (resolved
# once, .cache/kafka) for the Kafka tests; Chromium and its WebDriver (Debian's)
# for the Airflow UI test; Redis (Debian's redis-server) for the Celery workers' test; moto's
# S3 server for the object-store tests (a test dependency in pyproject.toml, so it comes with
# the project's install and is reinstalled only when pyproject.toml changes).
#
# The terminal gets one line per step; what the steps print (apt, pip, Ivy's resolution of
# the jars, Maven) goes to a log file, .cache/setup-<UTC time>-<pid>.log
# ($LAKESTATE_SETUP_LOG), whose path and last lines are shown when a step fails.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi

mkdir -p .cache
# The newest setup logs only.
{ ls -1t .cache/setup-*.log 2>/dev/null || true; } | tail -n +10 | xargs -r rm -f
SETUP_LOG="${LAKESTATE_SETUP_LOG:-$PWD/.cache/setup-$(date -u +%Y%m%dT%H%M%SZ)-$$.log}"
: >"$SETUP_LOG"

# step WHAT COMMAND [ARG...]: say WHAT on one line, run the command with its output in the
# setup log; if it fails, say so with the log's path and last lines, and stop. (A function
# run as a step runs without `set -e`: it chains its commands with &&.)
step() {
  local what="$1"
  shift
  echo "setup: $what"
  echo "== $(date -u +%H:%M:%S) $what: $*" >>"$SETUP_LOG"
  if ! "$@" >>"$SETUP_LOG" 2>&1; then
    {
      echo "setup: failed: $what; its output is in $SETUP_LOG, which ends:"
      tail -n 15 "$SETUP_LOG" | sed 's/^/  /'
    } >&2
    exit 1
  fi
}

apt_install() {
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$@"
}

if ! command -v java >/dev/null 2>&1; then
  step "installing Java 17 (openjdk-17-jre-headless)" apt_install openjdk-17-jre-headless
fi

# The conformance suite builds its Kafka Streams runner with Maven, which needs the JDK.
if ! command -v mvn >/dev/null 2>&1 || ! command -v javac >/dev/null 2>&1; then
  step "installing Maven and the JDK (openjdk-17-jdk-headless) for the conformance suite" \
    apt_install maven openjdk-17-jdk-headless
fi

# The Airflow UI test drives headless Chromium through its WebDriver (both Debian packages, one
# version; Selenium is given the driver's path, so it downloads nothing).
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  step "installing Chromium and its WebDriver (chromium, chromium-driver) for the UI test" \
    apt_install chromium chromium-driver
fi

# The Celery test (tests/e2e/test_celery_instances.py) runs a Redis broker, as
# docker-compose.yml does (Debian's redis-server, started by the test on a free port).
if ! command -v redis-server >/dev/null 2>&1; then
  step "installing Redis (redis-server) for the Celery workers' test" apt_install redis-server
fi

if [ ! -x .venv/bin/python ]; then
  step "creating .venv with $("$PYTHON" --version)" "$PYTHON" -m venv .venv
fi

install_project() {
  .venv/bin/python -m pip install -q --upgrade pip && .venv/bin/python -m pip install -q -e '.[test]'
}
# Reinstall only when pyproject.toml changed since the last successful install.
stamp=.venv/.lakestate-installed
want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  step "installing lakestate and its pinned dependencies into .venv (a few minutes the first time)" \
    install_project
  echo "$want" > "$stamp"
fi
# The `lakestate` command is the project's console script ([project.scripts]):
# .venv/bin/lakestate, bare on the PATH after `source .venv/bin/activate`.
if [ ! -x .venv/bin/lakestate ]; then
  step "installing the lakestate command" .venv/bin/python -m pip install -q --no-deps -e .
fi

if [ -x scripts/fetch_jars.sh ]; then
  step "the Delta and S3A jars in .cache/ivy (resolved from Maven Central once)" scripts/fetch_jars.sh
fi
# Kafka Streams itself, for the conformance suite (tests/conformance): built once into .cache.
step "the conformance suite's Kafka Streams runner in .cache/kstreams (built once)" \
  scripts/fetch_kstreams.sh
# Apache Kafka's broker for the Kafka tests (tests/integration/kafka_broker.py): its jars, once.
step "Kafka's broker jars in .cache/m2 (resolved from Maven Central once)" scripts/fetch_kafka.sh
echo "setup: ready ($(.venv/bin/python -c 'import lakestate, pyspark, delta; print("lakestate ok, pyspark", pyspark.__version__)')); the command: .venv/bin/lakestate, or \`lakestate\` after \`source .venv/bin/activate\`"
