/* _lock.c - a session's lock and the work collection leaves pending for it,
 * and raising disco statuses as the package's exceptions (see _core.h). */
#include "_core.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- errors ---- */

PyObject *dp_raise_msg(disco_status_t st, const char *msg)
{
    PyObject *cls = NULL;
    if (dp_error_classes != NULL) {
        PyObject *key = PyLong_FromLong(st);
        cls = key ? PyDict_GetItemWithError(dp_error_classes, key) : NULL;
        Py_XDECREF(key);
        if (cls == NULL && PyErr_Occurred())
            return NULL;
    }
    if (cls == NULL)
        cls = dp_DiscoError != NULL ? dp_DiscoError : PyExc_RuntimeError;
    PyObject *exc = PyObject_CallFunction(cls, "si", msg, (int)st);
    if (exc == NULL)
        return NULL;
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_DECREF(exc);
    return NULL;
}

PyObject *dp_raise(disco_status_t st)
{
    char msg[1024];
    const char *detail = disco_last_error();
    snprintf(msg, sizeof msg, "%s", detail[0] != '\0' ? detail : disco_strerror(st));
    return dp_raise_msg(st, msg);
}

/* ---- the session's lock and pending work ---- */

/* Frees and releases what collection left for later; the first failure is
 * returned with its message in disco_last_error(). Lock held. */
static disco_status_t flush(SessionObject *so)
{
    disco_status_t first = DISCO_OK;
    char why[512] = "";
    while (so->npviews > 0) {
        DLManagedTensor *v = so->pviews[--so->npviews];
        v->deleter(v);
    }
    while (so->npending > 0) {
        disco_status_t st = disco_session_free_reg(so->s, so->pending[--so->npending]);
        if (st != DISCO_OK && st != DISCO_E_BROKEN && st != DISCO_E_SHUTDOWN && first == DISCO_OK) {
            first = st;
            snprintf(why, sizeof why, "%s", disco_last_error());
        }
    }
    if (first != DISCO_OK)
        disco_set_error(first, "%s", why);
    return first;
}

/* The session's lock is a flag that only threads holding the GIL read or
 * write, so a plain store takes it: the GIL orders every access. A thread
 * that finds it taken (its holder runs C code without the GIL) polls it
 * with the GIL released, yielding, then sleeping 50 us between looks:
 * threads rarely share a session, and a sleeping waiter costs the holder
 * nothing. */
int dp_lock(SessionObject *so)
{
    if (so->busy && so->owner == PyThread_get_thread_ident()) {
        PyErr_SetString(PyExc_RuntimeError,
                        "disco: this thread is inside a call of this session (a Python "
                        "function running on worker 0 cannot use its own session)");
        return -1;
    }
    for (int spins = 0; so->busy; spins++) {
        Py_BEGIN_ALLOW_THREADS if (spins < 100) sched_yield();
        else usleep(50);
        Py_END_ALLOW_THREADS
    }
    so->busy = true;
    so->owner = PyThread_get_thread_ident();
    return 0;
}

static bool trylock(SessionObject *so)
{
    if (so->busy)
        return false;
    so->busy = true;
    so->owner = PyThread_get_thread_ident();
    return true;
}

static void unlock(SessionObject *so)
{
    so->busy = false;
}

int dp_enter(SessionObject *so)
{
    if (so->pid != dp_pid) {
        PyErr_Format(PyExc_RuntimeError,
                     "disco: this session belongs to process %d (this is %d, a worker or a "
                     "fork): use it from the process that opened it",
                     (int)so->pid, (int)dp_pid);
        return -1;
    }
    if (dp_lock(so) < 0)
        return -1;
    if (so->s == NULL) {
        unlock(so);
        dp_raise_msg(DISCO_E_SHUTDOWN, "session is closed");
        return -1;
    }
    if (so->deferred != DISCO_OK) {
        disco_status_t st = so->deferred;
        so->deferred = DISCO_OK;
        unlock(so);
        dp_raise_msg(st, so->deferred_msg);
        return -1;
    }
    if (so->npending + so->npviews > 0) {
        disco_status_t st = flush(so);
        if (st != DISCO_OK) {
            unlock(so);
            dp_raise(st);
            return -1;
        }
    }
    return 0;
}

void dp_leave(SessionObject *so)
{
    unlock(so);
}

static int grow(void **arr, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap)
        return 0;
    size_t c = *cap ? *cap * 2 : 16;
    void *p = PyMem_Realloc(*arr, c * elem);
    if (p == NULL)
        return -1;
    *arr = p;
    *cap = c;
    return 0;
}

void dp_release_reg(SessionObject *so, uint64_t reg)
{
    if (so->s == NULL || so->shut || so->pid != dp_pid)
        return;
    if (trylock(so)) {
        disco_status_t st = disco_session_free_reg(so->s, reg);
        /* The cause of a break is what the user's next call must see:
         * kept for it instead of lost in a destructor. */
        if (st != DISCO_OK && st != DISCO_E_BROKEN && st != DISCO_E_SHUTDOWN &&
            so->deferred == DISCO_OK) {
            so->deferred = st;
            snprintf(so->deferred_msg, sizeof so->deferred_msg, "%s", disco_last_error());
        }
        unlock(so);
        return;
    }
    if (grow((void **)&so->pending, &so->cap_pending, so->npending, sizeof *so->pending) == 0)
        so->pending[so->npending++] = reg;
}

void dp_release_view(SessionObject *so, DLManagedTensor *view)
{
    if (so->s == NULL || so->pid != dp_pid)
        return; /* a fork's copy, or the heap is gone with the session */
    if (trylock(so)) {
        view->deleter(view);
        unlock(so);
        return;
    }
    if (grow((void **)&so->pviews, &so->cap_pviews, so->npviews, sizeof *so->pviews) == 0)
        so->pviews[so->npviews++] = view;
}
