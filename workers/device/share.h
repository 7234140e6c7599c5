/* share.h - several processes on one device (internal; the public calls
 * are disco_device_physical_id and disco_device_mps in disco/device.h,
 * the guide docs/gpu-sharing.md).
 *
 * share.c: the public calls (DISCO_GPU_MPS over each table's detection)
 * and the sharing state a session binds. cuda_share.c: CUDA's ops (the
 * GPU's UUID, the MPS daemon's pipe). sim_slice.c: the sim's ops and its
 * time slices (sim.h). device.c: the CPU table's ("cpu"; always
 * concurrent). Arrows: share -> device -> cuda -> cuda_share. */
#ifndef DISCO_WORKERS_DEVICE_SHARE_H
#define DISCO_WORKERS_DEVICE_SHARE_H

#include <stdbool.h>
#include <stddef.h>

#include "disco/device.h"
#include "disco/status.h"

/** CUDA's ops (cuda_share.c): cudaDeviceProp.uuid; an MPS control pipe
 *  (disco__mps_pipe_found). Without CUDA: DISCO_E_NO_DEVICE. */
disco_status_t disco__cuda_physical_id(int device_id, disco_device_uid_t *id_out);
disco_status_t disco__cuda_mps(int device_id, bool *on_out);

/** Whether an MPS control daemon's pipe is there: a FIFO named "control"
 *  in $CUDA_MPS_PIPE_DIRECTORY (default /tmp/nvidia-mps). In every build
 *  (cuda_share.c). Thread-safe. */
bool disco__mps_pipe_found(void);

/** DISCO_GPU_MPS: 1 (declared on), 0 (declared off), -1 (unset or neither
 *  "1" nor "0": detect). Read at each call. Thread-safe. */
int disco__mps_declared(void);

/** Bytes of shared memory a session gives its devices' sharing state
 *  (the sim's context words, sim_slice.c; CUDA needs none): 64-aligned,
 *  zeroed before use. Pure. */
size_t disco__device_share_bytes(void);

/** Binds this process's devices of type to the sharing state at mem (NULL:
 *  unbinds; before mem is unmapped). Sim: its kernels then run in time
 *  slices on devices other processes share (disco__sim_slices_bind); other
 *  types: nothing. Thread-safe. */
void disco__device_share_bind(DLDeviceType type, void *mem);

#endif
