/*
 * disco/worker.h - the worker process's entry point.
 *
 * A session in spawn launch mode (disco/session.h) starts each worker
 * 1..N-1 as a program of its own (its worker_path). That program's main()
 * hands its arguments to disco_worker_main, which attaches the control
 * segment the controller passed, serves the controller's commands and
 * returns when the session shuts down or the controller goes away.
 */
#ifndef DISCO_WORKER_H
#define DISCO_WORKER_H

#ifdef __cplusplus
extern "C" {
#endif

/** Entry point of a spawned worker process: a program whose main() returns
 *  disco_worker_main(argc, argv) can be a session's worker_path (the
 *  disco-worker tool is exactly that; link your own to have your functions
 *  registered without loading a library). Not thread-safe: call it once,
 *  from main. argv is what the controller passed (--disco-fd FD
 *  --disco-worker ID, and for pipes --disco-cmd-fd FD --disco-reply-fd FD);
 *  with only --help or -h it prints its usage and returns 0. Returns the
 *  process exit code: 0 after shutdown, 1 when the controller went away or
 *  broke the session, 2 on bad arguments or a setup error, 3 after a
 *  command it could not decode. */
int disco_worker_main(int argc, char **argv);

#ifdef __cplusplus
}
#endif
#endif
