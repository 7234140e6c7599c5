/* disco-worker - the program a session starts for each worker in spawn mode.
 * It only serves the controller that started it; run by hand it prints its
 * usage and exits 2 (0 with --help). */
#include "disco/worker.h"

int main(int argc, char **argv)
{
    return disco_worker_main(argc, argv);
}
