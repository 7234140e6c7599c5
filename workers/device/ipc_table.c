/* ipc_table.c - the CUDA IPC lifetime table in shared memory: one slot per
 * exported allocation, claimed, published, joined, left and closed by the
 * slot protocol of ipc.h (labels F1-F3, I1-I4, R1). The per-process context
 * that drives it is in ipc.c. */
#include "workers/device/ipc_table.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define TABLE_MAGIC   UINT64_C(0x4350494f43534944) /* "DISCOIPC" */
#define TABLE_VERSION 1u

enum { SLOT_FREE = 0, SLOT_FILLING = 1, SLOT_LIVE = 2, SLOT_CLOSING = 3 };

/* One exported allocation. Written by its exporter only while FILLING. */
struct slot {
    _Atomic uint64_t word; /* gen << 32 | pid << 2 | state */
    int32_t device_id;
    uint32_t pad0;
    uint64_t bytes;
    unsigned char handle[DISCO_IPC_HANDLE_BYTES];
    _Atomic int32_t importer[DISCO_IPC_MAX_IMPORTERS]; /* pids; 0 = free cell */
} __attribute__((aligned(64)));

/* The table in shared memory. Every process that maps it may write it, so
 * its header is read once, at init or attach, into the process's own
 * handle; nslots is never read from here again (test_table_count_raised). */
struct table_shm {
    uint64_t magic;
    uint32_t version;
    uint32_t nslots;
    _Atomic uint32_t hint; /* where the next slot search starts; relaxed: only a hint */
    unsigned char pad[44];
    struct slot slots[];
};

_Static_assert(sizeof(struct table_shm) == 64, "table header is one cache line");

/* This process's handle on a table: the shared memory and its size, as
 * this process checked it. */
struct disco_ipc_table {
    struct table_shm *sh;
    uint32_t nslots; /* read once; every index is checked against this */
};

static inline uint64_t word_of(uint32_t gen, int32_t pid, unsigned state)
{
    return (uint64_t)gen << 32 | (uint64_t)(uint32_t)pid << 2 | state;
}
static inline uint32_t word_gen(uint64_t w)
{
    return (uint32_t)(w >> 32);
}
static inline int32_t word_pid(uint64_t w)
{
    return (int32_t)((w & 0xffffffffu) >> 2);
}
static inline unsigned word_state(uint64_t w)
{
    return (unsigned)(w & 3u);
}

static bool pid_alive(int32_t pid)
{
    return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM);
}

size_t disco__ipc_table_footprint(uint32_t nslots)
{
    return sizeof(struct table_shm) + (size_t)nslots * sizeof(struct slot);
}

/* A handle on sh of nslots (already checked); NULL when out of memory
 * (error set). */
static disco_ipc_table_t *handle_new(struct table_shm *sh, uint32_t nslots)
{
    disco_ipc_table_t *t = malloc(sizeof *t);
    if (t == NULL) {
        disco_set_error(DISCO_E_NOMEM, "IPC table handle");
        return NULL;
    }
    t->sh = sh;
    t->nslots = nslots;
    return t;
}

disco_status_t disco__ipc_table_init(void *mem, size_t bytes, uint32_t nslots,
                                     disco_ipc_table_t **table_out)
{
    if (mem == NULL || (uintptr_t)mem % 64 != 0 || nslots == 0 || nslots > (1u << 24) ||
        bytes < disco__ipc_table_footprint(nslots))
        return disco_set_error(DISCO_E_INVAL,
                               "disco__ipc_table_init: %zu bytes at %p for %" PRIu32
                               " slots (need %zu, 64-byte aligned)",
                               bytes, mem, nslots, disco__ipc_table_footprint(nslots));
    disco_ipc_table_t *t = NULL;
    if (table_out != NULL && (t = handle_new(mem, nslots)) == NULL)
        return DISCO_E_NOMEM;
    struct table_shm *sh = mem;
    memset(sh, 0, disco__ipc_table_footprint(nslots));
    sh->version = TABLE_VERSION;
    sh->nslots = nslots;
    for (uint32_t i = 0; i < nslots; i++)
        atomic_init(&sh->slots[i].word, word_of(1, 0, SLOT_FREE));
    /* Plain store: attachers get the table across fork or after the
     * creator's setup, both of which order it. */
    sh->magic = TABLE_MAGIC;
    if (table_out != NULL)
        *table_out = t;
    return DISCO_OK;
}

