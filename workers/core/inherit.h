/* inherit.h - what a worker process keeps of what it inherited (internal).
 *
 * A forked worker inherits every fd of the controller: the application's
 * sockets and files, other sessions' segments and pidfds, RPC connections.
 * Holding them would keep a peer from seeing end of file and keep closed
 * sessions' memory alive, so a worker closes all but the fds it needs right
 * after fork (and a spawned worker is exec'd with only its own). */
#ifndef DISCO_WORKERS_INHERIT_H
#define DISCO_WORKERS_INHERIT_H

/** Closes every fd of the calling process except 0, 1, 2 and the n fds in
 *  keep (negative entries are ignored; keep is sorted in place). Uses
 *  close_range where the kernel has it (5.9), else walks /proc/self/fd,
 *  else closes each number up to the fd limit. Only system calls: safe in a
 *  child just forked from a multithreaded parent. Returns 0, or -1 if some
 *  fd may have stayed open (no close_range, no /proc and no fd limit). */
int disco__close_fds_except(int *keep, int n);

/** The fallback of disco__close_fds_except where close_range is missing:
 *  closes every fd listed in /proc/self/fd except 0-2 and keep (in any
 *  order). Returns 0, or -1 without /proc. Exposed for its test. */
int disco__close_fds_listed(const int *keep, int n);

#endif
