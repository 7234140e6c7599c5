/* node_check.h - CHECK(x) for the node program's scenarios
 * (tests/node_comm.c, node_p2p.c, node_p2p_pieces.c): a disco call that
 * fails prints "x: NAME: words" and returns 1 from the scenario. */
#ifndef DISCO_TESTS_NODE_CHECK_H
#define DISCO_TESTS_NODE_CHECK_H

#include <stdio.h>

#include "disco/status.h"

#define CHECK(x)                                                                                   \
    do {                                                                                           \
        disco_status_t st_ = (x);                                                                  \
        if (st_ != DISCO_OK) {                                                                     \
            printf("%s: %s: %s\n", #x, disco_err_name(st_), disco_last_error());                   \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

#endif