disco_status_t disco__ipc_table_attach(void *mem, size_t bytes, disco_ipc_table_t **table_out)
{
    if (mem == NULL || (uintptr_t)mem % 64 != 0 || bytes < sizeof(struct table_shm))
        return disco_set_error(DISCO_E_INVAL, "disco__ipc_table_attach: %zu bytes at %p", bytes,
                               mem);
    /* Each word once (volatile: one load each): the header is every
     * mapper's to write. */
    const volatile struct table_shm *sh = mem;
    uint64_t magic = sh->magic;
    uint32_t version = sh->version, nslots = sh->nslots;
    if (magic != TABLE_MAGIC || version != TABLE_VERSION)
        return disco_set_error(DISCO_E_BAD_MAGIC,
                               "disco__ipc_table_attach: magic %#" PRIx64 " version %" PRIu32
                               " (want %#" PRIx64 " version %u)",
                               magic, version, TABLE_MAGIC, TABLE_VERSION);
    if (nslots == 0 || nslots > (1u << 24) || bytes < disco__ipc_table_footprint(nslots))
        return disco_set_error(DISCO_E_INVAL,
                               "disco__ipc_table_attach: %" PRIu32 " slots need %zu bytes, got %zu",
                               nslots, disco__ipc_table_footprint(nslots), bytes);
    disco_ipc_table_t *t = handle_new(mem, nslots);
    if (t == NULL)
        return DISCO_E_NOMEM;
    *table_out = t;
    return DISCO_OK;
}

void disco__ipc_table_release(disco_ipc_table_t *t)
{
    free(t);
}

bool disco__ipc_table_is(const disco_ipc_table_t *t, const void *mem, uint32_t nslots)
{
    return t != NULL && (const void *)t->sh == mem && (nslots == 0 || t->nslots == nslots);
}

/* F1-F3 on a slot whose word is exp (LIVE or, for a dead exporter, FILLING).
 * Returns DISCO_OK (slot freed), DISCO_E_AGAIN (live holders: their count
 * and pids in *live and pids[]), DISCO_E_INVAL (the word was not exp). */
static disco_status_t slot_close(struct slot *s, uint64_t exp, uint32_t *live, int32_t *pids,
                                 size_t npids)
{
    uint64_t closing = (exp & ~UINT64_C(3)) | SLOT_CLOSING;
    /* F1: seq_cst, pairs with I2/I3 (Dekker: a claimer either sees CLOSING
     * or has its cell seen by F2). */
    if (!atomic_compare_exchange_strong(&s->word, &exp, closing))
        return DISCO_E_INVAL;
    uint32_t n = 0;
    for (unsigned c = 0; c < DISCO_IPC_MAX_IMPORTERS; c++) {
        int32_t pid = atomic_load(&s->importer[c]); /* F2: seq_cst, see F1 */
        if (pid == 0)
            continue;
        if (pid_alive(pid)) {
            if (n < npids)
                pids[n] = pid;
            n++;
        } else {
            /* A dead holder: its mapping died with it. CAS, so a cell that
             * changed meanwhile is left to its new owner. */
            atomic_compare_exchange_strong(&s->importer[c], &pid, 0);
        }
    }
    *live = n;
    if (n > 0) {
        /* Back to what it was; release: nothing was written meanwhile. */
        atomic_store_explicit(&s->word, exp, memory_order_release);
        return DISCO_E_AGAIN;
    }
    /* F3: release, pairs with the acquire of the next claimer's CAS. */
    atomic_store_explicit(&s->word, word_of(word_gen(exp) + 1, 0, SLOT_FREE), memory_order_release);
    return DISCO_OK;
}

/* Reclaims slots whose exporter died and that no live process holds.
 * Returns how many. */
static uint32_t table_reclaim(disco_ipc_table_t *t)
{
    uint32_t got = 0;
    for (uint32_t i = 0; i < t->nslots; i++) {
        uint64_t w = atomic_load_explicit(&t->sh->slots[i].word, memory_order_acquire);
        unsigned st = word_state(w);
        if ((st == SLOT_LIVE || st == SLOT_FILLING) && !pid_alive(word_pid(w))) {
            uint32_t live;
            int32_t pids[1];
            if (slot_close(&t->sh->slots[i], w, &live, pids, 1) == DISCO_OK)
                got++;
        }
    }
    return got;
}

/* Claims a FREE slot for pid (state FILLING). Returns its index, or
 * UINT32_MAX when every slot is taken. */
static uint32_t table_claim(disco_ipc_table_t *t, int32_t pid)
{
    for (int pass = 0; pass < 2; pass++) {
        /* The hint is shared (any value): it picks where to start, the
         * handle's own count bounds every index. */
        uint32_t start = atomic_load_explicit(&t->sh->hint, memory_order_relaxed) % t->nslots;
        for (uint32_t k = 0; k < t->nslots; k++) {
            uint32_t i = (start + k) % t->nslots;
            struct slot *s = &t->sh->slots[i];
            uint64_t w = atomic_load_explicit(&s->word, memory_order_relaxed);
            if (word_state(w) != SLOT_FREE)
                continue;
            /* acq_rel: acquire pairs with F3 of the slot's last owner. */
            if (atomic_compare_exchange_strong_explicit(
                    &s->word, &w, word_of(word_gen(w), pid, SLOT_FILLING), memory_order_acq_rel,
                    memory_order_relaxed)) {
                atomic_store_explicit(&t->sh->hint, (i + 1) % t->nslots, memory_order_relaxed);
                return i;
            }
        }
        if (pass == 0 && table_reclaim(t) == 0)
            break;
    }
    return UINT32_MAX;
}

