#!/bin/sh
# make-kit.sh CHECKOUT TEST_ROOT KIT - `make gpu-kit`: every GPU check of the
# checkout, built and packed into one file, KIT (build/gpu-kit.tar.gz), for
# a GPU machine that has the NVIDIA driver and python3 (numpy, pytest,
# torch) but no compiler, no Debian library, no package manager and no
# network (docs/gpu-kit.md). There:
#
#   tar -xzf gpu-kit.tar.gz -C /tmp && BUDGET=450 sh /tmp/disco-gpu/run-gpu.sh "$OUT"
#
# 1. The working tree of CHECKOUT (tracked files and untracked ones git does
#    not ignore) is copied to TEST_ROOT (/tmp/disco-gpu), which is also
#    where the kit unpacks: the paths compiled into the tests
#    (DISCO_TEST_BIN, DISCO_TEST_SRC, ...) are TEST_ROOT's on both machines.
#    TEST_ROOT's build/ is kept between runs (make rebuilds what changed;
#    GPU_KIT_CLEAN=1 starts afresh). A TEST_ROOT not made by this script is
#    refused, never deleted.
# 2. It is built there with the project's own targets: NO_MPI=1 (libdisco
#    without Open MPI: the Python steps load it into torch's process) and
#    the Python extension for the stable ABI (PY_ABI3=1: Debian's 3.11
#    builds it, the GPU machine's 3.12 loads it); mpicc builds the SPMD
#    step's Open MPI baseline, tools/bench/mpi_node_base.c.
# 3. The kit: the source tree, the programs and libraries stripped, the
#    shared libraries they need beyond the GPU machine's own (glibc,
#    libstdc++, libgcc, zlib, the NVIDIA driver) in deps/lib, Debian's
#    Open MPI (the installed packages' files, relocated by run-gpu.sh
#    through OPAL_PREFIX & co.) in mpi/, run-gpu.sh and torch_probe.py.
# Needs what `make` needs (tools/deps.sh installs it) and Open MPI
# (tools/deps.sh mpi). JOBS=N: parallel compiles (default: the CPU count).
set -eu
[ $# = 3 ] || { echo "usage: make-kit.sh CHECKOUT TEST_ROOT KIT" >&2; exit 2; }
CO=$(cd "$1" && pwd)
ROOT=$2
mkdir -p "$(dirname "$3")"
KIT=$(cd "$(dirname "$3")" && pwd)/$(basename "$3")
HERE=$(cd "$(dirname "$0")" && pwd)
J=${JOBS:-$(nproc)}
# The sub-makes below are this script's own, not the calling make's.
unset MAKEFLAGS MFLAGS MAKELEVEL
say() { echo "gpu-kit: $*"; }
die() {
    echo "gpu-kit: FAIL: $*" >&2
    exit 1
}
t0=$(date +%s)

# --- 1. the tree, at TEST_ROOT ----------------------------------------------
case "$ROOT" in
    /?*) ;;
    *) die "TEST_ROOT must be an absolute path, not \"$ROOT\"" ;;
esac
ROOT=${ROOT%/}
MARK=$ROOT/.disco-gpu-kit
if [ -e "$ROOT" ] && [ ! -f "$MARK" ] && [ -n "$(ls -A "$ROOT" 2>/dev/null)" ]; then
    die "$ROOT exists and was not made by make-kit.sh (no $MARK): move it away"
