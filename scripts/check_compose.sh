#!/usr/bin/env bash
# Validates docker-compose.yml (or the files given as arguments) with a real Compose
# implementation, installing one first if none is on the machine. Needs no Docker engine:
# `config` only parses, interpolates and checks the file against the Compose schema.
#
#   scripts/check_compose.sh [FILE...]   # files relative to the repository root
#
# Every implementation found is used (a file must satisfy each of them):
#   - `docker compose` (the Compose CLI plugin, v2 and later), and
#   - `docker-compose` (a standalone binary: Debian's 1.29 or a v2+ build).
# When neither is present, one is installed, idempotently, as LAKESTATE_COMPOSE_INSTALL says:
#   go    (default) Docker Compose ${COMPOSE_VERSION} built from its Go module with the
#         machine's Go toolchain, installed as the docker CLI plugin in
#         ${DOCKER_CONFIG:-~/.docker}/cli-plugins/docker-compose (about 2 minutes on a fresh
#         2-core machine, once; falls back to apt when Go is missing or too old)
#   apt   Debian's docker-compose package (Compose 1.29, about 15 seconds)
#   none  install nothing
# Exit status: 0 valid, 1 invalid, 2 bad usage, 3 no Compose implementation could be had.
set -euo pipefail
cd "$(dirname "$0")/.."

# v5.5.1 builds with Go >= 1.26.3 (this machine kind has 1.26.8). Later releases need a newer Go
# (v5.7.0: 1.26.10) or, v5.6.0, a dependency version that the Go module proxy does not serve.
COMPOSE_MODULE="github.com/docker/compose/v5"
COMPOSE_VERSION="${LAKESTATE_COMPOSE_VERSION:-v5.5.1}"
INSTALL="${LAKESTATE_COMPOSE_INSTALL:-go}"
PLUGIN_DIR="${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins"

if [ "$#" -eq 0 ]; then set -- docker-compose.yml; fi

log() { echo "check_compose: $*" >&2; }

have_plugin() { command -v docker >/dev/null 2>&1 && docker compose version >/dev/null 2>&1; }
have_standalone() { command -v docker-compose >/dev/null 2>&1 && docker-compose version >/dev/null 2>&1; }

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

install_apt() {
  log "installing Debian's docker-compose (apt, about 15 seconds)"
  local aptlog rc=0
  aptlog="$(mktemp)"
  {
    as_root apt-get update -qq &&
      as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        docker-compose
  } >"$aptlog" 2>&1 || rc=$?
  if [ "$rc" -ne 0 ]; then
    log "apt-get failed (exit $rc):"
    tail -n 15 "$aptlog" >&2
  fi
  rm -f "$aptlog"
  return "$rc"
}

# Builds the Compose CLI from its module (downloaded through the Go module proxy) in a
# throw-away GOPATH and build cache. `go install module/cmd@version` refuses the module because
# its go.mod has exclude directives, so the module is built as the main module instead.
install_go() {
  if ! command -v go >/dev/null 2>&1; then
    log "no Go toolchain"
    return 1
  fi
  if ! command -v docker >/dev/null 2>&1; then
    log "no docker CLI to plug Compose into"
    return 1
  fi
  local work rc=0
  work="$(mktemp -d "${TMPDIR:-/tmp}/lakestate-compose.XXXXXX")"
  log "building Docker Compose $COMPOSE_VERSION from its Go module (about 2 minutes, once)"
  (
    set -e
    export GOPATH="$work/gopath" GOMODCACHE="$work/gopath/pkg/mod" GOCACHE="$work/gocache"
    export GOFLAGS="-modcacherw -buildvcs=false" GOTOOLCHAIN=local CGO_ENABLED=0
    mkdir -p "$work/probe"
    cd "$work/probe"
    dir="$(go mod download -json "$COMPOSE_MODULE@$COMPOSE_VERSION" |
      sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')"
    [ -n "$dir" ] && [ -d "$dir" ]
    cd "$dir"
    go build -trimpath -ldflags "-s -w -X $COMPOSE_MODULE/internal.Version=$COMPOSE_VERSION" \
      -o "$work/docker-compose" ./cmd
  ) >"$work/build.log" 2>&1 || rc=$?
  if [ "$rc" -ne 0 ]; then
    log "building Compose failed (exit $rc); last lines of the log:"
    tail -n 15 "$work/build.log" >&2
    rm -rf "$work"
    return 1
  fi
  mkdir -p "$PLUGIN_DIR"
  install -m 0755 "$work/docker-compose" "$PLUGIN_DIR/docker-compose"
  rm -rf "$work"
}

if ! have_plugin && ! have_standalone; then
  case "$INSTALL" in
    go) install_go || { log "falling back to apt"; install_apt; } || true ;;
    apt) install_apt || true ;;
    none)
      log "no Compose implementation installed (LAKESTATE_COMPOSE_INSTALL=none)"
      exit 3
      ;;
    *)
      log "LAKESTATE_COMPOSE_INSTALL must be go, apt or none, not '$INSTALL'"
      exit 2
      ;;
  esac
fi

tools=()
if have_plugin; then tools+=("docker compose"); fi
if have_standalone; then tools+=("docker-compose"); fi
if [ "${#tools[@]}" -eq 0 ]; then
  log "no Compose implementation could be installed"
  exit 3
fi

# An empty env file: the defaults written in the file, not a developer's local .env.
no_env="$(mktemp)"
trap 'rm -f "$no_env"' EXIT

status=0
for file in "$@"; do
  for tool in "${tools[@]}"; do
    # -p: a fixed project name, so the result does not depend on the checkout's folder name.
    if out="$($tool --env-file "$no_env" -p lakestate -f "$file" config -q 2>&1)"; then
      echo "check_compose: $file is valid ($($tool version --short 2>/dev/null || echo "$tool"))"
    else
      echo "check_compose: $file is INVALID according to $tool:" >&2
      echo "$out" >&2
      status=1
    fi
  done
done
exit "$status"
