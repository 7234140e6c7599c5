/* ipc.c - CUDA IPC bookkeeping, the per-process context: the export table
 * (this process's allocations), the import cache (handles opened here) and
 * the calls of ipc.h that use them. The shared lifetime table and its slot
 * protocol are in ipc_table.c. */
#include "workers/device/ipc.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "workers/device/ipc_table.h"

struct export_entry {
    uintptr_t base;
    size_t bytes;
    int device_id;
    bool exported;
    uint32_t slot, gen;
    disco_ipc_handle_t handle;
    uint64_t self_refs; /* imports of our own ref (resolved locally) */
};

struct import_entry {
    disco_ipc_handle_t handle;
    int32_t pid;
    uint32_t slot, gen, cell;
    void *base;
    uint64_t bytes;
    uint64_t refs;
};

struct disco_ipc {
    pthread_mutex_t lock;
    disco_ipc_backend_t be;
    disco_ipc_table_t *table;
    pid_t pid;
    struct export_entry *ex; /* sorted by base */
    size_t nex, capex;
    struct import_entry *im;
    size_t nim, capim;
};

disco_status_t disco__ipc_create(const disco_ipc_backend_t *backend, disco_ipc_table_t *table,
                                 disco_ipc_t **ipc_out)
{
    if (backend == NULL || backend->get_handle == NULL || backend->open_handle == NULL ||
        backend->close_handle == NULL)
        return disco_set_error(DISCO_E_INVAL, "disco__ipc_create: incomplete backend");
    disco_ipc_t *ipc = calloc(1, sizeof *ipc);
    if (ipc == NULL)
        return disco_set_error(DISCO_E_NOMEM, "disco__ipc_create: calloc");
    pthread_mutex_init(&ipc->lock, NULL);
    ipc->be = *backend;
    ipc->table = table;
    ipc->pid = getpid();
    *ipc_out = ipc;
    return DISCO_OK;
}

/* Locks ipc; fails (unlocked) in a process other than its maker's. */
static disco_status_t lock_ctx(disco_ipc_t *ipc, const char *fn)
{
    if (ipc == NULL)
        return disco_set_error(DISCO_E_INVAL, "%s: NULL context", fn);
    pid_t me = getpid();
    if (me != ipc->pid)
        return disco_set_error(DISCO_E_INVAL,
                               "%s: IPC context of pid %d used in pid %d (a forked child must "
                               "make its own)",
                               fn, (int)ipc->pid, (int)me);
    pthread_mutex_lock(&ipc->lock);
    return DISCO_OK;
}

disco_status_t disco__ipc_set_table(disco_ipc_t *ipc, disco_ipc_table_t *table)
{
    disco_status_t st = lock_ctx(ipc, "disco__ipc_set_table");
    if (st != DISCO_OK)
        return st;
    bool busy = ipc->nim > 0;
    for (size_t i = 0; i < ipc->nex && !busy; i++)
        busy = ipc->ex[i].exported;
    if (busy && table != ipc->table) {
        pthread_mutex_unlock(&ipc->lock);
        return disco_set_error(DISCO_E_INVAL,
                               "disco__ipc_set_table: exports or imports use the current table");
    }
    ipc->table = table;
    pthread_mutex_unlock(&ipc->lock);
    return DISCO_OK;
}

