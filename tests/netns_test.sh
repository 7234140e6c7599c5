#!/bin/sh
# netns_test.sh - a disco session across two nodes over real TCP.
#
#   sh tests/netns_test.sh BIN_DIR        (BIN_DIR: absolute path of build/bin)
#
# Makes two network namespaces joined by a veth pair (the two "nodes",
# 10.199.0.1 and 10.199.0.2, each end named dv0 in its namespace) and runs
# BIN_DIR/node_prog under mpirun with rank 0 (the controller) in the first
# and rank 1 (an agent) in the second: mpirun runs in namespace A, lists
# both addresses as hosts (it takes 10.199.0.1 for itself, an address of
# its own), and launches the other host's orted through tests/netns_agent.sh,
# which plays ssh by running it in namespace B. Open MPI is held to TCP
# over dv0 (btl tcp,self; oob and btl on dv0 only; pml ob1), so every byte
# between the nodes crosses the veth. Checks:
#   - coll 2 prints exactly what node_prog coll 2 --local 2 prints on one
#     node, and ids 2 what ids 2 --local 2 prints;
#   - rank 0 ran in namespace A and rank 1 in B (each rank logs
#     `ip netns identify` before it execs node_prog);
#   - dv0's byte counters grew by megabytes both ways during coll;
#   - no process is left in either namespace after each run.
# Exit 0: pass; 77: skipped (one line "netns: skip: WHY": not root, no
# mpirun, no network namespaces or veth here); anything else: failed.
set -u

LIMIT=60           # seconds a run may take (it takes about one)
MIN_BYTES=1000000  # coll must move at least this each way (the allreduce
                   # chain alone sends 6 tensors of 0.4-0.8 MB each way)
IP_A=10.199.0.1
IP_B=10.199.0.2
IF=dv0
NS_A=disco-netns-a-$$
NS_B=disco-netns-b-$$

skip() {
    echo "netns: skip: $*"
    exit 77
}
fail() {
    echo "netns: FAIL: $*"
    exit 1
}
now_ms() {
    t=$(date +%s%3N 2>/dev/null)
    case $t in
    *N* | '') echo $(($(date +%s) * 1000)) ;;
    *) echo "$t" ;;
    esac
}

