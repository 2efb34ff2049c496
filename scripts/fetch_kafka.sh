#!/usr/bin/env bash
# Resolves the test broker's jars (Apache Kafka's kafka_2.13 and its runtime dependencies,
# tests/integration/kafka_broker.pom.xml) from Maven Central once, into the project's Maven
# repository .cache/m2 ($LAKESTATE_M2_DIR), and writes their classpath to
# .cache/kafka/<hash of the pom>/classpath.txt ($LAKESTATE_KAFKA_DIR): later runs need no
# network. Idempotent.
# With --cached it resolves nothing: it fails when the jars are not cached (the tests use it,
# so that a missing setup fails them with what to do instead of a download in the middle).
# Prints the directory holding classpath.txt on stdout, its messages on stderr.
set -euo pipefail
cd "$(dirname "$0")/.."

pom=tests/integration/kafka_broker.pom.xml
cache="${LAKESTATE_KAFKA_DIR:-$PWD/.cache/kafka}"
# The classpath names the jars by their real path: .cache may be a link shared by checkouts.
m2="$(readlink -f "${LAKESTATE_M2_DIR:-$PWD/.cache/m2}")"
hash="$(sha256sum "$pom" | cut -c1-16)"
dir="$cache/$hash"

cached() {
  [ -f "$dir/classpath.txt" ] && tr ':' '\n' <"$dir/classpath.txt" | while read -r jar; do
    [ -f "$jar" ] || exit 1
  done
}

if cached; then
  echo "fetch_kafka: the broker's jars are cached ($dir)" >&2
elif [ "${1:-}" = "--cached" ]; then
  echo "fetch_kafka: Kafka's broker jars are not cached in $dir; run scripts/setup.sh (it resolves them from Maven Central once)" >&2
  exit 1
else
  command -v mvn >/dev/null 2>&1 || { echo "fetch_kafka: mvn not found (scripts/setup.sh installs it)" >&2; exit 1; }
  mkdir -p "$cache"
  # pytest workers and setup may resolve at once: one resolves, the others wait and reuse it.
  exec 9>"$cache/.lock"
  flock 9
  if ! cached; then
    echo "fetch_kafka: resolving $pom's jars into $m2 (once; needs Maven Central)" >&2
    start=$SECONDS
    tmp="$cache/classpath-$hash.tmp"
    log="$cache/resolve-$hash.log"
    if ! mvn -B -f "$pom" -Dmaven.repo.local="$m2" dependency:build-classpath \
      -Dmdep.includeScope=runtime -Dmdep.outputFile="$tmp" >"$log" 2>&1; then
      tail -n 30 "$log" >&2
      echo "fetch_kafka: the resolution failed (log: $log)" >&2
      exit 1
    fi
    mkdir -p "$dir"
    mv "$tmp" "$dir/classpath.txt"  # whole or not at all: classpath.txt marks a finished fetch
    rm -f "$log"
    size="$(tr ':' '\n' <"$dir/classpath.txt" | xargs du -cm | tail -1 | cut -f1)"
    echo "fetch_kafka: done in $((SECONDS - start))s ($size MB of jars)" >&2
  fi
fi
echo "$dir"
