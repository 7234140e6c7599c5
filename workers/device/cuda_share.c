/* cuda_share.c - CUDA's ops for several processes on one GPU (share.h):
 * the GPU's UUID as its physical identity, the MPS daemon's pipe as the
 * sign that kernels of different processes run at the same time. Built
 * with the runtime API when DISCO_HAVE_CUDA is defined (as cuda.c). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "workers/device/cuda_impl.h"
#include "workers/device/share.h"

bool disco__mps_pipe_found(void)
{
    const char *dir = getenv("CUDA_MPS_PIPE_DIRECTORY");
    char path[PATH_MAX];
    int n = snprintf(path, sizeof path, "%s/control",
                     dir != NULL && dir[0] != '\0' ? dir : "/tmp/nvidia-mps");
    struct stat sb;
    return n > 0 && (size_t)n < sizeof path && stat(path, &sb) == 0 && S_ISFIFO(sb.st_mode);
}

#ifdef DISCO_HAVE_CUDA

disco_status_t disco__cuda_physical_id(int device_id, disco_device_uid_t *id_out)
{
    GUARD();
    struct cudaDeviceProp p;
    CU(cudaGetDeviceProperties(&p, device_id), device_id);
    _Static_assert(sizeof p.uuid.bytes == DISCO_DEVICE_UID_BYTES, "a CUDA UUID is 16 bytes");
    memcpy(id_out->bytes, p.uuid.bytes, sizeof id_out->bytes);
    return DISCO_OK;
}

disco_status_t disco__cuda_mps(int device_id, bool *on_out)
{
    (void)device_id; /* one daemon serves every GPU it was started for */
    *on_out = disco__mps_pipe_found();
    return DISCO_OK;
}

#else

disco_status_t disco__cuda_physical_id(int device_id, disco_device_uid_t *id_out)
{
    (void)device_id, (void)id_out;
    return disco__cuda_none("disco_device_physical_id");
}

disco_status_t disco__cuda_mps(int device_id, bool *on_out)
{
    (void)device_id, (void)on_out;
    return disco__cuda_none("disco_device_mps");
}

#endif
