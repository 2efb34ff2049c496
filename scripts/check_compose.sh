#!/usr/bin/env bash
# Validates docker-compose.yml (or the files given as arguments) with a real Compose
# implementation. Needs no Docker engine: `config` only parses, interpolates and checks the
# file against the Compose schema.
#
#   scripts/check_compose.sh [FILE...]   # files relative to the repository root
#
# Every implementation on the machine is used (a file must satisfy each of them):
# `docker compose` (the CLI plugin, v2 and later) and `docker-compose` (a standalone binary:
# Debian's 1.29 or a v2+ build). When neither is present and apt can install packages (root, or
# passwordless sudo), Debian's docker-compose is installed (about 15 seconds);
# LAKESTATE_COMPOSE_INSTALL=none installs nothing. Nothing is installed anywhere else.
# Exit status: 0 valid, 1 invalid, 2 bad usage, 3 skipped: no Docker Compose on this machine.
set -euo pipefail
cd "$(dirname "$0")/.."

INSTALL="${LAKESTATE_COMPOSE_INSTALL:-apt}"
SKIPPED="skipped: no Docker Compose on this machine (install docker-compose from apt)"

if [ "$#" -eq 0 ]; then set -- docker-compose.yml; fi

log() { echo "check_compose: $*" >&2; }

have_plugin() { command -v docker >/dev/null 2>&1 && docker compose version >/dev/null 2>&1; }
have_standalone() { command -v docker-compose >/dev/null 2>&1 && docker-compose version >/dev/null 2>&1; }

# apt-get as root, directly or through passwordless sudo; fails when neither is possible.
as_root() {
  if [ "$(id -u)" = 0 ]; then
    "$@"
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo -n "$@"
  else
    return 1
  fi
}

install_apt() {
  command -v apt-get >/dev/null 2>&1 || return 1
  log "installing Debian's docker-compose (apt, about 15 seconds)"
  local aptlog rc=0
  aptlog="$(mktemp)"
  {
    as_root apt-get update -qq &&
      as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        docker-compose
  } >"$aptlog" 2>&1 || rc=$?
  if [ "$rc" -ne 0 ]; then
    log "apt-get could not install docker-compose (exit $rc):"
    tail -n 15 "$aptlog" >&2
  fi
  rm -f "$aptlog"
  return "$rc"
}

case "$INSTALL" in
  apt | none) ;;
  *)
    log "LAKESTATE_COMPOSE_INSTALL must be apt or none, not '$INSTALL'"
    exit 2
    ;;
esac

if ! have_plugin && ! have_standalone && [ "$INSTALL" = apt ]; then
  install_apt || true
fi

tools=()
if have_plugin; then tools+=("docker compose"); fi
if have_standalone; then tools+=("docker-compose"); fi
if [ "${#tools[@]}" -eq 0 ]; then
  log "$SKIPPED"
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
