#!/bin/sh
# install_test.sh - installs disco into a temporary prefix with
# `make install PREFIX=...`, then builds the README's example program
# (tests/readme_example.c) against the installed copy exactly as the README
# says, with pkg-config only: shared (`pkg-config --cflags --libs disco`) and
# static (`-Wl,-Bstatic` and `pkg-config --static`, whose Libs.private must
# name everything libdisco.a needs: hwloc, jansson, libsodium, the static
# CUDA runtime when CUDA was found), and runs both; then pip-installs the
# Python package into a venv (setup.py) and uses it. Run by `make test`.
set -eu

src=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d /tmp/disco-install-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
make --no-print-directory -s install PREFIX="$tmp/prefix" >/dev/null
export PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig"
flags="-std=c11 -Wall -Wextra -Werror"
want="worker 3 says 40"

# shared: found through the rpath disco.pc sets, no LD_LIBRARY_PATH
cc $flags -o "$tmp/example" "$src/readme_example.c" $(pkg-config --cflags --libs disco)
out=$(DISCO_QUIET=1 "$tmp/example")
[ "$out" = "$want" ] || { echo "install test: shared build said: $out"; exit 1; }
readelf -d "$tmp/example" | grep -q 'NEEDED.*libdisco.so.3' ||
    { echo "install test: the shared build does not use libdisco.so.3"; exit 1; }

# static: libdisco.a, and what it needs from Libs.private
cc $flags -o "$tmp/example_static" "$src/readme_example.c" \
    -Wl,-Bstatic $(pkg-config --static --cflags --libs disco)
if readelf -d "$tmp/example_static" | grep -q 'NEEDED.*libdisco'; then
    echo "install test: the static build still needs libdisco.so"; exit 1
fi
out=$(DISCO_QUIET=1 "$tmp/example_static")
[ "$out" = "$want" ] || { echo "install test: static build said: $out"; exit 1; }

for t in disco disco-demo disco-bench disco-rpc-server disco-jsonrpc disco-worker; do
    [ -x "$tmp/prefix/bin/$t" ] || { echo "install test: $t not installed"; exit 1; }
done
readelf -d "$tmp/prefix/lib/libdisco.so" | grep -q 'SONAME.*libdisco\.so\.3\]' ||
    { echo "install test: no versioned soname"; exit 1; }

# the Python package, where the prefix's Debian python3 looks
# (lib/python3/dist-packages), using the installed libdisco.so.3
py=${PYTHON:-/usr/bin/python3}
pkg="$tmp/prefix/lib/python3/dist-packages"
out=$(cd "$tmp" && DISCO_QUIET=1 "$py" -c '
import os, sys; sys.path.insert(0, sys.argv[1])
import disco
assert disco.__file__.startswith(sys.argv[1]), disco.__file__
lib = os.path.realpath(disco._core.library_path())
assert os.path.dirname(lib) == os.path.realpath(sys.argv[1] + "/../.."), lib
with disco.ProcessSession(2) as s:
    r = s.get_global_func("disco.worker_id")()
    s.sync_worker(1)
    print("worker", r.debug_get_from_remote(1))
' "$pkg")
[ "$out" = "worker 1" ] || { echo "install test: the installed Python package said: $out"; exit 1; }
# pip: a venv over Debian's site packages (setuptools, wheel, numpy), the
# package built and installed offline (no index, no build isolation: nothing
# downloaded), then used from outside the tree: libdisco.so.3 and both
# worker programs from the installed package, a 2-worker session per launch
# mode and a call.
"$py" -m venv --system-site-packages "$tmp/venv"
(cd "$src/.." && "$tmp/venv/bin/pip" install -q --no-build-isolation --no-index \
    --no-cache-dir .) || { echo "install test: pip install failed"; exit 1; }
out=$(cd "$tmp" && env -u PYTHONPATH DISCO_QUIET=1 "$tmp/venv/bin/python" -c '
import os, sys
import disco
site = os.path.realpath(os.path.dirname(disco.__file__))
assert site.startswith(os.path.realpath(sys.prefix)), site
assert os.path.dirname(os.path.realpath(disco._core.library_path())) == site
assert disco.worker_program() == os.path.join(site, "bin", "disco-worker")
libs = sorted(f for f in os.listdir(site) if f.startswith("libdisco.so"))
assert libs == ["libdisco.so.3"], libs  # none of an older soname beside it
for launch, path in (("fork", None), ("spawn", None), ("spawn", disco.worker_program())):
    with disco.ProcessSession(2, launch=launch, worker_path=path) as s:
        r = s.get_global_func("runtime.disco.worker_rank")()
        s.sync_all()
        assert r.debug_get_from_remote(1) == 1, (launch, path)
print("pip ok")
')
[ "$out" = "pip ok" ] || { echo "install test: the pip-installed package said: $out"; exit 1; }

echo "install test: headers, libdisco.so (soname libdisco.so.3), libdisco.a, tools, disco.pc," \
    "the Python package (make install and pip install) work; the README's example builds and" \
    "runs shared and static"
