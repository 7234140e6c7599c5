/* bench_exchange.c - exchange_floor_us_1KiB_n2: the baseline that says how
 * close disco_ctx_allreduce of 1 KiB at N = 2 (bench_comm.c) comes to what
 * the machine allows for its protocol.
 *
 * Two processes, pinned to the first two CPUs as a session's two workers
 * are, run the inline meeting's exchange (workers/data/collective.h,
 * Inline) with nothing else: each round, each copies its 1 KiB input into
 * its own slot (one of two, by the round's parity), stores the round's
 * number in its arrive word (release), spins with pause until the peer's
 * word holds it (acquire), and folds the peer's copy with its own input by
 * disco_reduce (float32 sum, rank order) into its output. No checks, no
 * trace, no staging, no wake. The figure is the parent's mean per round
 * (measure(): the median over repetitions). What disco_ctx_allreduce costs
 * above it is the call's own work and the lines its post adds.
 *
 * On the 2-core KVM Xeon most of the floor is moving the data: a peer's
 * 16 freshly written lines came at ~21 ns a line after the first few
 * (a standalone scan of sizes), on top of the arrive word's ~130 ns round
 * trip (floor_2line_rtt_ns).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "disco/clock.h"
#include "disco/dtype.h"
#include "tools/bench/bench.h"
#include "tools/bench/bench_util.h"

#define FLOATS 256        /* 1 KiB */
#define STOP   UINT64_MAX /* the parent's last word: the child returns */

struct xslot {
    _Alignas(64) _Atomic uint64_t arrive;
    _Alignas(64) float data[FLOATS];
};

struct xchg {
    struct xslot slot[2][2]; /* [member][parity] */
    uint64_t round;          /* the parent's, private after the fork */
};

/* One exchange of round r by member me; false when the peer stopped or
 * never came. */
static bool one_round(struct xchg *x, int me, uint64_t r, float *in, float *out)
{
    struct xslot *mine = &x->slot[me][r & 1], *peer = &x->slot[1 - me][r & 1];
    in[r % FLOATS] = (float)r; /* a new input each round, as a model's */
    memcpy(mine->data, in, sizeof mine->data);
    /* Release: the slot copy before the word that says it is there. */
    atomic_store_explicit(&mine->arrive, r, memory_order_release);
    /* Acquire inside: pairs with the peer's release store above, so its
     * slot copy is visible once its word is. */
    if (bench_spin_until(&peer->arrive, r, STOP, true) != r)
        return false;
    const void *srcs[2] = {me == 0 ? (const void *)in : (const void *)peer->data,
                           me == 0 ? (const void *)peer->data : (const void *)in};
    DLDataType f32 = {kDLFloat, 32, 1};
    return disco_reduce(DISCO_REDUCE_SUM, f32, out, srcs, 2, FLOATS) == DISCO_OK;
}

static int child(void *p)
{
    struct xchg *x = p;
    float in[FLOATS] = {0}, out[FLOATS];
    bu_pin(1);
    for (uint64_t r = 1;; r++)
        if (!one_round(x, 1, r, in, out))
            return atomic_load_explicit(&x->slot[0][r & 1].arrive, memory_order_acquire) == STOP
                       ? 0
                       : 1;
}

static int64_t rounds(void *p, uint64_t iters)
{
    struct xchg *x = p;
    static float in[FLOATS], out[FLOATS];
    int64_t t0 = disco_now_ns();
    for (uint64_t i = 0; i < iters; i++)
        if (!one_round(x, 0, ++x->round, in, out))
            bu_die("exchange floor: no peer at round %llu", (unsigned long long)x->round);
    return disco_now_ns() - t0;
}

double bench_exchange_floor(void)
{
    struct xchg *x = bench_shared_alloc(sizeof *x);
    memset(x, 0, sizeof *x);
    bu_spawn(child, x);
    bu_pin(0);
    double us = measure(rounds, x) / 1000.0;
    /* Release, both: the child reads them with acquire (bench_spin_until). */
    atomic_store_explicit(&x->slot[0][0].arrive, STOP, memory_order_release);
    atomic_store_explicit(&x->slot[0][1].arrive, STOP, memory_order_release);
    bu_reap_all();
    bu_unpin();
    munmap(x, sizeof *x);
    record("exchange_floor_us_1KiB_n2", us, "us");
    return us;
}