/* Index of the first export entry with base > p (binary search). */
static size_t ex_upper(const disco_ipc_t *ipc, uintptr_t p)
{
    size_t lo = 0, hi = ipc->nex;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ipc->ex[mid].base <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The export entry containing p, or NULL. */
static struct export_entry *ex_find(disco_ipc_t *ipc, uintptr_t p)
{
    size_t i = ex_upper(ipc, p);
    if (i == 0)
        return NULL;
    struct export_entry *e = &ipc->ex[i - 1];
    return p - e->base < e->bytes ? e : NULL;
}

static void ex_erase(disco_ipc_t *ipc, struct export_entry *e)
{
    size_t i = (size_t)(e - ipc->ex);
    memmove(e, e + 1, (ipc->nex - i - 1) * sizeof *e);
    ipc->nex--;
}

static struct import_entry *im_find(disco_ipc_t *ipc, const disco_ipc_handle_t *h, int32_t pid)
{
    for (size_t i = 0; i < ipc->nim; i++)
        if (ipc->im[i].pid == pid && memcmp(ipc->im[i].handle.bytes, h->bytes, sizeof *h) == 0)
            return &ipc->im[i];
    return NULL;
}

static void im_erase(disco_ipc_t *ipc, struct import_entry *e)
{
    *e = ipc->im[--ipc->nim];
}

static void free_ctx(disco_ipc_t *ipc)
{
    pthread_mutex_destroy(&ipc->lock);
    free(ipc->ex);
    free(ipc->im);
    free(ipc);
}

void disco__ipc_destroy(disco_ipc_t *ipc)
{
    if (ipc == NULL)
        return;
    if (getpid() != ipc->pid) {
        disco__ipc_discard(ipc);
        return;
    }
    pthread_mutex_lock(&ipc->lock);
    for (size_t i = 0; i < ipc->nim; i++) {
        struct import_entry *e = &ipc->im[i];
        ipc->be.close_handle(ipc->be.ctx, e->base);
        disco__ipc_slot_leave(ipc->table, e->slot, e->cell);
    }
    for (size_t i = 0; i < ipc->nex; i++) {
        struct export_entry *e = &ipc->ex[i];
        if (e->exported) {
            uint32_t live;
            int32_t pid[1];
            disco__ipc_slot_close(ipc->table, e->slot, e->gen, (int32_t)ipc->pid, &live, pid, 1);
        }
    }
    pthread_mutex_unlock(&ipc->lock);
    free_ctx(ipc);
}

void disco__ipc_discard(disco_ipc_t *ipc)
{
    if (ipc != NULL)
        free_ctx(ipc);
}

disco_status_t disco__ipc_add(disco_ipc_t *ipc, void *base, size_t bytes, int device_id)
{
    disco_status_t st = lock_ctx(ipc, "disco__ipc_add");
    if (st != DISCO_OK)
        return st;
    uintptr_t b = (uintptr_t)base;
    size_t i = ex_upper(ipc, b);
    if (base == NULL || bytes == 0 || b + bytes < b) {
        st = disco_set_error(DISCO_E_INVAL, "disco__ipc_add: %zu bytes at %p", bytes, base);
    } else if ((i > 0 && b - ipc->ex[i - 1].base < ipc->ex[i - 1].bytes) ||
               (i < ipc->nex && ipc->ex[i].base - b < bytes)) {
        st = disco_set_error(DISCO_E_INVAL,
                             "disco__ipc_add: [%p, +%zu) overlaps a recorded allocation", base,
                             bytes);
    } else if (ipc->nex == ipc->capex) {
        size_t cap = ipc->capex ? 2 * ipc->capex : 16;
        struct export_entry *ex = realloc(ipc->ex, cap * sizeof *ex);
        if (ex == NULL)
            st = disco_set_error(DISCO_E_NOMEM, "disco__ipc_add: realloc");
        else
            ipc->ex = ex, ipc->capex = cap;
    }
    if (st == DISCO_OK) {
        memmove(&ipc->ex[i + 1], &ipc->ex[i], (ipc->nex - i) * sizeof ipc->ex[0]);
        ipc->ex[i] = (struct export_entry){.base = b, .bytes = bytes, .device_id = device_id};
        ipc->nex++;
    }
    pthread_mutex_unlock(&ipc->lock);
    return st;
}

disco_status_t disco__ipc_remove(disco_ipc_t *ipc, void *base)
{
    disco_status_t st = lock_ctx(ipc, "disco__ipc_remove");
    if (st != DISCO_OK)
        return st;
    struct export_entry *e = ex_find(ipc, (uintptr_t)base);
    if (e == NULL) {
        st = disco_set_error(DISCO_E_INVAL,
                             "disco__ipc_remove: %p is not an allocation of this process", base);
    } else if (e->base != (uintptr_t)base) {
        st = disco_set_error(DISCO_E_INVAL,
                             "disco__ipc_remove: %p is inside the allocation at %p, not its base",
                             base, (void *)e->base);
    } else if (e->self_refs > 0) {
        st = disco_set_error(DISCO_E_AGAIN,
                             "disco__ipc_remove: allocation %p is still imported by its own "
                             "process (%" PRIu64 " refs)",
                             base, e->self_refs);
    } else if (e->exported) {
        uint32_t live = 0;
        int32_t pids[4];
        st = disco__ipc_slot_close(ipc->table, e->slot, e->gen, (int32_t)ipc->pid, &live, pids, 4);
        if (st == DISCO_E_AGAIN) {
            char list[64] = "";
            for (uint32_t k = 0, n = 0; k < live && k < 4; k++)
                n += (uint32_t)snprintf(list + n, sizeof list - n, "%s%d", k ? ", " : "",
                                        (int)pids[k]);
            disco_set_error(DISCO_E_AGAIN,
                            "disco__ipc_remove: allocation %p (%zu bytes) is still imported by "
                            "%" PRIu32 " process(es) (pid %s%s); free it after they release it",
                            base, e->bytes, live, list, live > 4 ? ", ..." : "");
        } else if (st != DISCO_OK) {
            st = disco_set_error(DISCO_E_INVAL,
                                 "disco__ipc_remove: slot %" PRIu32 " of %p changed under its "
                                 "exporter (table corrupted?)",
                                 e->slot, base);
        }
    }
    if (st == DISCO_OK)
        ex_erase(ipc, e);
    pthread_mutex_unlock(&ipc->lock);
    return st;
}

disco_status_t disco__ipc_find(disco_ipc_t *ipc, const void *ptr, void **base_out,
                               size_t *bytes_out, int *device_out)
{
    disco_status_t st = lock_ctx(ipc, "disco__ipc_find");
    if (st != DISCO_OK)
        return st;
    struct export_entry *e = ex_find(ipc, (uintptr_t)ptr);
    if (e == NULL) {
        st = disco_set_error(DISCO_E_INVAL,
                             "disco__ipc_find: %p is inside no allocation of this process", ptr);
    } else {
        if (base_out)
            *base_out = (void *)e->base;
        if (bytes_out)
            *bytes_out = e->bytes;
        if (device_out)
            *device_out = e->device_id;
    }
    pthread_mutex_unlock(&ipc->lock);
    return st;
}

/* Exports e (once): claims a slot, asks the backend for the handle, fills
 * the slot, publishes it. Called locked. */
static disco_status_t export_entry(disco_ipc_t *ipc, struct export_entry *e)
{
    disco_ipc_table_t *t = ipc->table;
    uint32_t gen = 0;
    uint32_t i = disco__ipc_slot_claim(t, (int32_t)ipc->pid, &gen);
    if (i == UINT32_MAX)
        return disco_set_error(DISCO_E_NOMEM,
                               "disco__ipc_export: IPC table full (%" PRIu32
                               " allocations exported by live processes)",
                               disco__ipc_table_nslots(t));
    disco_ipc_handle_t h;
    disco_status_t st = ipc->be.get_handle(ipc->be.ctx, (void *)e->base, &h);
    if (st != DISCO_OK) {
        disco__ipc_slot_abandon(t, i, gen); /* give the slot back untouched */
        return st;
    }
    disco__ipc_slot_publish(t, i, gen, (int32_t)ipc->pid, e->device_id, e->bytes, &h);
    e->exported = true;
    e->slot = i;
    e->gen = gen;
    e->handle = h;
    return DISCO_OK;
}

disco_status_t disco__ipc_export(disco_ipc_t *ipc, const void *ptr, disco_ipc_ref_t *ref_out)
{
    disco_status_t st = lock_ctx(ipc, "disco__ipc_export");
    if (st != DISCO_OK)
        return st;
    struct export_entry *e = ex_find(ipc, (uintptr_t)ptr);
    if (e == NULL)
        st = disco_set_error(DISCO_E_INVAL,
                             "disco__ipc_export: %p is inside no allocation of this process", ptr);
    else if (ipc->table == NULL)
        st = disco_set_error(DISCO_E_INVAL, "disco__ipc_export: no IPC table attached");
    else if (!e->exported)
        st = export_entry(ipc, e);
    if (st == DISCO_OK) {
        *ref_out = (disco_ipc_ref_t){
            .handle = e->handle,
            .exporter_pid = (int32_t)ipc->pid,
            .device_id = e->device_id,
            .slot = e->slot,
            .gen = e->gen,
            .offset = (uint64_t)((uintptr_t)ptr - e->base),
            .alloc_bytes = e->bytes,
        };
    }
    pthread_mutex_unlock(&ipc->lock);
    return st;
}

/* An import of our own export: the local pointer, no open. Called locked. */
static disco_status_t import_own(disco_ipc_t *ipc, const disco_ipc_ref_t *ref, void **ptr_out)
{
    for (size_t i = 0; i < ipc->nex; i++) {
        struct export_entry *e = &ipc->ex[i];
        if (e->exported && e->slot == ref->slot && e->gen == ref->gen &&
            memcmp(e->handle.bytes, ref->handle.bytes, sizeof ref->handle) == 0) {
            if (ref->alloc_bytes != e->bytes || ref->offset >= e->bytes)
                break;
            e->self_refs++;
            *ptr_out = (void *)(e->base + ref->offset);
            return DISCO_OK;
        }
    }
    return disco_set_error(DISCO_E_INVAL,
                           "disco__ipc_import: ref names this process (pid %d) but no live "
                           "export of it matches (slot %" PRIu32 " gen %" PRIu32 ", offset %" PRIu64
                           " of %" PRIu64 ")",
                           (int)ipc->pid, ref->slot, ref->gen, ref->offset, ref->alloc_bytes);
}

disco_status_t disco__ipc_import(disco_ipc_t *ipc, const disco_ipc_ref_t *ref, void **ptr_out)
{
    disco_status_t st = lock_ctx(ipc, "disco__ipc_import");
    if (st != DISCO_OK)
        return st;
    if (ref == NULL || ipc->table == NULL) {
        st = disco_set_error(DISCO_E_INVAL, "disco__ipc_import: %s",
                             ref == NULL ? "NULL ref" : "no IPC table attached");
        goto out;
    }
    if (ref->slot >= disco__ipc_table_nslots(ipc->table) || ref->gen == 0 ||
        ref->exporter_pid <= 0 || ref->offset >= ref->alloc_bytes) {
        st = disco_set_error(DISCO_E_INVAL,
                             "disco__ipc_import: bad handle: slot %" PRIu32 " (of %" PRIu32
                             ") gen %" PRIu32 " pid %d offset %" PRIu64 " of %" PRIu64,
                             ref->slot, disco__ipc_table_nslots(ipc->table), ref->gen,
                             (int)ref->exporter_pid, ref->offset, ref->alloc_bytes);
        goto out;
    }
    if (ref->exporter_pid == (int32_t)ipc->pid) {
        st = import_own(ipc, ref, ptr_out);
        goto out;
    }
    struct import_entry *e = im_find(ipc, &ref->handle, ref->exporter_pid);
    if (e != NULL) {
        if (e->slot != ref->slot || e->gen != ref->gen || e->bytes != ref->alloc_bytes) {
            st = disco_set_error(DISCO_E_INVAL,
                                 "disco__ipc_import: bad handle: the ref disagrees with the open "
                                 "import of its handle (slot %" PRIu32 " gen %" PRIu32 ")",
                                 e->slot, e->gen);
            goto out;
        }
        e->refs++;
        *ptr_out = (char *)e->base + ref->offset;
        goto out;
    }
    if (ipc->nim == ipc->capim) {
        size_t cap = ipc->capim ? 2 * ipc->capim : 16;
        struct import_entry *im = realloc(ipc->im, cap * sizeof *im);
        if (im == NULL) {
            st = disco_set_error(DISCO_E_NOMEM, "disco__ipc_import: realloc");
            goto out;
        }
        ipc->im = im;
        ipc->capim = cap;
    }
    uint32_t cell = 0;
    st = disco__ipc_slot_join(ipc->table, ref, (int32_t)ipc->pid, &cell);
    if (st != DISCO_OK)
        goto out;
    void *base = NULL;
    st = ipc->be.open_handle(ipc->be.ctx, &ref->handle, &base);
    if (st != DISCO_OK) {
        disco__ipc_slot_leave(ipc->table, ref->slot, cell);
        goto out;
    }
    ipc->im[ipc->nim++] = (struct import_entry){
        .handle = ref->handle,
        .pid = ref->exporter_pid,
        .slot = ref->slot,
        .gen = ref->gen,
        .cell = cell,
        .base = base,
        .bytes = ref->alloc_bytes,
        .refs = 1,
    };
    *ptr_out = (char *)base + ref->offset;
out:
    pthread_mutex_unlock(&ipc->lock);
    return st;
}

disco_status_t disco__ipc_release(disco_ipc_t *ipc, const disco_ipc_ref_t *ref)
{
    disco_status_t st = lock_ctx(ipc, "disco__ipc_release");
    if (st != DISCO_OK)
        return st;
    if (ref == NULL) {
        st = disco_set_error(DISCO_E_INVAL, "disco__ipc_release: NULL ref");
    } else if (ref->exporter_pid == (int32_t)ipc->pid) {
        st = DISCO_E_INVAL;
        for (size_t i = 0; i < ipc->nex; i++) {
            struct export_entry *e = &ipc->ex[i];
            if (e->exported && e->slot == ref->slot && e->gen == ref->gen && e->self_refs > 0) {
                e->self_refs--;
                st = DISCO_OK;
                break;
            }
        }
        if (st != DISCO_OK)
            disco_set_error(st,
                            "disco__ipc_release: own allocation (slot %" PRIu32
                            ") is not imported by this process",
                            ref->slot);
    } else {
        struct import_entry *e = im_find(ipc, &ref->handle, ref->exporter_pid);
        if (e == NULL || e->slot != ref->slot || e->gen != ref->gen) {
            st = disco_set_error(DISCO_E_INVAL,
                                 "disco__ipc_release: the allocation of pid %d (slot %" PRIu32
                                 ") is not imported by this process",
                                 (int)ref->exporter_pid, ref->slot);
        } else if (--e->refs == 0) {
            st = ipc->be.close_handle(ipc->be.ctx, e->base);
            disco__ipc_slot_leave(ipc->table, e->slot, e->cell);
            im_erase(ipc, e);
        }
    }
    pthread_mutex_unlock(&ipc->lock);
    return st;
}

disco_status_t disco__ipc_forget(disco_ipc_t *ipc, void *base)
{
    disco_status_t st = lock_ctx(ipc, "disco__ipc_forget");
    if (st != DISCO_OK)
        return st;
    struct export_entry *e = ex_find(ipc, (uintptr_t)base);
    if (e == NULL || e->base != (uintptr_t)base) {
        st = disco_set_error(DISCO_E_INVAL,
                             "disco__ipc_forget: %p is not the base of an allocation of this "
                             "process",
                             base);
    } else {
        if (e->exported) {
            uint32_t live = 0;
            int32_t pid[1];
            /* Refused while a live importer holds it: the slot then stays
             * claimed until the table is formatted again or unmapped. */
            (void)disco__ipc_slot_close(ipc->table, e->slot, e->gen, (int32_t)ipc->pid, &live, pid,
                                        1);
        }
        ex_erase(ipc, e);
    }
    pthread_mutex_unlock(&ipc->lock);
    return st;
}

disco_status_t disco__ipc_forget_import(disco_ipc_t *ipc, const disco_ipc_ref_t *ref)
{
    disco_status_t st = lock_ctx(ipc, "disco__ipc_forget_import");
    if (st != DISCO_OK)
        return st;
    struct import_entry *e = ref != NULL ? im_find(ipc, &ref->handle, ref->exporter_pid) : NULL;
    if (e == NULL || e->slot != ref->slot || e->gen != ref->gen) {
        st = disco_set_error(DISCO_E_INVAL, "disco__ipc_forget_import: not imported by this "
                                            "process");
    } else {
        disco__ipc_slot_leave(ipc->table, e->slot, e->cell);
        im_erase(ipc, e);
    }
    pthread_mutex_unlock(&ipc->lock);
    return st;
}

uint32_t disco__ipc_importers(disco_ipc_t *ipc, const void *base)
{
    if (lock_ctx(ipc, "disco__ipc_importers") != DISCO_OK)
        return 0;
    uint32_t n = 0;
    struct export_entry *e = ex_find(ipc, (uintptr_t)base);
    if (e != NULL && e->exported) {
        n = disco__ipc_slot_importers(ipc->table, e->slot);
    }
    pthread_mutex_unlock(&ipc->lock);
    return n;
}

void disco__ipc_stats(disco_ipc_t *ipc, disco_ipc_stats_t *stats_out)
{
    disco_ipc_stats_t s = {0};
    if (lock_ctx(ipc, "disco__ipc_stats") == DISCO_OK) {
        s.allocs = (uint32_t)ipc->nex;
        for (size_t i = 0; i < ipc->nex; i++) {
            s.exported += ipc->ex[i].exported;
            s.self_refs += ipc->ex[i].self_refs;
        }
        s.imports = (uint32_t)ipc->nim;
        for (size_t i = 0; i < ipc->nim; i++)
            s.import_refs += ipc->im[i].refs;
        pthread_mutex_unlock(&ipc->lock);
    }
    *stats_out = s;
}
