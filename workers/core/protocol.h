/*
 * protocol.h - what the controller and the workers share (internal):
 * command codes, reply codes, and the layout of the control segment.
 *
 * Control segment, layout DISCO_CTL_LAYOUT. One function computes it,
 * disco__ctl_layout (ctl_layout.h), for the controller, which creates and
 * formats the segment, and for each worker, which recomputes it from the
 * geometry in the header (world, num_groups, transport, max_msg, tracing
 * on, heap_size) and refuses a header whose offsets differ or a layout that
 * does not fit the segment. The regions, in order, each from the segment's
 * data start (W = world; "next line": rounded up to 64 bytes):
 *
 *   region           what                               starts at       bytes
 *   header           struct disco__ctl                  0               sizeof
 *   error boxes      struct disco__errbox[W]            next line       W * sizeof
 *   command ring     one writer (controller), W-1       next line       ring footprint (1)
 *                    readers
 *   reply rings      W-1 rings, worker i -> controller, next line       (W-1) * stride (1)
 *                    ring i-1 at reply_off + (i-1) *                    stride: the ring's
 *                    reply_size                                         footprint, next line
 *   bindings         struct disco__bind[W]              next line       W * sizeof
 *   status           struct disco__stat_hdr, then       next line       disco__stat_size(W)
 *                    struct disco__wstat[W] (wstat.h)
 *   trace rings      struct disco__trace_ring[W-1],     next line (2)   (W-1) * sizeof
 *                    workers 1..W-1 (trace_ring.h)
 *   collective area  struct disco__coll_area, barriers, next line       disco__coll_footprint
 *                    slots, marks (collective.h), then, 64-aligned, the
 *                    device area: per-worker arena refs and the IPC
 *                    lifetime table (workers/data/arena.h)
 *   heap             the shared heap (disco/shm/heap.h) next page (3)   heap_size
 *
 * (1) Only with the ring transport and W > 1; else size 0 at the same place.
 * (2) Only with tracing on; else offset 0 (trace_off 0 says tracing is off).
 * (3) DISCO_CTL_HEAP_ALIGN; the segment ends with the heap.
 */
#ifndef DISCO_WORKERS_PROTOCOL_H
#define DISCO_WORKERS_PROTOCOL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "disco/shm/ring.h"
#include "disco/value.h"

/* Commands, numbered as TVM Disco's actions. Codes 5 and 6 (TVM's copies
 * to and from worker 0) are not commands here: copies go through the shared
 * heap (disco_session_copy_*), and a worker refuses the codes as unknown. */
enum disco__cmd {
    DISCO_CMD_SHUTDOWN = 0,
    DISCO_CMD_KILL_REG = 1,  /* [reg] */
    DISCO_CMD_GET_FUNC = 2,  /* [reg, name] */
    DISCO_CMD_CALL = 3,      /* [call head, args...] */
    DISCO_CMD_SYNC = 4,      /* [worker (DISCO_SYNC_ALL: every one), token] */
    DISCO_CMD_DEBUG_GET = 7, /* [reg, worker, token] */
    DISCO_CMD_DEBUG_SET = 8, /* [reg, worker, token, value] */
    /* 9 was a call carrying a free (layouts 11-12); a call's head carries
     * it now, and a worker refuses the code as unknown. */
    /* A call that every worker answers once it has run it (the head's
     * token): one SPMD step, call and sync, in one command
     * (disco_session_call_sync_all). */
    DISCO_CMD_CALL_SYNC = 10, /* [call head, args...] */
    DISCO_CMD_COUNT = 11,
};

/* Register ids run from 1 to DISCO_REG_LIMIT - 1: a worker refuses others,
 * the controller hands out no others, and a call head holds them in 32
 * bits. */
#define DISCO_REG_LIMIT (1u << 24)

/* The head of a call command: its first argument, a bytes value of exactly
 * sizeof (struct disco__call_head), in host order. One value for what were
 * three or four (kill, token, result, function, 16 bytes each) keeps a call
 * without arguments in a 48-byte frame, which with the ring slot's 16-byte
 * header is one cache line: a second line costs the reader one more
 * transfer from the writer's core, about 110 ns on the machines measured
 * (issue 21; bench `ring_rtt_ns` against `ring_rtt_48b_ns`). */
struct disco__call_head {
    uint32_t kill;   /* a register to free before the call (a free riding), or 0 */
    uint32_t result; /* the register the call's value goes into */
    uint32_t func;   /* the register holding the function */
    uint32_t zero;   /* 0: a worker refuses a head with it set */
    int64_t token;   /* DISCO_CMD_CALL_SYNC: the answer's token; else 0 */
};

/** Whether code is a call command (its first argument is a call head). */
static inline bool disco__cmd_is_call(uint32_t code)
{
    return code == DISCO_CMD_CALL || code == DISCO_CMD_CALL_SYNC;
}

