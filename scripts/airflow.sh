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
#   scripts/airflow.sh standalone            # UI on http://localhost:8080 (AIRFLOW__API__PORT)
#
# Tables go to ./warehouse and local state to ./state unless LAKESTATE_WAREHOUSE /
# LAKESTATE_STATE_DIR say otherwise.
#
# standalone: log in as `admin`, with the password Airflow generated on the first start
# (printed then, and kept in airflow_home/simple_auth_manager_passwords.json.generated).
# It runs in a process group of its own: SIGTERM or SIGINT (Ctrl-C) to this script stops
# all of it (the scheduler and its executor workers, dag-processor, api-server, triggerer,
# a running task), and the script returns once everything is gone.
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
# Tasks reach the execution API on the api-server: on its port, also when that is not 8080
# (Airflow's default is [api] base_url's, else http://localhost:8080).
api_base="${AIRFLOW__API__BASE_URL:-http://localhost:${AIRFLOW__API__PORT:-8080}}"
export AIRFLOW__CORE__EXECUTION_API_SERVER_URL="${AIRFLOW__CORE__EXECUTION_API_SERVER_URL:-${api_base%/}/execution/}"
# A task's calls to the execution API retry this many times, 5 to 10 s apart (Airflow's
# defaults: 5 times, 1 s to 90 s with an exponential backoff, which gives up after ~10 s).
# The scheduler starts a run before the api-server answers (a minute after the start on a
# small machine): with these a task waits for it, 95 s at least, instead of failing, and
# starts within 10 s of its answering.
export AIRFLOW__WORKERS__EXECUTION_API_RETRIES="${AIRFLOW__WORKERS__EXECUTION_API_RETRIES:-20}"
export AIRFLOW__WORKERS__EXECUTION_API_RETRY_WAIT_MIN="${AIRFLOW__WORKERS__EXECUTION_API_RETRY_WAIT_MIN:-5}"
export AIRFLOW__WORKERS__EXECUTION_API_RETRY_WAIT_MAX="${AIRFLOW__WORKERS__EXECUTION_API_RETRY_WAIT_MAX:-10}"

# Migrate the database on first use and whenever the pins (so maybe Airflow) changed.
mkdir -p "$AIRFLOW_HOME"
stamp="$AIRFLOW_HOME/.lakestate-migrated"
want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "airflow.sh: migrating the metadata database in $AIRFLOW_HOME" >&2
  airflow db migrate >/dev/null
  echo "$want" >"$stamp"
fi
if [ "${1:-}" != standalone ]; then
  exec airflow "$@"
fi

# standalone stops its components on Ctrl-C only, and then not the scheduler's executor
# workers; a SIGTERM leaves them all running. So it runs in a session (and process group)
# of its own, and a signal to this script stops the whole group, and the process groups of
# the tasks running under it (each task runs in a group of its own), then waits for them.
if [ ! -f "$AIRFLOW_HOME/simple_auth_manager_passwords.json.generated" ] \
  && [ -z "${AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS:-}" ]; then
  echo "airflow.sh: log in as admin with the password printed below (Airflow keeps it in" \
    "$AIRFLOW_HOME/simple_auth_manager_passwords.json.generated)" >&2
elif [ -z "${AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS:-}" ]; then
  echo "airflow.sh: log in as admin; the password is in" \
    "$AIRFLOW_HOME/simple_auth_manager_passwords.json.generated" >&2
fi
setsid airflow "$@" &  # a background job is no group leader: setsid does not fork, $! is it
pid=$!

# The process groups of $pid and of every process under it.
groups_under() {
  ps -e -o pid=,ppid=,pgid= | awk -v root="$1" '
    { parent[$1] = $2; group[$1] = $3 }
    END {
      for (p in parent) {
        q = p
        while (q != root && (q in parent) && q > 1) q = parent[q]
        if (q == root) print group[p]
      }
    }' | sort -u
}

# True while a process (a zombie aside) is left in one of the groups "$@".
any_left() {
  ps -e -o pgid=,stat= | awk -v groups=" $* " \
    'index(groups, " " $1 " ") && $2 !~ /^Z/ { found = 1 } END { exit !found }'
}

stop_all() {
  local groups deadline
  groups="$(groups_under "$pid") $pid"
  for group in $groups; do kill -TERM -- "-$group" 2>/dev/null || true; done
  deadline=$((SECONDS + ${LAKESTATE_AIRFLOW_STOP_TIMEOUT:-90}))
  while any_left $groups; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "airflow.sh: still running ${LAKESTATE_AIRFLOW_STOP_TIMEOUT:-90}s after SIGTERM: SIGKILL" >&2
      for group in $groups; do kill -KILL -- "-$group" 2>/dev/null || true; done
      break
    fi
    sleep 0.5
  done
  wait "$pid" 2>/dev/null || true
}

signal=""
trap 'signal=TERM' TERM
trap 'signal=INT' INT
trap 'signal=HUP' HUP
rc=0
wait "$pid" || rc=$?  # returns early when a trapped signal arrives
trap '' TERM INT HUP  # stopping: a second Ctrl-C does not cut it short
if [ -n "$signal" ]; then
  echo "airflow.sh: SIG$signal: stopping Airflow standalone and everything it started" >&2
  stop_all
  echo "airflow.sh: stopped" >&2
  exit $((128 + $(kill -l "$signal")))
fi
stop_all  # standalone exited by itself: what it started goes with it
exit "$rc"
