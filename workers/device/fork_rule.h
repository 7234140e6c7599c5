/* fork_rule.h - whether a child forked from this process now could use the
 * devices this process has used (internal). CUDA does not survive fork: a
 * child of a process that has called it cannot (cuda_err.c's guard); the
 * sim follows the same rule under DISCO_SIM_FORK_STRICT (sim_dev.c). A
 * session that forks its workers again (disco_session_recover) asks. */
#ifndef DISCO_WORKERS_DEVICE_FORK_RULE_H
#define DISCO_WORKERS_DEVICE_FORK_RULE_H

#include <stdbool.h>

/** Whether this process has called CUDA (through disco). Always false
 *  without CUDA. Thread-safe. */
bool disco__cuda_called_here(void);

/** "cuda" or "sim": a device type this process has used that a child
 *  forked from it now could not use; NULL when there is none. Thread-safe. */
const char *disco__device_fork_spoiled(void);

#endif