/** The call head value pointing at *hd (which must outlive its use). */
static inline disco_value_t disco__call_head_value(const struct disco__call_head *hd)
{
    return disco_value_bytes(hd, (uint32_t)sizeof *hd);
}

/** Reads the head of a call command (args: its arguments) into *out.
 *  Returns false, *out untouched, when code is not a call or its first
 *  argument is not a head of the right size. */
static inline bool disco__call_head_read(uint32_t code, const disco_value_t *args, uint32_t nargs,
                                         struct disco__call_head *out)
{
    if (!disco__cmd_is_call(code) || nargs < 1 || args[0].type != DISCO_T_BYTES ||
        args[0].len != sizeof *out)
        return false;
    memcpy(out, args[0].v.bytes, sizeof *out);
    return true;
}

/* A sync that every worker answers (disco_session_sync_all). */
#define DISCO_SYNC_ALL (-1)

/* Replies, worker -> controller. */
enum disco__reply {
    DISCO_REPLY_OK = 100,    /* [token] or [token, value] */
    DISCO_REPLY_ERROR = 101, /* [token, status, message] */
};

#define DISCO_CTL_MAGIC 0x4c544343534944ULL /* "DISCCTL" */
#define DISCO_CTL_LAYOUT                                                                           \
    19u /* 13: call heads; 14: kernel progress in the status;                                      \
           15: collective identity, marks, p2p posts;                                              \
           16: inline inputs in the collective slots;                                              \
           17: a forwarding post in each p2p post (comm_fwd.h);                                    \
           18: the forwarding post's nth and command start;                                        \
           19: sends across nodes in pieces (forwarders' GO and PIECE);                            \
               a failed send's status and words in the p2p post */
#define DISCO_ERR_MSG_MAX        384
#define DISCO_MAX_ARGS           64
#define DISCO_MAX_WORKERS        255   /* on one node */
#define DISCO_MAX_GLOBAL_WORKERS 65535 /* on every node together */
#define DISCO_CTL_MIN_MSG        256u
#define DISCO_CTL_MAX_MSG        (1u << 30) /* 1 GiB: a command, not a data path */
#define DISCO_CTL_HEAP_ALIGN     4096u

/* A worker's first unreported error since the controller last looked. The
 * worker fills it and sets full (release); the controller reads it after
 * seeing full (acquire) and clears full (release) when done; the worker
 * writes only after seeing full == 0 (acquire). */
struct disco__errbox {
    _Alignas(64) _Atomic uint32_t full;
    _Atomic uint32_t dropped; /* errors after the first, not kept */
    int32_t code;
    uint32_t reserved;
    uint64_t seq;
    char func[128];
    char msg[DISCO_ERR_MSG_MAX];
};

struct disco__ctl {
    _Alignas(64) uint64_t magic;
    uint32_t layout;
    uint32_t world;
    uint32_t transport;
    uint32_t max_msg;
    int32_t controller_pid;
    uint32_t gid_base; /* this node's first global worker id (scheduler/node/) */
    uint64_t spin_ns;  /* workers' wait settings */
    uint64_t pause_ns;
    uint64_t errbox_off; /* offsets from the segment data start */
    uint64_t cmd_off;
    uint64_t cmd_size;
    uint64_t reply_off;
    uint64_t reply_size; /* each */
    uint64_t coll_off;   /* collective area */
    uint64_t heap_off;   /* shared heap */
    uint64_t heap_size;
    uint32_t num_groups;
    uint32_t gworld;  /* workers in the whole session, every node's; = world on one node */
    uint32_t ggroups; /* groups in the whole session: 1 across nodes is one group of everyone */
    uint32_t reserved;
    uint64_t bind_off;   /* struct disco__bind[world] */
    uint64_t status_off; /* the status region (wstat.h) */
    uint64_t trace_off;  /* struct disco__trace_ring[world - 1], or 0: tracing off */
    /* Nonzero: the session is broken or shut down (a negative status).
     * Workers watch it as their waits' abort word. */
    _Alignas(64) _Atomic int32_t broken;
};

/* Where a worker binds itself at start (from the placement plan, written
 * before the workers start, read-only afterwards): hwloc list strings, ""
 * for no binding. */
struct disco__bind {
    char cpus[256];
    char nodes[256];
};

#define DISCO_REPLY_SLOTS 16u
#define DISCO_REPLY_MAX   (1u << 20)
#define DISCO_CMD_SLOTS   256u
/* Workers publish their command-ring cursor every DISCO_CMD_BATCH slots
 * (and before they wait): disco/shm/ring.h, "Publishing in batches". */
#define DISCO_CMD_BATCH   32u
#define DISCO_SLOT_SIZE   128u

#endif
