#!/usr/bin/env bash
# Sets up (idempotently) and runs the whole test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
.venv/bin/ruff check lib tests jobs dags plugins
exec .venv/bin/python -m pytest -q "$@"
