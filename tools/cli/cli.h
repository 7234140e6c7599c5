/* cli.h - the subcommands of the disco program (tools/cli/disco.c). Each takes
 * its own argv (argv[0] is the subcommand) and returns the exit status. */
#ifndef DISCO_TOOLS_CLI_H
#define DISCO_TOOLS_CLI_H

int disco_cli_topo(int argc, char **argv);
int disco_cli_trace(int argc, char **argv);
int disco_cli_top(int argc, char **argv);
int disco_cli_dump(int argc, char **argv);

#endif
