/* share.c - several processes on one device: the public calls and the
 * sharing state a session binds (see share.h). */
#include "workers/device/share.h"

#include <stdlib.h>
#include <string.h>

#include "workers/device/sim.h"

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
