#!/bin/sh
# ab.sh - before/after benchmark on a noisy machine: builds disco-bench at
# OLD (a git revision, in a temporary worktree) and here, then runs the two
# alternately ROUNDS times on the sections whose names contain each TEXT,
# and prints every figure's median over the rounds for both, with the ratio.
#
#   sh tools/bench/ab.sh OLD [ROUNDS] [TEXT...]
#   sh tools/bench/ab.sh 438219f 6 session RPC
#
# Alternating (A B A B ...) spreads the machine's drift over both sides;
# medians of medians keep one bad round from deciding. Standard tools only
# (git, make, /usr/bin/python3). Nothing is written outside build/ab/.
set -eu
old=${1:?usage: ab.sh OLD [ROUNDS] [TEXT...]}
rounds=${2:-6}
[ $# -ge 2 ] && shift 2 || shift $#
[ $# -eq 0 ] && set -- session
out=build/ab
wt=$out/old-tree
rm -rf "$out" && mkdir -p "$out"
git worktree add --detach -f "$wt" "$old" >/dev/null
trap 'git worktree remove --force "$wt" >/dev/null 2>&1 || true' EXIT
make -s -j2 build/bin/disco-bench >/dev/null
make -s -C "$wt" -j2 build/bin/disco-bench >/dev/null
i=1
while [ "$i" -le "$rounds" ]; do
    for side in old new; do
        bin=build/bin/disco-bench
        [ "$side" = old ] && bin=$wt/build/bin/disco-bench
        for text in "$@"; do
            DISCO_QUIET=1 "$bin" --only "$text" --json "$out/$side-$i-$(echo "$text" | tr ' ' _).json" \
                >/dev/null
        done
    done
    i=$((i + 1))
done
AB_OLD=$old /usr/bin/python3 - "$out" <<'PY'
import glob, json, os, statistics, sys
out = sys.argv[1]
vals = {}
for path in sorted(glob.glob(os.path.join(out, '*.json'))):
    side = os.path.basename(path).split('-')[0]
    with open(path) as f:
        results = json.load(f).get('results', {})
    for key, v in results.items():
        v = v.get('value') if isinstance(v, dict) else v
        if isinstance(v, (int, float)):
            vals.setdefault(key, {}).setdefault(side, []).append(v)
print('%-26s %12s %12s %7s  (medians over rounds; old = %s)' % ('figure', 'old', 'new',
      'new/old', os.environ.get('AB_OLD', 'OLD')))
for key, sides in vals.items():
    if 'old' in sides and 'new' in sides:
        o, n = statistics.median(sides['old']), statistics.median(sides['new'])
        print('%-26s %12.1f %12.1f %7.3f' % (key, o, n, n / o if o else float('nan')))
PY
