#!/usr/bin/env bash
# check-kit.sh KIT OUTDIR - `make gpu-kit-check`: proves the GPU kit needs
# nothing of this machine, by running it where nothing of ours is and no
# GPU either, twice:
#   1. DISCO_REQUIRE_GPU=0: every step that needs no GPU passes ("ok"),
#      every GPU step skips cleanly ("skip"), nothing fails, no preflight
#      line (every library resolved inside the kit);
#   2. the default (DISCO_REQUIRE_GPU=1), GPU steps only: every one FAILS,
#      its summary line saying "no CUDA device".
# Each run's summary.txt and log.txt are kept in OUTDIR/require0 and
# OUTDIR/require1; a failed assertion names the step and its line.
#
# Where: a bare Debian root (debootstrap bookworm, variant minbase, plus
# python3, python3-numpy and python3-pytest: what the GPU machine brings
# but torch; no compiler, none of disco's libraries, no Open MPI), unpacked
# afresh for each check from a tarball cached in $DISCO_CI_CACHE/gpu-kit
# (default /var/cache/disco-ci/gpu-kit; rebuilt when its recipe changes),
# as .ci/bare-root does for the install check. The kit unpacks at the
# root's /tmp/disco-gpu, as on the GPU machine. Everything runs in private
# mount, PID and network namespaces (unshare; loopback only, as the GPU
# machine has no network): no mount or process outlives the check.
# Needs root, unshare and chroot; debootstrap (installed when missing) and
# the Debian mirror only to build the root the first time.
# BUDGET (default 900): run 1's budget (run-gpu.sh's); its SPMD step runs
# with --quick here (2 CPUs: 16 workers are heavily oversubscribed).
set -euo pipefail

SUITE=bookworm
VARIANT=minbase
INCLUDE=python3,python3-numpy,python3-pytest
CACHE=${DISCO_CI_CACHE:-/var/cache/disco-ci}/gpu-kit
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
BUDGET=${BUDGET:-900}

say() { echo "gpu-kit-check: $*"; }
die() {
    echo "gpu-kit-check: FAIL: $*" >&2
    exit 1
}

# The first apt source of this machine whose URI ends in /debian.
apt_uri() {
    local f uri
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
        [ -r "$f" ] || continue
        uri=$(sed -n -e 's/^URIs:[[:space:]]*//p' \
            -e 's/^deb[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\?\([^[:space:]]\+\).*/\2/p' "$f" |
            tr -s '[:space:]' '\n' | grep -E "/debian/?\$" | head -n 1) || true
        if [ -n "$uri" ]; then
            echo "${uri%/}"
            return
        fi
    done
    echo "http://deb.debian.org/debian"
}

