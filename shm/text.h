/*
 * text.h - strings and status codes that another process wrote (internal).
 *
 * A worker's error mailbox, its error replies and an RPC peer's exceptions
 * carry text and a status code that the reading process did not write: a
 * worker that is corrupt or hostile may leave a field without its
 * terminator, fill it with terminal control sequences, or post a code that
 * is no error at all. The reader copies such text with disco__text_safe and
 * checks such codes with disco__status_is_error before using either.
 *
 * Thread-safe: pure functions.
 */
#ifndef DISCO_SHM_TEXT_H
#define DISCO_SHM_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** Copies the text at src into dst (cap bytes, cap >= 1), reading at most
 *  src_max bytes of src and stopping at its first NUL: src need not be
 *  terminated. dst is always terminated. Printable ASCII (0x20..0x7e) is
 *  copied; every other byte is written as the four characters "\xNN", so
 *  the copy cannot carry control sequences to a terminal or a log. A copy
 *  that does not fit is cut at a whole character or escape. Returns dst. */
char *disco__text_safe(char *dst, size_t cap, const void *src, size_t src_max);

/** Whether code is an error status of disco's table (negative, at least
 *  DISCO_STATUS_MIN). */
bool disco__status_is_error(int64_t code);

#endif
