/* ar.c - the device allreduce's checks, plan and dispatch (see ar.h); the
 * kernels are ar_sim.c (sim) and ar_cuda.cu (CUDA, through cuda.c). */
#include "workers/device/ar.h"

#include <stdlib.h>

#include "disco/dtype.h"
#include "workers/device/ar_progress.h"

#define PIECE_BYTES (64u * 1024u)

uint32_t disco__ar_plan(uint64_t count, size_t esz, uint32_t size, bool two_shot)
{
    uint64_t mine = two_shot && size > 0 ? count / size : count;
    uint64_t pieces = mine * esz / PIECE_BYTES;
    return pieces < 1 ? 1 : pieces > DISCO_AR_MAX_PIECES ? DISCO_AR_MAX_PIECES : (uint32_t)pieces;
}

bool disco__ar_two_shot(uint64_t nbytes)
{
    /* Read at every call (a bench sets it between sessions); one getenv
     * per collective is noise beside its barriers. */
    const char *e = getenv("DISCO_AR_TWO_SHOT_BYTES");
    char *end;
    unsigned long long v = e != NULL && *e != '\0' ? strtoull(e, &end, 10) : 0;
    bool set = e != NULL && *e != '\0' && *end == '\0';
    return nbytes >= (set ? (uint64_t)v : DISCO_AR_TWO_SHOT_DEFAULT);
}

/* The element types the kernels reduce: disco_reduce's. */
static bool reducible(DLDataType t)
{
    if (t.lanes != 1)
        return false;
    switch (t.code) {
    case kDLFloat:
        return t.bits == 16 || t.bits == 32 || t.bits == 64;
    case kDLBfloat:
        return t.bits == 16;
    case kDLInt:
        return t.bits == 8 || t.bits == 16 || t.bits == 32 || t.bits == 64;
    case kDLUInt:
        return t.bits == 8 || t.bits == 1;
    case DISCO_DL_BOOL:
        return t.bits == 8;
    default:
        return false;
    }
}

static disco_status_t check_job(const struct disco__ar_job *j)
{
    if (j->size < 1 || j->size > DISCO_AR_MAX_RANKS || j->rank >= j->size ||
        j->slot >= DISCO_AR_SLOTS || j->epoch == 0 || j->op >= DISCO_REDUCE_COUNT ||
        j->pieces < 1 || j->pieces > DISCO_AR_MAX_PIECES || j->two_shot > 1)
        return disco_set_error(DISCO_E_INVAL,
                               "allreduce kernel: a malformed job (rank %u of %u, slot %u, "
                               "epoch %u, op %u, %u pieces)",
                               j->rank, j->size, j->slot, j->epoch, j->op, j->pieces);
    if (!reducible(j->dtype)) {
        char b[32];
        return disco_set_error(DISCO_E_BAD_TYPE, "allreduce kernel: cannot reduce %s",
                               disco_dtype_str(j->dtype, b, sizeof b));
    }
    for (uint32_t r = 0; r < j->size; r++)
        if (j->in[r] == NULL || j->out[r] == NULL || j->signal[r] == NULL)
            return disco_set_error(DISCO_E_INVAL, "allreduce kernel: member %u's pointers unset",
                                   r);
    return DISCO_OK;
}

disco_status_t disco__ar_launch(DLDevice dev, disco_stream_t stream,
                                const struct disco__ar_job *job)
{
    disco_status_t st = check_job(job);
    if (st != DISCO_OK)
        return st;
    /* Before the launch: the kernel may run (the sim's, at a sync of this
     * thread; CUDA's, at once) and write its pieces as soon as it is queued. */
    if (job->progress != NULL)
        disco__ar_progress_begin(job->progress, job);
    switch (dev.device_type) {
    case kDLExtDev:
        st = disco__sim_ar_launch(dev.device_id, stream, job);
        break;
    case kDLCUDA:
        st = disco__cuda_ar_launch(dev.device_id, stream, job);
        break;
    default:
        st = disco_set_error(DISCO_E_NO_DEVICE,
                             "allreduce kernel: device type %d has none (cuda or sim only)",
                             (int)dev.device_type);
        break;
    }
    if (st != DISCO_OK)
        disco__ar_progress_stop(job->progress); /* it never runs */
    return st;
}

disco_status_t disco__ar_check(DLDevice dev)
{
    return dev.device_type == kDLCUDA ? disco__cuda_ar_check(dev.device_id) : DISCO_OK;
}