# Builds the root into $1. Its text is part of the recipe (the cache key).
build_root() {
    debootstrap --variant="$VARIANT" --include="$INCLUDE" --keyring="$KEYRING" \
        "$SUITE" "$1" "$MIRROR" || return 1
    rm -f "$1"/var/cache/apt/archives/*.deb
}

root_mounts() {
    awk -v r="$1" '$5 == r || index($5, r "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r
}
unmount_root() {
    local m
    for m in $(root_mounts "$1"); do
        umount "$m" || umount -l "$m" || echo "gpu-kit-check: cannot unmount $m" >&2
    done
}

# The line of step $2 in summary file $1 ("" when absent).
line_of() { awk -v s="$2" '$1 == s' "$1"; }

# --- inside a private mount namespace (with the network): the root -----------
# Prints nothing but what it does; the cached tarball is $CACHE/root-*.tar.
make_root() {
    local t0 recipe hash tarball
    t0=$(date +%s)
    recipe="suite=$SUITE variant=$VARIANT include=$INCLUDE arch=$(dpkg --print-architecture)
mirror=$MIRROR
$(declare -f build_root)"
    hash=$(printf '%s' "$recipe" | sha256sum | cut -c1-16)
    tarball=$CACHE/root-$SUITE-$VARIANT-$hash.tar
    rm -rf --one-file-system "$CACHE"/run.* "$CACHE"/build.* # a run killed hard (the lock is ours)
    if [ -f "$tarball" ]; then
        say "cached root $tarball"
        return 0
    fi
    say "building the root (debootstrap $SUITE $VARIANT +$INCLUDE from $MIRROR)"
    local b
    b=$(mktemp -d "$CACHE/build.XXXXXX")
    if ! build_root "$b/root" >"$b/debootstrap.log" 2>&1; then
        tail -n 30 "$b/debootstrap.log" >&2
        unmount_root "$b/root"
        rm -rf --one-file-system "$b"
        die "debootstrap failed (log above)"
    fi
    unmount_root "$b/root"
    tar -C "$b/root" --numeric-owner -cf "$b/root.tar" .
    rm -f "$CACHE"/root-*.tar # older recipes
    mv "$b/root.tar" "$tarball"
    rm -rf --one-file-system "$b"
    say "root built and cached in $(($(date +%s) - t0)) s ($(du -h "$tarball" | cut -f1))"
}

# --- inside private mount, PID and network namespaces: the two runs ---------
stage() {
    local kit=$1 out=$2 t0 tarball run root
    t0=$(date +%s)
    tarball=$(ls "$CACHE"/root-"$SUITE"-"$VARIANT"-*.tar) || die "no cached root"

    run=$(mktemp -d "$CACHE/run.XXXXXX")
    root=$run/root
    # shellcheck disable=SC2064 # expand now: the trap must know this run's paths
    trap "unmount_root '$root'; rm -rf --one-file-system '$run'" EXIT
    mkdir "$root"
    tar -C "$root" --numeric-owner -xf "$tarball" || die "cannot unpack $tarball (delete it to rebuild)"
    # The root is bare: none of the libraries the kit brings, no compiler.
    local l
    for l in libhwloc.so.15 libjansson.so.4 libsodium.so.23 libsubunit.so.0 libmpi.so.40 \
        libevent_core-2.1.so.7 libpmix.so.2; do
        if compgen -G "$root/usr/lib/x86_64-linux-gnu/$l*" >/dev/null; then
            die "the root has $l: it is not bare"
        fi
    done
    for l in cc gcc mpirun; do
        [ ! -e "$root/usr/bin/$l" ] || die "the root has /usr/bin/$l: it is not bare"
    done
    cp "$kit" "$root/tmp/gpu-kit.tar.gz"

    mount -t proc proc "$root/proc"
    mount -t sysfs -o ro sysfs "$root/sys"
    mount -t tmpfs -o mode=755,nosuid dev "$root/dev"
    local d
    for d in null zero full random urandom tty; do
        touch "$root/dev/$d"
        mount --bind "/dev/$d" "$root/dev/$d"
    done
    ln -s /proc/self/fd "$root/dev/fd"
    ln -s /proc/self/fd/0 "$root/dev/stdin"
    ln -s /proc/self/fd/1 "$root/dev/stdout"
    ln -s /proc/self/fd/2 "$root/dev/stderr"
    mkdir -m 1777 "$root/dev/shm"
    mount -t tmpfs -o mode=1777,nosuid,nodev shm "$root/dev/shm"
    ip link set lo up # the network namespace's loopback: the only network here

    # Run 1 (DISCO_REQUIRE_GPU=0), then run 2 (the default) on the GPU
    # steps run 1 found; the kit is unpacked as the GPU machine would.
    local rc1=0 rc2=0 t1 t2 t3
    t1=$(date +%s)
    chroot "$root" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        HOME=/root LANG=C.UTF-8 DISCO_REQUIRE_GPU=0 BUDGET="$BUDGET" BENCH_ARGS=--quick /bin/sh -ec '
            tar -xzf /tmp/gpu-kit.tar.gz -C /tmp
            sh /tmp/disco-gpu/run-gpu.sh /tmp/out-require0' </dev/null >/dev/null 2>&1 || rc1=$?
    t2=$(date +%s)
    mkdir -p "$out/require0" "$out/require1"
    cp "$root"/tmp/out-require0/summary.txt "$root"/tmp/out-require0/log.txt "$out/require0/" ||
        die "run 1 left no summary.txt (exit status $rc1)"
    say "run 1 (DISCO_REQUIRE_GPU=0): exit status $rc1, $((t2 - t1)) s:"
    sed 's/^/    /' "$out/require0/summary.txt"

    local s0=$out/require0/summary.txt s1=$out/require1/summary.txt
    local gpu=() cpu=(step py) mixed=(tools) s ln bad=0
    # The GPU steps: the CUDA suites (and the _mps twins run-gpu.sh runs),
    # MPS, the GPU figures, the demo, the torch probe, the torch decoder on
    # CUDA, the Python device tests when the kit has them.
    local suites mps
    suites=$(grep -Eo '^SUITE\((cuda|gpu_[A-Za-z0-9_]*)\)' "$root/tmp/disco-gpu/tests/suites.def" |
        sed 's/^SUITE(//; s/)$//')
    mps=$(sed -n 's/^MPS_SUITES="\(.*\)"$/\1/p' "$root/tmp/disco-gpu/run-gpu.sh")
    [ -n "$suites" ] && [ -n "$mps" ] || die "no GPU suites or MPS_SUITES found in the kit"
    for s in $suites; do gpu+=("$s"); done
    for s in $mps; do gpu+=("${s}_mps"); done
    gpu+=(mps_on bench_mps demo_mps torch_mps tp_cuda_mps bench)
    if compgen -G "$root/tmp/disco-gpu/tests/python/test_device*.py" >/dev/null; then
        gpu+=(pydev_mps)
    fi

    # run 1: nothing failed; GPU steps skipped, CPU steps passed
    grep -q '^run-gpu: 0 failed, 0 not run' "$s0" || { say "run 1: not every step passed"; bad=1; }
    [ "$rc1" = 0 ] || { say "run 1: exit status $rc1"; bad=1; }
    if [ -n "$(line_of "$s0" preflight)" ]; then
        say "run 1: preflight: $(line_of "$s0" preflight)"
        bad=1
    fi
    for s in "${gpu[@]}"; do
        ln=$(line_of "$s0" "$s")
        [[ "$ln" =~ ^$s\ +skip\  ]] || { say "run 1: GPU step $s did not skip: ${ln:-absent}"; bad=1; }
    done
    for s in "${cpu[@]}"; do
        ln=$(line_of "$s0" "$s")
        [[ "$ln" =~ ^$s\ +ok\  ]] || { say "run 1: step $s did not pass: ${ln:-absent}"; bad=1; }
    done
    for s in "${mixed[@]}"; do
        ln=$(line_of "$s0" "$s")
        [[ "$ln" =~ ^$s\ +(ok|skip)\  ]] || { say "run 1: step $s did not pass: ${ln:-absent}"; bad=1; }
    done

    # run 2: the GPU steps (and tools, whose demo and bench run on cuda)
    # under the default: each fails saying "no CUDA device"
    t2=$(date +%s)
    chroot "$root" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        HOME=/root LANG=C.UTF-8 STEPS="${gpu[*]} ${mixed[*]}" /bin/sh -ec '
            sh /tmp/disco-gpu/run-gpu.sh /tmp/out-require1' </dev/null >/dev/null 2>&1 || rc2=$?
    t3=$(date +%s)
    cp "$root"/tmp/out-require1/summary.txt "$root"/tmp/out-require1/log.txt "$out/require1/" ||
        die "run 2 left no summary.txt (exit status $rc2)"
    say "run 2 (DISCO_REQUIRE_GPU=1, the GPU steps): exit status $rc2, $((t3 - t2)) s:"
    sed 's/^/    /' "$s1"
    for s in "${gpu[@]}" "${mixed[@]}"; do
        ln=$(line_of "$s1" "$s")
        [[ "$ln" =~ ^$s\ +FAIL\ .*no\ CUDA\ device ]] ||
            { say "run 2: GPU step $s did not fail saying \"no CUDA device\": ${ln:-absent}"; bad=1; }
    done
    [ "$rc2" = "$((${#gpu[@]} + ${#mixed[@]}))" ] ||
        { say "run 2: exit status $rc2, not the $((${#gpu[@]} + ${#mixed[@]})) steps run"; bad=1; }
    [ "$bad" = 0 ] || die "see above; the runs' logs are in $out"
    say "PASS: run 1 ${#gpu[@]} GPU steps skipped, ${#cpu[@]} + ${#mixed[@]} others passed;" \
        "run 2 every GPU step failed saying \"no CUDA device\" (stage $(($(date +%s) - t0)) s)"
}

# --- outside: checks, the lock, the namespaces -------------------------------
main() {
    if [ "${1:-}" = --root ]; then
        MIRROR=$2
        make_root
        return 0
    fi
    if [ "${1:-}" = --inside ]; then
        stage "$2" "$3"
        return 0
    fi
    [ $# = 2 ] || die "usage: check-kit.sh KIT OUTDIR"
    [ -f "$1" ] || die "no kit at $1 (make gpu-kit)"
    local kit out
    kit=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
    mkdir -p "$2"
    out=$(cd "$2" && pwd)
    rm -rf "${out:?}/require0" "${out:?}/require1"
    [ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot, mounts)"
    command -v unshare >/dev/null && command -v chroot >/dev/null && command -v ip >/dev/null ||
        die "needs unshare, chroot (util-linux, coreutils) and ip (iproute2)"
    if ! command -v debootstrap >/dev/null || [ ! -f "$KEYRING" ]; then
        say "installing debootstrap and debian-archive-keyring on this machine"
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
            --no-install-recommends debootstrap debian-archive-keyring; } </dev/null ||
            die "cannot install debootstrap"
    fi
    mkdir -p "$CACHE"
    exec 9>"$CACHE/lock"
    flock -w 3600 9 || die "another check holds $CACHE/lock"
    local rc=0
    unshare --mount --pid --fork --kill-child --propagation private \
        bash "$0" --root "${DISCO_CI_MIRROR:-$(apt_uri)}" || return
    unshare --mount --pid --net --fork --kill-child --propagation private \
        bash "$0" --inside "$kit" "$out" || rc=$?
    if grep -q " $CACHE/run\." /proc/self/mountinfo; then
        die "mounts left under $CACHE/run.*"
    fi
    return "$rc"
}

# Whole functions are read before they run: an edit of this file during a
# check cannot change what the check does.
main "$@"
exit $?
