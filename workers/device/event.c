/* event.c - the public IPC event calls: dispatch by the event's device type
 * to the CUDA (cuda.c) or sim (sim_event.c) implementation. */
#include <stdlib.h>

#include "disco/device.h"
#include "workers/device/event.h"

static const disco__event_ops_t *ops_of(DLDeviceType type)
{
    return type == kDLCUDA     ? &disco__cuda_event_ops
           : type == kDLExtDev ? &disco__sim_event_ops
                               : NULL;
}

static disco_status_t make(DLDevice dev, const disco_ipc_handle_t *handle,
                           disco_event_t **event_out, const char *fn)
{
    const disco__event_ops_t *ops = ops_of(dev.device_type);
    if (ops == NULL)
        return disco_set_error(DISCO_E_NO_DEVICE,
                               "%s: device type %d: IPC events are cuda and sim "
                               "only",
                               fn, (int)dev.device_type);
    if (event_out == NULL)
        return disco_set_error(DISCO_E_INVAL, "%s: NULL output", fn);
    disco_event_t *ev = malloc(sizeof *ev);
    if (ev == NULL)
        return disco_set_error(DISCO_E_NOMEM, "%s: malloc", fn);
    disco_status_t st = handle != NULL ? ops->import(dev.device_id, handle, &ev->impl)
                                       : ops->create(dev.device_id, &ev->impl);
    if (st != DISCO_OK) {
        free(ev);
        return st;
    }
    ev->type = dev.device_type;
    ev->device_id = dev.device_id;
    *event_out = ev;
    return DISCO_OK;
}

disco_status_t disco_device_event_create(DLDevice dev, disco_event_t **event_out)
{
    return make(dev, NULL, event_out, "disco_device_event_create");
}

disco_status_t disco_device_event_import(DLDevice dev, const disco_ipc_handle_t *handle,
                                         disco_event_t **event_out)
{
    if (handle == NULL && ops_of(dev.device_type) != NULL)
        return disco_set_error(DISCO_E_INVAL, "disco_device_event_import: NULL handle");
    return make(dev, handle, event_out, "disco_device_event_import");
}

#define EV_CHECK(ev, fn)                                                                           \
    do {                                                                                           \
        if ((ev) == NULL)                                                                          \
            return disco_set_error(DISCO_E_INVAL, "%s: NULL event", fn);                           \
    } while (0)

disco_status_t disco_device_event_export(disco_event_t *ev, disco_ipc_handle_t *handle_out)
{
    EV_CHECK(ev, "disco_device_event_export");
    return ops_of(ev->type)->export(ev->device_id, ev->impl, handle_out);
}

disco_status_t disco_device_event_record(disco_event_t *ev, disco_stream_t stream)
{
    EV_CHECK(ev, "disco_device_event_record");
    return ops_of(ev->type)->record(ev->device_id, ev->impl, stream);
}

disco_status_t disco_device_stream_wait_event(disco_stream_t stream, disco_event_t *ev)
{
    EV_CHECK(ev, "disco_device_stream_wait_event");
    return ops_of(ev->type)->wait(ev->device_id, stream, ev->impl);
}

disco_status_t disco_device_event_sync(disco_event_t *ev)
{
    EV_CHECK(ev, "disco_device_event_sync");
    return ops_of(ev->type)->sync(ev->device_id, ev->impl);
}

disco_status_t disco_device_event_query(disco_event_t *ev)
{
    EV_CHECK(ev, "disco_device_event_query");
    return ops_of(ev->type)->query(ev->device_id, ev->impl);
}

void disco_device_event_free(disco_event_t *ev)
{
    if (ev == NULL)
        return;
    ops_of(ev->type)->free(ev->device_id, ev->impl);
    free(ev);
}
