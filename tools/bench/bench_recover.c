/* bench_recover.c - disco-bench's recovery figures: disco_session_recover of
 * a session of 8 workers broken by a killed worker, beside the open and
 * close of a fresh session of 8 measured in the same run.
 *
 *   recover_ms_n8      median of single recoveries: 8 workers forked, rings,
 *                      default placement, a tensor of 1 MiB held on every
 *                      worker; worker 1..7 (in turn) killed with SIGKILL
 *                      and the death seen by a sync (not timed), then the
 *                      recover call timed: kill and reap of the other six,
 *                      the heap's rebuild, the segment formatted, seven
 *                      forks, a sync of every worker
 *   recover_ms_n8_p99  the 99th percentile of the same rounds
 *   recover_open_ms_n8 baseline: open + close of a fresh session of 8 (as
 *                      session_open_ms_n8, in this section's run)
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "tools/bench/bench.h"
#include "tools/bench/bench_util.h"
#include "disco/session.h"
#include "disco/tensor.h"

#define WORKERS 8

/* A tensor of 1 MiB on every worker, left in its register (lost at the
 * recovery, as a user's would be). */
static void hold_tensor(disco_session_t *s)
{
    int64_t n = 1 << 18;
    disco_dref_t r;
    bu_check(disco_session_empty(s, &n, 1, (DLDataType){kDLFloat, 32, 1}, false, &r), "empty");
}

static double open_close_ms(void)
{
    disco_session_config_t cfg = disco_session_config_default(WORKERS);
    disco_session_t *s;
    int64_t t0 = disco_now_ns();
    bu_check(disco_session_open(&cfg, &s), "open session");
    disco_session_close(s);
    return (double)(disco_now_ns() - t0) / 1e6;
}

void bench_recover(void)
{
    int reps = bench_reps() < 15 ? 20 : 100;
    double *rec = bench_xmalloc((size_t)reps * sizeof *rec);
    double *open = bench_xmalloc((size_t)reps * sizeof *open);
    bu_unpin();
    disco_session_config_t cfg = disco_session_config_default(WORKERS);
    cfg.call_timeout_ms = 10000;
    disco_session_t *s;
    bu_check(disco_session_open(&cfg, &s), "open session");
    hold_tensor(s);
    bu_check(disco_session_recover(s), "recover (warm-up)");
    for (int r = 0; r < reps; r++) {
        hold_tensor(s);
        int victim = 1 + r % (WORKERS - 1);
        kill(disco_session_worker_pid(s, victim), SIGKILL);
        if (disco_session_sync(s, victim) != DISCO_E_WORKER_DIED)
            bu_die("the kill of worker %d was not reported: %s", victim, disco_last_error());
        int64_t t0 = disco_now_ns();
        bu_check(disco_session_recover(s), "recover");
        rec[r] = (double)(disco_now_ns() - t0) / 1e6;
        open[r] = open_close_ms(); /* interleaved: the machine's drift hits both */
    }
    disco_session_close(s);
    double med = bu_median(rec, reps); /* which sorts rec */
    record("recover_ms_n8", med, "ms");
    record("recover_ms_n8_p99", rec[(reps - 1) * 99 / 100], "ms");
    record("recover_open_ms_n8", bu_median(open, reps), "ms");
    free(rec);
    free(open);
}
