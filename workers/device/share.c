/* share.c - several processes on one device: the public calls, the CPU
 * table's ops and the MPS pipe detection (see share.h). */
#include "workers/device/share.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "workers/device/sim.h"

disco_status_t disco__cpu_physical_id(int device_id, disco_device_uid_t *id_out)
{
    if (device_id != 0)
        return disco_set_error(DISCO_E_NO_DEVICE, "cpu: no device %d (only 0)", device_id);
    memset(id_out, 0, sizeof *id_out);
    memcpy(id_out->bytes, "cpu", 3);
    return DISCO_OK;
}

disco_status_t disco__cpu_mps(int device_id, bool *on_out)
{
    (void)device_id;
    *on_out = true; /* no kernels: nothing waits for a context */
    return DISCO_OK;
}

bool disco__mps_pipe_found(void)
{
    const char *dir = getenv("CUDA_MPS_PIPE_DIRECTORY");
    char path[PATH_MAX];
    int n = snprintf(path, sizeof path, "%s/control",
                     dir != NULL && dir[0] != '\0' ? dir : "/tmp/nvidia-mps");
    struct stat sb;
    return n > 0 && (size_t)n < sizeof path && stat(path, &sb) == 0 && S_ISFIFO(sb.st_mode);
}

int disco__mps_declared(void)
{
    const char *e = getenv("DISCO_GPU_MPS");
    if (e != NULL && strcmp(e, "1") == 0)
        return 1;
    if (e != NULL && strcmp(e, "0") == 0)
        return 0;
    return -1;
}

disco_status_t disco_device_physical_id(DLDevice dev, disco_device_uid_t *id_out)
{
    const disco_device_api_t *api;
    disco_status_t st = disco_device_api_get(dev.device_type, &api);
    if (st != DISCO_OK)
        return st;
    if (id_out == NULL)
        return disco_set_error(DISCO_E_INVAL, "disco_device_physical_id: id_out is NULL");
    return api->physical_id(dev.device_id, id_out);
}

disco_status_t disco_device_mps(DLDevice dev, bool *on_out)
{
    const disco_device_api_t *api;
    disco_status_t st = disco_device_api_get(dev.device_type, &api);
    if (st != DISCO_OK)
        return st;
    if (on_out == NULL)
        return disco_set_error(DISCO_E_INVAL, "disco_device_mps: on_out is NULL");
    int declared = disco__mps_declared();
    if (declared >= 0 && dev.device_type != kDLCPU) {
        *on_out = declared == 1;
        return DISCO_OK;
    }
    return api->mps(dev.device_id, on_out);
}

size_t disco__device_share_bytes(void)
{
    return disco__sim_slices_bytes();
}

void disco__device_share_bind(DLDeviceType type, void *mem)
{
    if (type == kDLExtDev)
        disco__sim_slices_bind(mem);
}
