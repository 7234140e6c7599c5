/* cli_trace.c - "disco trace": placeholder until the trace module lands. */
#include <stdio.h>

#include "cli.h"

int disco_cli_trace(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "disco trace: not built yet\n");
    return 2;
}
