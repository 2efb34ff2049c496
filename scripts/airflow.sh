#!/usr/bin/env bash
# Runs the Airflow CLI against a local, project-private Airflow: AIRFLOW_HOME=airflow_home/
# (SQLite, migrated on first use), the DAGs in dags/, the plugins in plugins/, no examples,
# and Spark on local[*] through the connection the DAGs use by default:
#   AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type": "spark", "host": "local[*]"}'
# Any of these already set in the environment wins, e.g. another master:
#   AIRFLOW_CONN_SPARK_DEFAULT='spark://host:7077?deploy-mode=client' scripts/airflow.sh ...
# (Without any spark_default connection the DAGs still run on local[*]: see
# lib/lakestate/airflow/dag_factory.py.)
#
#   scripts/airflow.sh dags list -l        # -l: parse dags/ now (else: what the DB holds)
#   scripts/airflow.sh dags test lakestate_demo -c '{"max_batches": 2}'
#   scripts/airflow.sh standalone            # UI on http://localhost:8080
#
# Tables go to ./warehouse and local state to ./state unless LAKESTATE_WAREHOUSE /
# LAKESTATE_STATE_DIR say otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"

if [ ! -x .venv/bin/airflow ]; then
  scripts/setup.sh
fi

export AIRFLOW_HOME="${AIRFLOW_HOME:-$root/airflow_home}"
export AIRFLOW__CORE__DAGS_FOLDER="${AIRFLOW__CORE__DAGS_FOLDER:-$root/dags}"
export AIRFLOW__CORE__PLUGINS_FOLDER="${AIRFLOW__CORE__PLUGINS_FOLDER:-$root/plugins}"
export AIRFLOW__CORE__LOAD_EXAMPLES="${AIRFLOW__CORE__LOAD_EXAMPLES:-False}"
export AIRFLOW_CONN_SPARK_DEFAULT="${AIRFLOW_CONN_SPARK_DEFAULT:-{\"conn_type\": \"spark\", \"host\": \"local[*]\"\}}"
export PATH="$root/.venv/bin:$PATH"

# Migrate the database on first use and whenever the pins (so maybe Airflow) changed.
mkdir -p "$AIRFLOW_HOME"
stamp="$AIRFLOW_HOME/.lakestate-migrated"
want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "airflow.sh: migrating the metadata database in $AIRFLOW_HOME" >&2
  airflow db migrate >/dev/null
  echo "$want" >"$stamp"
fi
exec airflow "$@"
