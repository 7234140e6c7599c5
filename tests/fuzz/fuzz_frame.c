/* fuzz_frame.c - libFuzzer target for the frame codec (workers/value/value.c).
 * Any input either fails to decode with an error, or decodes to values that
 * encode back and decode again to the same values (the oracle). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "disco/value.h"

#define MAX_ARGS 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* frames are decoded from 8-aligned buffers */
    uint64_t *buf = malloc(size + 8);
    if (buf == NULL)
        return 0;
    memcpy(buf, data, size);
    disco_frame_hdr_t h;
    disco_value_t args[MAX_ARGS];
    if (disco_frame_decode(buf, size, &h, args, MAX_ARGS) == DISCO_OK) {
        size_t cap = size + 64, len;
        uint64_t *again = malloc(cap);
        if (again == NULL)
            abort();
        if (disco_frame_encode(h.code, h.seq, args, h.nargs, again, cap, &len) != DISCO_OK)
            abort(); /* what decodes must encode */
        disco_frame_hdr_t h2;
        disco_value_t args2[MAX_ARGS];
        if (disco_frame_decode(again, len, &h2, args2, MAX_ARGS) != DISCO_OK || h2.code != h.code ||
            h2.seq != h.seq || h2.nargs != h.nargs)
            abort();
        for (uint32_t i = 0; i < h.nargs; i++)
            if (!disco_value_equal(&args[i], &args2[i]))
                abort();
        free(again);
    }
    free(buf);
    return 0;
}
