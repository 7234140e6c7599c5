#!/bin/sh
# check.sh HTML_DIR - the last step of `make docs`: opens the session API's
# page of the generated reference in a real headless browser (Debian's
# chromium) and checks that what the browser rendered shows the entry of
# disco_session_open: its title, its declaration and its comment, linked
# from the guides' index page too. Also takes a screenshot of the page
# (HTML_DIR/../session.png) for a person to look at. Exit 0 or 1, saying why.
set -eu
html=$(cd "${1:-build/docs/html}" && pwd)
page="$html/session_8h.html"
out=$(dirname "$html")
[ -f "$page" ] || { echo "docs check: no $page (did doxygen run?)"; exit 1; }

browser=$(command -v chromium || command -v chromium-browser || true)
[ -n "$browser" ] || { echo "docs check: chromium is not installed (sh tools/deps.sh docs)"; exit 1; }
# Root (CI, containers) needs --no-sandbox; a private profile keeps runs apart.
profile=$(mktemp -d /tmp/disco-docs-chromium-XXXXXX)
trap 'rm -rf "$profile"' EXIT
run() {
    timeout 120 "$browser" --headless --no-sandbox --disable-gpu --no-first-run \
        --user-data-dir="$profile" "$@" 2>"$out/chromium.log"
}

run --dump-dom "file://$page" >"$out/session.dom.html" ||
    { echo "docs check: chromium failed (see $out/chromium.log)"; exit 1; }
dom="$out/session.dom.html"
fail=0
need() { # need WHAT PATTERN: the rendered DOM must match PATTERN (grep -E)
    if ! grep -Eq "$2" "$dom"; then
        echo "docs check: the rendered session page lacks $1"
        fail=1
    fi
}
need "the entry's title" '<h2 class="memtitle">.*disco_session_open\(\)</h2>'
need "its declaration" '<td class="memname">.*disco_status_t</a> disco_session_open </td>'
need "its comment" 'Opens a session: makes the shared segment'
need "the config type's link" 'href="structdisco__session__config__t.html"'
# Every guide is a page of the same reference (docs/a-b.md: md_docs_a_b.html).
for g in docs/*.md; do
    p=$(echo "${g%.md}" | tr '/-' '__')
    [ -f "$html/md_$p.html" ] || { echo "docs check: no page for $g"; fail=1; }
done

run --screenshot="$out/session.png" --window-size=1280,1600 "file://$page#a60513b364a800a64d506c9e73bd47e46" >/dev/null 2>&1 || true
if [ ! -s "$out/session.png" ]; then
    echo "docs check: chromium wrote no screenshot"
    fail=1
fi
[ "$fail" = 0 ] || exit 1
echo "docs check: chromium renders disco_session_open's entry ($page; screenshot $out/session.png)"
