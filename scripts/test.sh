#!/usr/bin/env bash
# Sets up (idempotently) and runs the whole test suite. Extra arguments go to pytest.
# Two pytest workers: most of a Spark test's time is spent in one driver thread (planning,
# Delta commits), so two tests at once use the machine's two cores (LAKESTATE_TEST_WORKERS).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
.venv/bin/ruff check lib tests jobs dags plugins
exec .venv/bin/python -m pytest -q -n "${LAKESTATE_TEST_WORKERS:-2}" --dist worksteal --durations=25 "$@"
