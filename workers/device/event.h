/* event.h - IPC events per device type (internal): the public
 * disco_device_event_* calls (event.c) dispatch on the event's device type
 * to one of these tables (CUDA in cuda.c, sim in sim_event.c). */
#ifndef DISCO_WORKERS_DEVICE_EVENT_H
#define DISCO_WORKERS_DEVICE_EVENT_H

#include "disco/device.h"
#include "disco/status.h"

/* An event as the public API hands it out: its device and the device
 * type's own object. */
struct disco_event {
    DLDeviceType type;
    int device_id;
    void *impl;
};

/* The calls of one device type. Each returns what the public function of the
 * same name in disco/device.h documents; dev is the event's device id. All
 * thread-safe. */
typedef struct disco__event_ops {
    disco_status_t (*create)(int dev, void **impl_out);
    disco_status_t (*import)(int dev, const disco_ipc_handle_t *handle, void **impl_out);
    disco_status_t (*export)(int dev, void *impl, disco_ipc_handle_t *handle_out);
    disco_status_t (*record)(int dev, void *impl, disco_stream_t stream);
    disco_status_t (*wait)(int dev, disco_stream_t stream, void *impl);
    disco_status_t (*sync)(int dev, void *impl);
    disco_status_t (*query)(int dev, void *impl);
    void (*free)(int dev, void *impl);
} disco__event_ops_t;

extern const disco__event_ops_t disco__cuda_event_ops; /* cuda.c */
extern const disco__event_ops_t disco__sim_event_ops;  /* sim_event.c */

#endif
