/* disco - one command line for people tuning how work lands on workers:
 *   disco topo [--workers N] [--policy P] [--cpus LIST] [--synthetic DESC |
 *              --xml FILE] [--json]      the placement plan
 *   disco trace FILE.json [--json]       the summary of a Perfetto trace
 *   disco top PID [--once] [--json | --prometheus] [...]
 *                                        a live view of a running session
 *   disco dump PID [--session K]         the watchdog's report of it now */
#include <stdio.h>
#include <string.h>

#include "tools/cli/cli.h"

static void usage(FILE *out)
{
    fprintf(out, "usage: disco COMMAND [options]   (disco COMMAND --help for more)\n"
                 "  topo    print the placement plan for a worker count and policy\n"
                 "  trace   summarize a trace written by a session (DISCO_TRACE=path)\n"
                 "  top     watch a running session of another process, live\n"
                 "  dump    print the watchdog's report of a running session\n");
}

int main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "topo") == 0)
        return disco_cli_topo(argc - 1, argv + 1);
    if (strcmp(argv[1], "trace") == 0)
        return disco_cli_trace(argc - 1, argv + 1);
    if (strcmp(argv[1], "top") == 0)
        return disco_cli_top(argc - 1, argv + 1);
    if (strcmp(argv[1], "dump") == 0)
        return disco_cli_dump(argc - 1, argv + 1);
    fprintf(stderr, "disco: unknown command \"%s\"\n", argv[1]);
    usage(stderr);
    return 2;
}
