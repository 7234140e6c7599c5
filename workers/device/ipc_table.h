/* ipc_table.h - the slot operations of the CUDA IPC lifetime table
 * (ipc_table.c), for the per-process context (ipc.c). Internal. The protocol
 * and its labels (F1-F3, I1-I4, R1) are described in ipc.h. A slot is named
 * by its index and generation; a live slot's word also names its exporter's
 * pid. */
#ifndef DISCO_WORKERS_IPC_TABLE_H
#define DISCO_WORKERS_IPC_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "disco/device.h"
#include "disco/status.h"
#include "workers/device/ipc.h"

/** The table's number of slots. */
uint32_t disco__ipc_table_nslots(const disco_ipc_table_t *t);

/** Claims a FREE slot for pid (state FILLING), reclaiming the slots of dead
 *  exporters once if every slot is taken. Returns the slot's index with its
 *  generation in *gen_out, or UINT32_MAX when the table is full. */
uint32_t disco__ipc_slot_claim(disco_ipc_table_t *t, int32_t pid, uint32_t *gen_out);

/** Gives a claimed, never published slot back as FREE with the same gen. */
void disco__ipc_slot_abandon(disco_ipc_table_t *t, uint32_t slot, uint32_t gen);

/** Fills a claimed slot's fields and publishes it as (gen, pid, LIVE). */
void disco__ipc_slot_publish(disco_ipc_table_t *t, uint32_t slot, uint32_t gen, int32_t pid,
                             int device_id, uint64_t bytes, const disco_ipc_handle_t *handle);

/** F1-F3 on the slot published as (gen, pid, LIVE). Returns DISCO_OK (slot
 *  freed), DISCO_E_AGAIN (live holders: their count in *live, the first
 *  npids pids in pids[]), DISCO_E_INVAL (the word was not that; no error
 *  message is set). */
disco_status_t disco__ipc_slot_close(disco_ipc_table_t *t, uint32_t slot, uint32_t gen, int32_t pid,
                                     uint32_t *live, int32_t *pids, size_t npids);

/** I1-I4: joins the importers of the ref's slot as process me after
 *  checking the slot is the ref's. Returns DISCO_OK with the claimed cell in
 *  *cell_out, or DISCO_E_INVAL (stale ref, too many importers, fields that
 *  disagree with the ref). */
disco_status_t disco__ipc_slot_join(disco_ipc_table_t *t, const disco_ipc_ref_t *ref, int32_t me,
                                    uint32_t *cell_out);

/** R1: leaves the importer cell (after the handle is closed). */
void disco__ipc_slot_leave(disco_ipc_table_t *t, uint32_t slot, uint32_t cell);

/** How many live processes hold the slot open. */
uint32_t disco__ipc_slot_importers(disco_ipc_table_t *t, uint32_t slot);

#endif
