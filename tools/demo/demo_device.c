/* demo_device.c - disco-demo's MLP with its tensors on sim or CUDA devices
 * (--device sim|cuda): the device is readied here, the weights, x and the
 * partials are device tensors made by the controller, and the demo
 * library's *_into functions fill them (demo_lib.c: a worker computes on
 * host copies of its device tensors; GPU kernels are issue 17's). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "disco/device.h"
#include "tools/demo/demo_device.h"

static const DLDataType F32 = {kDLFloat, 32, 1};

const char *demo_device_name(DLDeviceType type)
{
    return type == kDLExtDev ? "sim" : type == kDLCUDA ? "cuda" : "cpu";
}

/* Number of CUDA devices, asked in a forked child (a process that has
 * initialized CUDA must not fork workers that use it); 0 with why filled. */
static int cuda_count(char *why, size_t cap)
{
    int n = 0;
    if (disco_device_probe(kDLCUDA, &n) != DISCO_OK) {
        snprintf(why, cap, "%s", disco_last_error());
        return 0;
    }
    return n;
}

bool demo_cuda_present(void)
{
    char why[256];
    return disco_device_has_cuda() && cuda_count(why, sizeof why) > 0;
}

bool demo_device_ready(DLDeviceType type, int workers)
{
    if (type == kDLExtDev) {
        /* one sim device per worker unless the caller chose a count; the
         * spawned or forked workers inherit it */
        if (getenv("DISCO_SIM_GPUS") == NULL) {
            char v[16];
            snprintf(v, sizeof v, "%d", workers);
            setenv("DISCO_SIM_GPUS", v, 1);
        }
        int n = 0;
        if (disco_device_count(kDLExtDev, &n) != DISCO_OK || n < 1) {
            fprintf(stderr, "disco-demo: --device sim: no sim device (DISCO_SIM_GPUS=%s)\n",
                    getenv("DISCO_SIM_GPUS"));
            return false;
        }
        return true;
    }
    if (type == kDLCUDA) {
        char why[256];
        if (!disco_device_has_cuda()) {
            fprintf(stderr, "disco-demo: --device cuda: no CUDA device: this build has no CUDA "
                            "support (no toolkit at build time)\n");
            return false;
        }
        if (cuda_count(why, sizeof why) < 1) {
            fprintf(stderr, "disco-demo: --device cuda: no CUDA device (%s)\n", why);
            return false;
        }
    }
    return true;
}

uint64_t demo_dev_arena_bytes(const demo_mlp_opts_t *o)
{
    uint64_t f = (uint64_t)((o->d_ff + o->workers - 1) / o->workers);
    uint64_t weights = 2 * (uint64_t)o->d_model * f, row = (uint64_t)(o->batch * o->d_model);
    /* weights, x, part, a broadcast and an allreduce result, each rounded
     * up by the arena's alignment; twice that, and 1 MiB, for room */
    uint64_t need = (weights + 4 * row) * sizeof(float) + 8 * 256;
    return 2 * need + (1u << 20);
}

static disco_value_t dref(disco_dref_t r)
{
    return (disco_value_t){.type = DISCO_T_DREF, .v.reg = r};
}

/* Calls name(args) and frees its (null) result register. */
static disco_status_t call_free(disco_session_t *s, const char *name, disco_value_t *a, int n)
{
    disco_dref_t r;
    disco_status_t st = disco_session_call_by_name(s, name, a, n, &r);
    if (st == DISCO_OK)
        st = disco_session_free_reg(s, r);
    return st;
}

disco_status_t demo_dev_setup(disco_session_t *s, const demo_mlp_opts_t *o, demo_dev_t *d)
{
    memset(d, 0, sizeof *d);
    d->dev = (DLDevice){o->device, 0};
    /* Every worker's shard has one shape, the largest share's: the
     * controller makes device tensors of one shape for all (a function
     * cannot make a device tensor itself); smaller shares are zero-padded. */
    int64_t f = (o->d_ff + o->workers - 1) / o->workers, dm = o->d_model;
    int64_t s1[2] = {dm, f}, s2[2] = {f, dm}, sx[2] = {o->batch, dm};
    disco_status_t st;
    if ((st = disco_session_empty_device(s, s1, 2, F32, d->dev, false, &d->w1)) != DISCO_OK ||
        (st = disco_session_empty_device(s, s2, 2, F32, d->dev, false, &d->w2)) != DISCO_OK ||
        (st = disco_session_empty_device(s, sx, 2, F32, d->dev, true, &d->x)) != DISCO_OK ||
        (st = disco_session_empty_device(s, sx, 2, F32, d->dev, false, &d->part)) != DISCO_OK ||
        (st = disco_session_get_func(s, "demo.mlp_partial_into", &d->f_part)) != DISCO_OK)
        return st;
    disco_value_t wa[5] = {dref(d->w1), disco_value_int((int64_t)o->seed), disco_value_int(dm),
                           disco_value_int(o->d_ff), disco_value_int(1)};
    if ((st = call_free(s, "demo.mlp_weights_into", wa, 5)) != DISCO_OK)
        return st;
    wa[0] = dref(d->w2), wa[4] = disco_value_int(2);
    return call_free(s, "demo.mlp_weights_into", wa, 5);
}

disco_status_t demo_dev_step(disco_session_t *s, const demo_dev_t *d, const DLTensor *hx,
                             DLTensor *hy)
{
    disco_dref_t xb = 0, r = 0, y = 0;
    disco_status_t st = disco_session_copy_into_worker0(s, hx, d->x);
    disco_value_t a = dref(d->x);
    if (st == DISCO_OK)
        st = disco_session_call_by_name(s, "disco.broadcast_from_worker0", &a, 1, &xb);
    disco_value_t p[4] = {dref(xb), dref(d->w1), dref(d->w2), dref(d->part)};
    if (st == DISCO_OK)
        st = disco_session_call(s, d->f_part, p, 4, &r);
    disco_value_t ar[2] = {dref(d->part), disco_value_str("sum")};
    if (st == DISCO_OK)
        st = disco_session_call_by_name(s, "disco.allreduce", ar, 2, &y);
    /* worker 0 finished the allreduce, so y is complete on its device; the
     * copy out is synced; a sync of worker 0 hears of any worker's failure */
    if (st == DISCO_OK && (st = disco_session_copy_from_worker0(s, y, hy)) == DISCO_OK)
        st = disco_session_sync(s, 0);
    disco_dref_t regs[3] = {xb, r, y};
    for (int i = 0; i < 3; i++)
        if (regs[i] != 0)
            disco_session_free_reg(s, regs[i]);
    return st;
}

void demo_dev_free(disco_session_t *s, demo_dev_t *d)
{
    disco_dref_t regs[5] = {d->f_part, d->w1, d->w2, d->x, d->part};
    for (int i = 0; i < 5; i++)
        if (regs[i] != 0)
            disco_session_free_reg(s, regs[i]);
    memset(d, 0, sizeof *d);
}
