/* text.c - copying text and codes that another process wrote (see text.h). */
#include "shm/text.h"

#include "disco/status.h"

char *disco__text_safe(char *dst, size_t cap, const void *src, size_t src_max)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *s = src;
    size_t o = 0;
    for (size_t i = 0; i < src_max && s[i] != '\0'; i++) {
        unsigned char c = s[i];
        if (c >= 0x20 && c <= 0x7e) {
            if (o + 1 >= cap)
                break;
            dst[o++] = (char)c;
        } else {
            if (o + 4 >= cap)
                break;
            dst[o++] = '\\';
            dst[o++] = 'x';
            dst[o++] = hex[c >> 4];
            dst[o++] = hex[c & 15];
        }
    }
    dst[o] = '\0';
    return dst;
}

bool disco__status_is_error(int64_t code)
{
    return code < 0 && code >= DISCO_STATUS_MIN;
}