uint32_t disco__ipc_table_nslots(const disco_ipc_table_t *t)
{
    return t->nslots;
}

uint32_t disco__ipc_slot_claim(disco_ipc_table_t *t, int32_t pid, uint32_t *gen_out)
{
    uint32_t i = table_claim(t, pid);
    if (i != UINT32_MAX)
        *gen_out = word_gen(atomic_load_explicit(&t->sh->slots[i].word, memory_order_relaxed));
    return i;
}

void disco__ipc_slot_abandon(disco_ipc_table_t *t, uint32_t slot, uint32_t gen)
{
    /* Same gen: nobody saw it LIVE. Release, pairs with the next claimer's
     * acquire as F3 does. */
    atomic_store_explicit(&t->sh->slots[slot].word, word_of(gen, 0, SLOT_FREE),
                          memory_order_release);
}

void disco__ipc_slot_publish(disco_ipc_table_t *t, uint32_t slot, uint32_t gen, int32_t pid,
                             int device_id, uint64_t bytes, const disco_ipc_handle_t *handle)
{
    struct slot *s = &t->sh->slots[slot];
    s->device_id = device_id;
    s->bytes = bytes;
    memcpy(s->handle, handle->bytes, sizeof s->handle);
    /* Publish: release, pairs with I1's acquire. */
    atomic_store_explicit(&s->word, word_of(gen, pid, SLOT_LIVE), memory_order_release);
}

disco_status_t disco__ipc_slot_close(disco_ipc_table_t *t, uint32_t slot, uint32_t gen, int32_t pid,
                                     uint32_t *live, int32_t *pids, size_t npids)
{
    if (slot >= t->nslots)
        return DISCO_E_INVAL;
    return slot_close(&t->sh->slots[slot], word_of(gen, pid, SLOT_LIVE), live, pids, npids);
}

/* R1: leaves the importer cell (after the handle is closed). Release: the
 * close happens before an exporter that reads 0 at F2 frees. */
void disco__ipc_slot_leave(disco_ipc_table_t *t, uint32_t slot, uint32_t cell)
{
    atomic_store_explicit(&t->sh->slots[slot].importer[cell], 0, memory_order_release);
}

disco_status_t disco__ipc_slot_join(disco_ipc_table_t *t, const disco_ipc_ref_t *ref, int32_t me,
                                    uint32_t *cell_out)
{
    if (ref->slot >= t->nslots) /* a ref is another process's word */
        return disco_set_error(
            DISCO_E_INVAL, "disco__ipc_import: bad ref: slot %" PRIu32 " of a table of %" PRIu32,
            ref->slot, t->nslots);
    struct slot *s = &t->sh->slots[ref->slot];
    uint64_t want = word_of(ref->gen, ref->exporter_pid, SLOT_LIVE);
    /* I1: acquire, pairs with the exporter's publishing store. */
    if (atomic_load_explicit(&s->word, memory_order_acquire) != want)
        goto stale;
    uint32_t c;
    for (c = 0; c < DISCO_IPC_MAX_IMPORTERS; c++) {
        int32_t zero = 0;
        if (atomic_compare_exchange_strong(&s->importer[c], &zero, me)) /* I2: seq_cst */
            break;
    }
    if (c == DISCO_IPC_MAX_IMPORTERS)
        return disco_set_error(DISCO_E_INVAL,
                               "disco__ipc_import: %d processes already import this allocation "
                               "(slot %" PRIu32 ")",
                               DISCO_IPC_MAX_IMPORTERS, ref->slot);
    /* I3: seq_cst, pairs with F1/F2. */
    if (atomic_load(&s->word) != want) {
        disco__ipc_slot_leave(t, ref->slot, c);
        goto stale;
    }
    /* I4: the fields are stable while we hold a cell. */
    if (s->bytes != ref->alloc_bytes || s->device_id != ref->device_id ||
        memcmp(s->handle, ref->handle.bytes, sizeof s->handle) != 0) {
        disco__ipc_slot_leave(t, ref->slot, c);
        return disco_set_error(DISCO_E_INVAL,
                               "disco__ipc_import: bad handle: the ref disagrees with slot %" PRIu32
                               " of pid %d (handle, size or device)",
                               ref->slot, (int)ref->exporter_pid);
    }
    *cell_out = c;
    return DISCO_OK;
stale:
    return disco_set_error(DISCO_E_INVAL,
                           "disco__ipc_import: stale ref: the allocation of pid %d in slot %" PRIu32
                           " gen %" PRIu32 " was freed or is being freed",
                           (int)ref->exporter_pid, ref->slot, ref->gen);
}

uint32_t disco__ipc_slot_importers(disco_ipc_table_t *t, uint32_t slot)
{
    struct slot *s = &t->sh->slots[slot];
    uint32_t n = 0;
    for (unsigned c = 0; c < DISCO_IPC_MAX_IMPORTERS; c++) {
        int32_t pid = atomic_load_explicit(&s->importer[c], memory_order_acquire);
        if (pid != 0 && pid_alive(pid))
            n++;
    }
    return n;
}
