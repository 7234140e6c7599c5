/* cli_trace.c - "disco trace FILE": the summary of a trace written by a
 * session (DISCO_TRACE=path, or disco_trace_write_json). */
#include <stdio.h>
#include <string.h>

#include "tools/cli/cli.h"
#include "disco/trace.h"

static void usage(FILE *out)
{
    fprintf(out, "usage: disco trace FILE.json [--json]\n"
                 "Summarizes a trace: per worker busy %% and queue delay p50/p99, per function\n"
                 "count and time, and the straggler of each step between syncs. The same file\n"
                 "opens in Perfetto (ui.perfetto.dev).\n"
                 "  --json   the summary as JSON\n");
}

int disco_cli_trace(int argc, char **argv)
{
    const char *path = NULL;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "--json") == 0) {
            json = true;
        } else if (path == NULL && argv[i][0] != '-') {
            path = argv[i];
        } else {
            fprintf(stderr, "disco trace: unexpected \"%s\"\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (path == NULL) {
        usage(stderr);
        return 2;
    }
    disco_trace_t *t;
    disco_trace_summary_t *s;
    if (disco_trace_load_json(path, &t) != DISCO_OK) {
        fprintf(stderr, "disco trace: %s\n", disco_last_error());
        return 1;
    }
    int rc = 1;
    if (disco_trace_summarize(t, &s) == DISCO_OK) {
        rc = disco_trace_summary_print(s, stdout, json) == DISCO_OK ? 0 : 1;
        disco_trace_summary_free(s);
    }
    disco_trace_free(t);
    return rc;
}
