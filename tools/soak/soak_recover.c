/* soak_recover.c - the fault soak's recovery rounds (soak_round.h): after
 * the kill has been reported, disco_session_recover brings the session
 * back; the old registers must be lost, the heap empty, the workload must
 * run again with the right values, and nothing the round holds may grow. */
#include <string.h>

#include "disco/shm/wait.h"
#include "disco/tensor.h"
#include "tools/soak/soak_round.h"

#define CHECK_FLOATS 64

static disco_value_t dref_value(disco_dref_t r)
{
    return (disco_value_t){.type = DISCO_T_DREF, .v.reg = r};
}

/* Every register of the old run is lost: using x fails with
 * DISCO_E_BAD_REG saying so, and freeing each is quiet. */
static void check_lost(round_t *rd, work_t *w)
{
    disco_value_t a[2] = {dref_value(w->x), disco_value_str("sum")};
    disco_dref_t r;
    disco_status_t st = disco_session_call(w->s, w->f_allreduce, a, 2, &r);
    if (st != DISCO_E_BAD_REG || strstr(disco_last_error(), "lost in a recovery") == NULL)
        soak_fail(rd, "a call with the old registers: %s (%s), expected DISCO_E_BAD_REG, lost",
                  disco_err_name(st), disco_last_error());
    disco_dref_t old[5] = {w->x, w->f_allreduce, w->f_empty, w->f_bcast, w->f_allgather};
    for (int i = 0; i < 5; i++)
        if ((st = disco_session_free_reg(w->s, old[i])) != DISCO_OK)
            soak_fail(rd, "freeing a lost register: %s (%s)", disco_err_name(st),
                      disco_last_error());
}

disco_status_t soak_check_values(round_t *rd, work_t *w)
{
    float host[CHECK_FLOATS];
    int64_t len = CHECK_FLOATS;
    for (int i = 0; i < CHECK_FLOATS; i++)
        host[i] = (float)(i + 1);
    DLTensor h = {
        .data = host, .device = {kDLCPU, 0}, .ndim = 1, .dtype = {kDLFloat, 32, 1}, .shape = &len};
    disco_dref_t a, b, c;
    disco_status_t st = soak_empty_on_all(w, CHECK_FLOATS, &a);
    if (st != DISCO_OK)
        return st;
    disco_value_t ab[2] = {dref_value(a), disco_value_bool(false)};
    if ((st = disco_session_copy_into_worker0(w->s, &h, a)) != DISCO_OK ||
        (st = disco_session_call(w->s, w->f_bcast, ab, 2, &b)) != DISCO_OK)
        return st;
    disco_value_t ar[2] = {dref_value(b), disco_value_str("sum")};
    if ((st = disco_session_call(w->s, w->f_allreduce, ar, 2, &c)) != DISCO_OK)
        return st;
    memset(host, 0, sizeof host);
    if ((st = disco_session_copy_from_worker0(w->s, c, &h)) != DISCO_OK)
        return st;
    for (int i = 0; i < CHECK_FLOATS; i++)
        if (host[i] != (float)(w->n * (i + 1))) {
            soak_fail(rd, "allreduce after the recovery: element %d is %g, expected %d", i,
                      (double)host[i], w->n * (i + 1));
            break;
        }
    if ((st = disco_session_free_reg(w->s, c)) != DISCO_OK ||
        (st = disco_session_free_reg(w->s, b)) != DISCO_OK ||
        (st = disco_session_free_reg(w->s, a)) != DISCO_OK)
        return st;
    return soak_sync_all(w);
}

void soak_recover(round_t *rd, work_t *w, int kind, size_t held_blocks, const leaks_t *held,
                  double *ms_out)
{
    int64_t t0 = disco_now_ns();
    disco_status_t st = disco_session_recover(w->s);
    *ms_out = (double)(disco_now_ns() - t0) / 1e6;
    if (st != DISCO_OK || disco_session_health(w->s) != DISCO_OK) {
        soak_fail(rd, "recover: %s (%s)", disco_err_name(st), disco_last_error());
        return;
    }
    check_lost(rd, w);
    disco_heap_stats_t hs;
    if ((st = disco_session_heap_stats(w->s, &hs)) != DISCO_OK || hs.live_blocks != 0)
        soak_fail(rd, "heap after the recovery: %s, %zu live blocks (none held)",
                  disco_err_name(st), hs.live_blocks);
    if (rd->failed)
        return;
    if ((st = soak_setup(w)) != DISCO_OK) {
        soak_fail(rd, "setup after the recovery: %s (%s)", disco_err_name(st), disco_last_error());
        return;
    }
    soak_check_steady(rd, w, kind);
    if (!rd->failed && (st = soak_check_values(rd, w)) != DISCO_OK)
        soak_fail(rd, "the workload after the recovery: %s (%s)", disco_err_name(st),
                  disco_last_error());
    if (rd->failed)
        return;
    if ((st = disco_session_heap_stats(w->s, &hs)) != DISCO_OK || hs.live_blocks != held_blocks)
        soak_fail(rd, "heap: %zu live blocks after the recovery and setup, %zu before the kill",
                  hs.live_blocks, held_blocks);
    leaks_t now = soak_leaks_now();
    /* An arena left to process exit (soak_check_clean) keeps its fds. */
    if (now.arenas_left == held->arenas_left && (now.fds != held->fds || now.maps != held->maps))
        soak_fail(rd, "after the recovery: %d fds and %d memfd mappings, %d and %d before the kill",
                  now.fds, now.maps, held->fds, held->maps);
}
