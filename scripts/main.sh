#!/usr/bin/env bash
# Sets up (idempotently) and runs the main job on the embedded defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/lakestate demo "$@"
