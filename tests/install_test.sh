#!/bin/sh
# install_test.sh - installs disco into a temporary prefix with
# `make install PREFIX=...`, then builds and runs a small program against the
# installed copy using only `pkg-config --cflags --libs disco` (shared) and
# `pkg-config --static` (static). Run by `make test`.
set -eu

tmp=$(mktemp -d /tmp/disco-install-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
make --no-print-directory -s install PREFIX="$tmp/prefix" >/dev/null
cat > "$tmp/hello.c" <<'C'
#include <disco/disco.h>
#include <stdio.h>

int main(void)
{
    disco_session_config_t cfg = disco_session_config_default(2);
    disco_session_t *s;
    disco_dref_t r;
    disco_value_t v;
    if (disco_session_open(&cfg, &s) != DISCO_OK ||
        disco_session_call_by_name(s, "disco.worker_id", NULL, 0, &r) != DISCO_OK ||
        disco_session_debug_get(s, r, 1, &v) != DISCO_OK || v.v.i != 1) {
        fprintf(stderr, "hello: %s\n", disco_last_error());
        return 1;
    }
    disco_session_close(s);
    printf("hello from worker %lld\n", (long long)v.v.i);
    return 0;
}
C
export PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig"
cc -std=c11 -Wall -Wextra -Werror -o "$tmp/hello" "$tmp/hello.c" $(pkg-config --cflags --libs disco)
out=$(LD_LIBRARY_PATH="$tmp/prefix/lib" DISCO_QUIET=1 "$tmp/hello")
[ "$out" = "hello from worker 1" ] || { echo "install test: shared build said: $out"; exit 1; }
# static: the archive, then what it needs (Libs.private)
cc -std=c11 -Wall -Wextra -Werror -o "$tmp/hello_static" "$tmp/hello.c" $(pkg-config --cflags disco) \
    "$tmp/prefix/lib/libdisco.a" $(pkg-config --static --libs disco | sed 's/-ldisco//')
out=$(DISCO_QUIET=1 "$tmp/hello_static")
[ "$out" = "hello from worker 1" ] || { echo "install test: static build said: $out"; exit 1; }
for t in disco disco-demo disco-bench disco-rpc-server disco-jsonrpc disco-worker; do
    [ -x "$tmp/prefix/bin/$t" ] || { echo "install test: $t not installed"; exit 1; }
done
readelf -d "$tmp/prefix/lib/libdisco.so" | grep -q 'SONAME.*libdisco.so.0' ||
    { echo "install test: no versioned soname"; exit 1; }
echo "install test: headers, libdisco.so (soname libdisco.so.0), libdisco.a, tools and disco.pc work"
