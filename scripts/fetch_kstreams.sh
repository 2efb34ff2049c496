#!/usr/bin/env bash
# Builds the conformance suite's Kafka Streams runner (tests/conformance/kstreams) once, with
# Maven, into .cache/kstreams/<hash of its sources> ($LAKESTATE_KSTREAMS_DIR), its jars in the
# project's Maven repository .cache/m2 ($LAKESTATE_M2_DIR): later runs need no network.
# Idempotent: does nothing when the runner of the current sources is built already.
# Prints the runner's directory (runner.jar, classpath.txt) on stdout, its messages on stderr.
set -euo pipefail
cd "$(dirname "$0")/.."

src=tests/conformance/kstreams
# Real paths: classpath.txt records the jars' paths, and a checkout whose .cache is a link
# to another's must not record a path through a link that may go away.
cache="$(realpath -m "${LAKESTATE_KSTREAMS_DIR:-$PWD/.cache/kstreams}")"
m2="$(realpath -m "${LAKESTATE_M2_DIR:-$PWD/.cache/m2}")"
# The sources' hash names the build: a changed pom or Java class builds a new runner.
hash="$(cd "$src" && find pom.xml src -type f | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16)"
dir="$cache/$hash"

# A build whose classpath names a jar that is gone (a deleted Maven repository) is rebuilt.
if [ -f "$dir/classpath.txt" ]; then
  IFS=: read -r -a jars < "$dir/classpath.txt" || true  # no final newline
  for jar in "${jars[@]}"; do
    if [ ! -f "$jar" ]; then
      echo "fetch_kstreams: $jar is gone; rebuilding the runner" >&2
      rm -rf "$dir"
      break
    fi
  done
fi

if [ ! -f "$dir/classpath.txt" ]; then
  mkdir -p "$cache"
  # pytest workers and setup may build at once: one builds, the others wait and reuse it.
  exec 9>"$cache/.lock"
  flock 9
  if [ ! -f "$dir/classpath.txt" ]; then
    command -v mvn >/dev/null 2>&1 || { echo "fetch_kstreams: mvn not found (scripts/setup.sh installs it)" >&2; exit 1; }
    echo "fetch_kstreams: building the Kafka Streams runner into $dir (once; needs Maven Central)" >&2
    start=$SECONDS
    build="$cache/build-$hash"
    rm -rf "$build"
    # Maven's words only when it fails (Debian's Maven 3.8 prints colour resets even with -q).
    if ! mvn -q -B -f "$src/pom.xml" -Dmaven.repo.local="$m2" -Drunner.build.dir="$build" \
      -Dmaven.test.skip=true package >"$cache/build-$hash.log" 2>&1; then
      cat "$cache/build-$hash.log" >&2
      echo "fetch_kstreams: the build failed (log: $cache/build-$hash.log)" >&2
      rm -rf "$build"
      exit 1
    fi
    rm -f "$cache/build-$hash.log"
    mkdir -p "$build/runner"
    cp "$build/conformance-kstreams-1.jar" "$build/runner/runner.jar"
    cp "$build/classpath.txt" "$build/runner/classpath.txt"
    mv "$build/runner" "$dir"  # whole or not at all: classpath.txt marks a finished build
    rm -rf "$build"
    echo "fetch_kstreams: done in $((SECONDS - start))s" >&2
  fi
else
  echo "fetch_kstreams: the Kafka Streams runner is already built in $dir" >&2
fi
echo "$dir"
