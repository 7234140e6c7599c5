/* demo_lib.c - the library disco-demo loads into every worker
 * (build/lib/libdisco_demo.so). */
#include "disco/func.h"

/* demo.partial_sum(k): this worker's contiguous share of 1 + 2 + ... + k.
 * A negative k is refused with a message that names the input. */
static disco_status_t partial_sum(disco_ctx_t *ctx, const disco_value_t *args, int nargs,
                                  disco_value_t *ret)
{
    (void)nargs;
    int64_t k = args[0].v.i;
    if (k < 0)
        return disco_ctx_fail(ctx, "k must be >= 0, got %lld", (long long)k);
    int64_t w = disco_ctx_worker_id(ctx), n = disco_ctx_world_size(ctx);
    int64_t lo = k * w / n + 1, hi = k * (w + 1) / n, sum = 0;
    for (int64_t i = lo; i <= hi; i++)
        sum += i;
    *ret = disco_int(sum);
    return DISCO_OK;
}
DISCO_FUNC("demo.partial_sum", "i", partial_sum)
