#!/bin/sh
# netns_agent.sh - the launch agent tests/netns_test.sh gives Open MPI in
# place of ssh (--mca plm_rsh_agent "sh netns_agent.sh"): mpirun calls it
# as it would call ssh,
#
#   netns_agent.sh [OPTIONS] HOST COMMAND...
#
# and it runs COMMAND (an orted's command line, a shell string) with sh in
# the network namespace that owns HOST, as ssh would run it on that host.
# NETNS_HOSTS maps addresses to namespaces: "IP=NAMESPACE IP=NAMESPACE ...".
# Each launch is logged to NETNS_AGENT_LOG ("HOST NAMESPACE") when set.
set -u

# ssh's options come before the host; the ones that take a value skip it.
while [ $# -gt 0 ]; do
    case $1 in
    -b | -c | -D | -E | -e | -F | -I | -i | -J | -L | -l | -m | -O | -o | -p | -Q | -R | -S | -W | -w)
        shift 2 ;;
    -*) shift ;;
    *) break ;;
    esac
done
if [ $# -lt 2 ]; then
    echo "netns_agent: usage: netns_agent.sh [OPTIONS] HOST COMMAND..." >&2
    exit 255
fi
host=$1
shift

ns=
for pair in ${NETNS_HOSTS:-}; do
    if [ "${pair%%=*}" = "$host" ]; then
        ns=${pair#*=}
    fi
done
if [ -z "$ns" ]; then
    echo "netns_agent: no namespace for host $host (NETNS_HOSTS: ${NETNS_HOSTS:-unset})" >&2
    exit 255 # what ssh answers when it cannot reach the host
fi
if [ -n "${NETNS_AGENT_LOG:-}" ]; then
    echo "$host $ns" >>"$NETNS_AGENT_LOG"
fi
# ssh hands the remote shell its arguments joined by spaces: so do we.
exec ip netns exec "$ns" sh -c "$*"
