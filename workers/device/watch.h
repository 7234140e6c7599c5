/* watch.h - what a device sync that blocks on this thread watches (internal).
 *
 * A stream sync can wait on another process (a stream waiting for a peer's
 * IPC event record): if that peer dies, the record may never complete. A
 * thread that sets a watch makes its syncs end the way every other wait
 * of disco ends: at the wait's deadline, its abort word, or its check
 * callback (a session's liveness check), with that status. CUDA: the sync
 * polls cudaStreamQuery between checks instead of blocking in
 * cudaStreamSynchronize. Sim: a wait for another process's record looks at
 * the watch between its sleeps. */
#ifndef DISCO_WORKERS_DEVICE_WATCH_H
#define DISCO_WORKERS_DEVICE_WATCH_H

#include "disco/shm/wait.h"
#include "disco/status.h"

/** Sets this thread's watch (NULL: none) and returns the previous one. The
 *  wait must outlive the watch. */
const disco_wait_t *disco__device_watch(const disco_wait_t *w);

/** This thread's watch, or NULL. */
const disco_wait_t *disco__device_watching(void);

/** One look at this thread's watch (DISCO_OK when none): the wait's exits,
 *  as disco_wait_check, each with a message (an abort word: "the session
 *  was broken"). */
disco_status_t disco__device_watch_check(void);

/** This thread's device sync has to wait (it found the device not done
 *  and goes to sleep or polls on): the watch's wait hook, if it has one
 *  with a since word (shm/wait_internal.h: worker 0's wait inside a
 *  collective, which the watchdog and `disco top` read), gets the wait's
 *  start, once, as a wait of the shm layer does; replacing the watch
 *  (disco__device_watch) clears it again. No-op without a watch. */
void disco__device_watch_waiting(void);

/** The first exit the watch gave since it was set (DISCO_OK: none): the
 *  sync that failed with it ended because of it, not on its own. */
disco_status_t disco__device_watch_fired(void);

#endif