if [ $# -ne 1 ]; then
    echo "usage: sh tests/netns_test.sh BIN_DIR" >&2
    exit 2
fi
PROG=$1/node_prog
TESTS_DIR=$(cd "$(dirname "$0")" && pwd)
AGENT=$TESTS_DIR/netns_agent.sh
START=$(now_ms)

# What this test needs of the machine; lacking it is a skip, not a failure.
[ "$(id -u)" -eq 0 ] || skip "not root (ip netns needs root)"
for c in ip mpirun timeout; do
    command -v "$c" >/dev/null 2>&1 || skip "no $c"
done
# What it needs of the build; lacking it is a failure.
[ -x "$PROG" ] || fail "no $PROG (make build/bin/node_prog)"
[ -r "$AGENT" ] || fail "no $AGENT"

# Cleanup, however the script ends: kill whatever still runs in our
# namespaces (only what this script started runs there), delete them (that
# destroys the veth pair), remove the scratch folder.
MADE=
TMP=
cleanup() {
    for ns in $MADE; do
        pids=$(ip netns pids "$ns" 2>/dev/null)
        if [ -n "$pids" ]; then
            # shellcheck disable=SC2086 # one pid a word
            kill -9 $pids 2>/dev/null
        fi
        ip netns del "$ns" 2>/dev/null
    done
    MADE=
    if [ -n "$TMP" ]; then
        rm -rf "$TMP"
    fi
}
trap cleanup EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

TMP=$(mktemp -d "${TMPDIR:-/tmp}/disco-netns.XXXXXX") || fail "mktemp"
# The agent goes in the scratch folder: mpirun splits plm_rsh_agent at
# spaces, and the checkout's path might have some.
cp "$AGENT" "$TMP/agent.sh" || fail "cannot copy $AGENT"

# The two nodes. Failing to make namespaces or a veth pair (a container
# without the rights or the kernel support) is a skip.
for ns in "$NS_A" "$NS_B"; do
    ip netns add "$ns" 2>"$TMP/err" || skip "ip netns add fails: $(head -n 1 "$TMP/err")"
    MADE="$MADE $ns"
    ip netns exec "$ns" true 2>"$TMP/err" || skip "ip netns exec fails: $(head -n 1 "$TMP/err")"
done
ip link add "$IF" netns "$NS_A" type veth peer name "$IF" netns "$NS_B" 2>"$TMP/err" ||
    skip "cannot make a veth pair: $(head -n 1 "$TMP/err")"
for x in "$NS_A $IP_A" "$NS_B $IP_B"; do
    ns=${x% *}
    if ! { ip netns exec "$ns" ip addr add "${x#* }/24" dev "$IF" &&
        ip netns exec "$ns" ip link set lo up &&
        ip netns exec "$ns" ip link set "$IF" up; }; then
        fail "cannot set up $IF in $ns"
    fi
done

# The agent's map, the ranks' log (each rank adds "RANK NAMESPACE").
NETNS_HOSTS="$IP_A=$NS_A $IP_B=$NS_B"
NETNS_AGENT_LOG=$TMP/agent.log
NETNS_RANKS=$TMP/ranks
DISCO_QUIET=1
export NETNS_HOSTS NETNS_AGENT_LOG NETNS_RANKS DISCO_QUIET

# counter NAME: dv0's byte counter NAME (tx_bytes, rx_bytes) in namespace A.
counter() {
    ip netns exec "$NS_A" cat "/sys/class/net/$IF/statistics/$1"
}

# bounded COMMAND...: runs COMMAND for at most LIMIT seconds (then TERM,
# 5 s later KILL). In the background, waited for: a signal to this script
# then ends the wait at once, and the trap's cleanup kills what runs.
bounded() {
    timeout -k 5 "$LIMIT" "$@" &
    wait $!
}

# leftovers: waits up to 5 s for both namespaces to empty; fails naming
# what is still there (cleanup kills it).
leftovers() {
    i=0
    while :; do
        pids=$(ip netns pids "$NS_A"; ip netns pids "$NS_B")
        [ -z "$pids" ] && return 0
        i=$((i + 1))
        if [ "$i" -ge 50 ]; then
            # shellcheck disable=SC2086 # one pid a word
            list=$(echo $pids | tr ' ' ,)
            fail "processes left in the namespaces after $1: $(ps -o pid=,args= -p "$list" | tr '\n' ';')"
        fi
        sleep 0.1
    done
}

# across SCENARIO: node_prog SCENARIO 2 across the two namespaces, one
# node each; its stdout goes to $TMP/SCENARIO.mpi, stderr to .err. Every
# rank first logs where it runs, then execs node_prog.
across() {
    # The ASan build's leak check, Open MPI's own leaks suppressed
    # (tests/lsan_mpi.supp); harmless elsewhere.
    LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$TESTS_DIR/lsan_mpi.supp:fast_unwind_on_malloc=0:print_suppressions=0}
    export LSAN_OPTIONS
    : >"$NETNS_RANKS"
    : >"$NETNS_AGENT_LOG"
    # shellcheck disable=SC2016 # the rank's shell expands them
    bounded ip netns exec "$NS_A" mpirun --allow-run-as-root \
        --host "$IP_A:1,$IP_B:1" -np 2 \
        --mca plm_rsh_agent "sh $TMP/agent.sh" \
        --mca btl tcp,self --mca pml ob1 \
        --mca btl_tcp_if_include "$IF" --mca oob_tcp_if_include "$IF" \
        --mca orte_enable_recovery 1 \
        -x DISCO_QUIET -x NETNS_RANKS -x LSAN_OPTIONS \
        sh -c 'echo "$OMPI_COMM_WORLD_RANK $(ip netns identify)" >>"$NETNS_RANKS"; exec "$@"' \
        sh "$PROG" "$1" 2 >"$TMP/$1.mpi" 2>"$TMP/$1.err"
    rc=$?
    if [ "$rc" -ne 0 ]; then
        [ "$rc" -eq 124 ] && echo "netns: $1: timed out after $LIMIT s"
        echo "netns: $1: mpirun exited $rc; stdout, stderr, launches:"
        tail -n 5 "$TMP/$1.mpi"
        tail -n 15 "$TMP/$1.err"
        cat "$NETNS_AGENT_LOG"
        fail "$1 across namespaces"
    fi
    leftovers "$1"
    # Where the ranks ran: 0 in A (mpirun's own host), 1 in B (launched by
    # the agent).
    printf '0 %s\n1 %s\n' "$NS_A" "$NS_B" >"$TMP/want"
    sort "$NETNS_RANKS" >"$TMP/got"
    cmp -s "$TMP/want" "$TMP/got" ||
        fail "$1: ranks ran in [$(tr '\n' ' ' <"$TMP/got")], not [$(tr '\n' ' ' <"$TMP/want")]"
    grep -qxF "$IP_B $NS_B" "$NETNS_AGENT_LOG" ||
        fail "$1: the agent never launched $IP_B: [$(cat "$NETNS_AGENT_LOG")]"
    # The same scenario on one node, outside the namespaces: same output.
    bounded "$PROG" "$1" 2 --local 2 >"$TMP/$1.local" 2>>"$TMP/$1.err" ||
        fail "$1 --local 2 exited $?: $(tail -n 3 "$TMP/$1.local")"
    if ! cmp -s "$TMP/$1.mpi" "$TMP/$1.local"; then
        echo "netns: $1: across namespaces (<) and on one node (>) differ:"
        diff "$TMP/$1.mpi" "$TMP/$1.local" | head -n 20
        fail "$1 output"
    fi
    grep -qxF "$1: ok" "$TMP/$1.mpi" || fail "$1: no '$1: ok' line"
}

if ! { tx0=$(counter tx_bytes) && rx0=$(counter rx_bytes); }; then
    fail "cannot read $IF's counters"
fi
across coll
tx=$(($(counter tx_bytes) - tx0))
rx=$(($(counter rx_bytes) - rx0))
echo "netns: coll 2 across $NS_A/$NS_B: same $(wc -l <"$TMP/coll.mpi") lines as --local 2; $IF moved $((tx + rx)) bytes (A sent $tx, received $rx)"
if [ "$tx" -lt "$MIN_BYTES" ] || [ "$rx" -lt "$MIN_BYTES" ]; then
    fail "coll moved less than $MIN_BYTES bytes each way over $IF: not over TCP?"
fi

across ids
echo "netns: ids 2 across $NS_A/$NS_B: same $(wc -l <"$TMP/ids.mpi") lines as --local 2"

echo "netns: ok ($(($(now_ms) - START)) ms)"