fi
[ "${GPU_KIT_CLEAN:-0}" = 0 ] || rm -rf "$ROOT"
mkdir -p "$ROOT"
touch "$MARK"
# Everything but the build folder goes: a file deleted from the checkout
# must not linger. The copy keeps mtimes, so make rebuilds only what changed.
find "$ROOT" -mindepth 1 -maxdepth 1 ! -name build ! -name .disco-gpu-kit -exec rm -rf {} +
mkdir -p "$ROOT/build"
FILES=$ROOT/build/kit-files # the list, NUL-separated: the kit ships the same
(cd "$CO" && git ls-files -co --exclude-standard -z) >"$FILES"
(cd "$CO" && tar --null -T "$FILES" -cf -) | tar -C "$ROOT" -xf -
COMMIT=$(git -C "$CO" rev-parse HEAD)
DIRTY=$(git -C "$CO" status --porcelain | head -1)
say "the working tree of $CO (${COMMIT%"${COMMIT#???????????}"}${DIRTY:+ + local changes}) at $ROOT"

# --- 2. the build -------------------------------------------------------------
LOG=$ROOT/build/kit-build.log
cd "$ROOT"
say "building (NO_MPI=1, PY_ABI3=1, -j$J; log $LOG)"
{
    make -j"$J" NO_MPI=1 all build/bin/run_tests build/lib/libdisco_testlib.so &&
        make NO_MPI=1 PY_ABI3=1 python &&
        sh tools/deps.sh mpi build/mpi-install.log
} >"$LOG" 2>&1 || {
    tail -n 30 "$LOG" >&2
    die "the build failed (the end of $LOG above)"
}
[ -f python/disco/_core.abi3.so ] || die "make python PY_ABI3=1 made no python/disco/_core.abi3.so"
if ldd build/libdisco.so | grep -q libmpi; then
    die "build/libdisco.so links Open MPI although NO_MPI=1"
fi
mpicc -O2 -g -std=c11 -Wall -Wextra -Werror -I. -o build/bin/mpi_node_base tools/bench/mpi_node_base.c ||
    die "mpicc could not build tools/bench/mpi_node_base.c"

# --- 3. the kit -------------------------------------------------------------
STAGE=$(mktemp -d "${TMPDIR:-/tmp}/disco-gpu-kit.XXXXXX")
trap 'rm -rf "$STAGE"' EXIT
K=$STAGE/$(basename "$ROOT")
mkdir -p "$K/build/bin" "$K/build/lib" "$K/deps/lib" "$K/deps/hwloc-plugins" "$K/mpi"
# the source tree (the tests read tests/data, scripts, headers, README.md;
# and a failure's file:line can be read on the spot)
(cd "$ROOT" && tar --null -T "$FILES" -cf -) | tar -C "$K" -xf -
# the programs and libraries, stripped (debug info is most of each); the
# dynamic symbols that loaded libraries resolve against stay
for f in build/bin/*; do
    strip -o "$K/$f" "$f"
done
strip -o "$K/build/libdisco.so" build/libdisco.so
ln -s libdisco.so "$K/build/libdisco.so.3"
for f in build/lib/*.so; do
    strip -o "$K/$f" "$f"
done
strip -o "$K/python/disco/_core.abi3.so" python/disco/_core.abi3.so
readelf -d "$K/python/disco/_core.abi3.so" | grep -q 'RUNPATH.*\$ORIGIN/\.\./\.\./build\]' ||
    die "the extension's RUNPATH is not \$ORIGIN/../../build"
cp "$HERE/torch_probe.py" "$K/"
sed -e "s#@TEST_ROOT@#$ROOT#g" -e "s#@COMMIT@#$COMMIT#g" "$HERE/run-gpu.sh.in" >"$K/run-gpu.sh"
chmod +x "$K/run-gpu.sh"
{
    echo "commit $COMMIT${DIRTY:+ + local changes}"
    echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release && echo "$PRETTY_NAME"), $(gcc --version | head -1)"
    echo "cuda $("${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" --version 2>/dev/null | tail -1 || echo none)"
    echo "python extension: stable ABI (abi3), built with $(/usr/bin/python3 --version 2>&1)"
    echo "open mpi $(dpkg-query -W -f '${Version}' libopenmpi3)"
} >"$K/kit.txt"

# Debian's Open MPI: the installed packages' files under mpi/, less docs,
# headers, Fortran, Java, OpenSHMEM and the network fabrics (InfiniBand,
# OFI, UCX, PSM: one machine talks over shared memory).
for p in openmpi-bin openmpi-common libopenmpi3 libpmix2; do
    dpkg-query -L "$p" >/dev/null 2>&1 || die "Debian package $p is not installed (tools/deps.sh mpi)"
    dpkg-query -L "$p"
done | while read -r f; do
    [ -f "$f" ] || [ -L "$f" ] || continue
    case "$f" in /usr/share/doc/* | /usr/share/man/* | /usr/share/lintian/* | */include/*) continue ;; esac
    echo "${f#/}"
done | tar -C / --no-recursion -T - -cf - | tar -C "$K/mpi" -xf -
L=$K/mpi/usr/lib/x86_64-linux-gnu
C=$L/openmpi/lib/openmpi3
[ -x "$K/mpi/usr/bin/orterun" ] && [ -d "$C" ] || die "Open MPI's layout is not Debian 12's (no $C)"
rm -f "$L"/libmpi_mpifh* "$L"/libmpi_usempi* "$L"/liboshmem* "$L"/libmpi_java* \
    "$L"/openmpi/lib/libmpi_mpifh* "$L"/openmpi/lib/libmpi_usempi* "$L"/openmpi/lib/liboshmem* \
    "$L"/openmpi/lib/libmpi_java* "$L"/libmca_common_ofi* "$L"/libmca_common_ucx* \
    "$L"/libmca_common_verbs* "$L"/openmpi/lib/libmca_common_ofi* "$L"/openmpi/lib/libmca_common_ucx* \
    "$L"/openmpi/lib/libmca_common_verbs* "$C"/mca_*oshmem* "$C"/mca_spml_* "$C"/mca_sshmem_* \
    "$C"/mca_scoll_* "$C"/mca_atomic_* "$C"/mca_memheap_* "$C"/mca_*_ofi.so "$C"/mca_*_ucx.so \
    "$C"/mca_*_psm*.so "$C"/mca_btl_openib.so "$C"/mca_btl_usnic.so
rm -f "$K"/mpi/usr/bin/osh* "$K"/mpi/usr/bin/shmem* # OpenSHMEM's (liboshmem)
# Debian's update-alternatives names, inside the kit
ln -sfn orterun "$K/mpi/usr/bin/mpirun"
ln -sfn orterun "$K/mpi/usr/bin/mpiexec"

# The shared libraries any program, library or plugin of the kit needs
# beyond the GPU machine's own: what ldd resolves outside the kit (the kit's
# folders searched first), copied from this machine. run-gpu.sh's preflight
# checks the same list there: nothing not found, nothing from outside
# the kit but these.
SYSTEM_LIBS='^(libc|libm|libdl|libpthread|librt|libresolv|libutil|libanl|ld-linux-x86-64|libstdc[+][+]|libgcc_s|libz|libcuda|libnvidia-[a-z-]*|linux-vdso)[.]so'
KIT_LD=$K/deps/lib:$L:$L/openmpi/lib:$L/pmix2/lib
elves() {
    find "$K/build" "$K/python" "$K/mpi" -type f \( -name '*.so*' -o -perm -u+x \) -print |
        while read -r f; do
            head -c 4 "$f" | grep -q ELF && echo "$f"
        done
}
for pass in 1 2; do
    elves | while read -r f; do
        LD_LIBRARY_PATH=$KIT_LD ldd "$f" 2>/dev/null | awk '/=> \// {print $1, $3}'
    done | sort -u | while read -r name path; do
        echo "$name" | grep -Eq "$SYSTEM_LIBS" && continue
        case "$path" in "$K"/*) continue ;; esac
        cp -L "$path" "$K/deps/lib/$name"
    done
    [ "$pass" = 1 ] || break
done
missing=$(elves | while read -r f; do
    LD_LIBRARY_PATH=$KIT_LD ldd "$f" 2>/dev/null | sed -n "s#^[[:space:]]*\\([^ ]*\\) => not found#${f#"$K"/}: \\1#p"
done)
[ -z "$missing" ] || die "libraries not found for the kit: $missing"

tar -C "$STAGE" --owner=0 --group=0 -czf "$KIT.tmp" "$(basename "$K")"
mv "$KIT.tmp" "$KIT"
size=$(du -k "$KIT" | cut -f1)
[ "$size" -lt 65536 ] || die "$KIT is $size KiB: over 64 MiB"
say "$KIT: $((size / 1024)).$((size % 1024 * 10 / 1024)) MiB, $(tar -tzf "$KIT" | wc -l) files, commit ${COMMIT%"${COMMIT#???????????}"}${DIRTY:+ + local changes}, $(($(date +%s) - t0)) s"
