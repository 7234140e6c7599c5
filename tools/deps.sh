#!/bin/sh
# Installs the Debian packages disco builds against, only when they are missing.
# Called by the Makefile before the first compile; harmless to run again.
# `deps.sh fuzz` instead installs what `make fuzz` needs: clang and its
# libFuzzer and sanitizer runtimes (libclang-rt-dev, which clang only
# recommends: --no-install-recommends would leave it out).
# `deps.sh plot [LOG]` installs gnuplot-nox for `make bench`'s plots, the
# same way (never fails).
# `deps.sh docs [LOG]` installs doxygen and chromium for `make docs`, and
# fails when it cannot (not root: it names them).
# `deps.sh mpi [LOG]` installs Debian's Open MPI, the baseline of `make
# bench`, when mpicc or mpirun is missing, and python3-mpi4py (the Python
# peers' baseline) when it is (root only; apt's output goes to LOG). It never fails: without Open MPI the benchmark skips its MPI figures
# and says so.
set -e

# Installs the packages named (none: nothing to do); root only.
install() {
    [ $# -gt 0 ] || return 0
    echo "deps: installing $*"
    if [ "$(id -u)" != 0 ]; then
        echo "deps: not root; install these packages: $*" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "$@"
}

if [ "${1:-}" = fuzz ]; then
    probe=$(mktemp -d)
    printf '%s\n' '#include <stddef.h>' '#include <stdint.h>' \
        'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { return d == 0 && n; }' \
        >"$probe/p.c"
    ok=0
    clang -fsanitize=fuzzer,address,undefined -o "$probe/p" "$probe/p.c" >/dev/null 2>&1 || ok=1
    rm -rf "$probe"
    [ "$ok" = 0 ] || install clang libclang-rt-dev
    exit 0
fi

# For `make bench` only (never fails: without them the benchmark skips the
# figures or plots and says so): installs PKGS (one word each) for WHAT,
# apt's output in LOG. Root only.
bench_install() {
    pkgs=$1 what=$2 log=$3
    if [ "$(id -u)" != 0 ]; then
        echo "bench: not root; $what skipped (install $pkgs)"
        return 0
    fi
    echo "bench: installing $pkgs ($what; log in $log)"
    mkdir -p "$(dirname "$log")"
    # shellcheck disable=SC2086 # one word per package
    if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        --no-install-recommends $pkgs; } >"$log" 2>&1; then
        tail -5 "$log"
        echo "bench: installing $pkgs failed; $what skipped"
    fi
}

if [ "${1:-}" = mpi ]; then
    # python3-mpi4py: the Python peers (tools/bench/py_peers.py) run mpi4py
    # over the same Open MPI.
    pkgs=""
    command -v mpicc >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1 ||
        pkgs="libopenmpi-dev openmpi-bin"
    dpkg-query -W -f='${Status}' python3-mpi4py 2>/dev/null | grep -q 'ok installed' ||
        pkgs="$pkgs python3-mpi4py"
    [ -z "$pkgs" ] && exit 0
    bench_install "$pkgs" "the MPI baselines" "${2:-build/mpi-install.log}"
    exit 0
fi

if [ "${1:-}" = docs ]; then
    # doxygen makes `make docs`' API reference; chromium opens a page of it
    # (tools/docs/check.sh). Unlike the bench groups this one fails when it
    # cannot install them: the target cannot run without them.
    missing=""
    command -v doxygen >/dev/null 2>&1 || missing="$missing doxygen"
    command -v chromium >/dev/null 2>&1 || missing="$missing chromium"
    [ -z "$missing" ] && exit 0
    if [ "$(id -u)" != 0 ]; then
        echo "deps: not root; install these packages for make docs:$missing" >&2
        exit 1
    fi
    log=${2:-build/docs/deps.log}
    mkdir -p "$(dirname "$log")"
    echo "deps: installing$missing (make docs; log in $log)"
    # shellcheck disable=SC2086 # one word per package
    install $missing >"$log" 2>&1 || { tail -5 "$log"; echo "deps: installing$missing failed"; exit 1; }
    exit 0
fi

if [ "${1:-}" = plot ]; then
    # gnuplot draws `make bench`'s plots (tools/bench/plot.py).
    command -v gnuplot >/dev/null 2>&1 && exit 0
    bench_install gnuplot-nox "the plots" "${2:-build/plot-install.log}"
    exit 0
fi

missing=""
command -v pkg-config >/dev/null 2>&1 || missing="$missing pkg-config"
command -v python3 >/dev/null 2>&1 || missing="$missing python3" # the JSON-RPC test
command -v g++ >/dev/null 2>&1 || missing="$missing g++" # the C++ header test (tests/cxx_api.cpp)
have_pc() { command -v pkg-config >/dev/null 2>&1 && pkg-config --exists "$1"; }
have_pc hwloc || missing="$missing libhwloc-dev"
have_pc check || missing="$missing check libsubunit-dev"
have_pc jansson || missing="$missing libjansson-dev"
have_pc libsodium || missing="$missing libsodium-dev" # RPC authentication (HMAC, random tokens)
[ -f /usr/include/dlpack/dlpack.h ] || missing="$missing libdlpack-dev"
# Open MPI: sessions across nodes (scheduler/node/) and their tests under
# mpirun; iproute2 (ip): the test that puts two nodes in network namespaces.
command -v mpicc >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1 ||
    missing="$missing libopenmpi-dev openmpi-bin"
command -v ip >/dev/null 2>&1 || missing="$missing iproute2"
# Debian packages checked by name (dpkg-query), for Debian's python3:
#   python3-pylsp-jsonrpc  a JSON-RPC client nobody here wrote (tests/jsonrpc_test.py)
#   python3-dev            Python.h, for the Python package's extension (make python)
#   python3-numpy, python3-torch, python3-pytest   the Python tests (tests/python)
#   python3-hypothesis     the property-based tests (tests/python/test_hypothesis*.py)
#   python3-venv, python3-setuptools, python3-wheel   pip install of the package, offline
#                          (setup.py; tests/install_test.sh)
if command -v dpkg-query >/dev/null 2>&1; then
    for p in python3-pylsp-jsonrpc python3-dev python3-numpy python3-torch python3-pytest \
        python3-hypothesis python3-venv python3-setuptools python3-wheel; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' ||
            missing="$missing $p"
    done
fi
# shellcheck disable=SC2086 # one word per package
install $missing
