#!/bin/sh
# Installs the Debian packages disco builds against, only when they are missing.
# Called by the Makefile before the first compile; harmless to run again.
set -e
missing=""
command -v pkg-config >/dev/null 2>&1 || missing="$missing pkg-config"
command -v python3 >/dev/null 2>&1 || missing="$missing python3" # the JSON-RPC test
have_pc() { command -v pkg-config >/dev/null 2>&1 && pkg-config --exists "$1"; }
have_pc hwloc || missing="$missing libhwloc-dev"
have_pc check || missing="$missing check libsubunit-dev"
have_pc jansson || missing="$missing libjansson-dev"
have_pc libsodium || missing="$missing libsodium-dev" # RPC authentication (HMAC, random tokens)
[ -f /usr/include/dlpack/dlpack.h ] || missing="$missing libdlpack-dev"
# A JSON-RPC client nobody here wrote, for tests/jsonrpc_test.py (Debian's python3).
if command -v dpkg-query >/dev/null 2>&1 &&
    ! dpkg-query -W -f='${Status}' python3-pylsp-jsonrpc 2>/dev/null | grep -q 'ok installed'; then
    missing="$missing python3-pylsp-jsonrpc"
fi
[ -z "$missing" ] && exit 0
echo "deps: installing$missing"
if [ "$(id -u)" != 0 ]; then
    echo "deps: not root; install these packages:$missing" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing
