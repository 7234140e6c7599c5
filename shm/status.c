/* status.c - messages and thread-local context for disco_status_t. */
#include "disco/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define DISCO_DETAIL_MAX 512

static _Thread_local char detail[DISCO_DETAIL_MAX];

const char *disco_strerror(int status)
{
    switch (status) {
#define DISCO_STATUS_MSG(name, value, msg)                                                         \
    case value:                                                                                    \
        return msg;
        DISCO_STATUS_TABLE(DISCO_STATUS_MSG)
#undef DISCO_STATUS_MSG
    }
    return "unknown status";
}

const char *disco_err_name(int status)
{
    switch (status) {
#define DISCO_STATUS_NAME(name, value, msg)                                                        \
    case value:                                                                                    \
        return "DISCO_" #name;
        DISCO_STATUS_TABLE(DISCO_STATUS_NAME)
#undef DISCO_STATUS_NAME
    }
    return "DISCO_E_UNKNOWN";
}

const char *disco_last_error(void)
{
    return detail;
}

disco_status_t disco_set_error(disco_status_t status, const char *fmt, ...)
{
    /* Formatted apart, then copied: an argument may be the detail itself
     * ("ctx: %s", disco_last_error()), and vsnprintf into its own source
     * is undefined (it left the detail empty). */
    char buf[sizeof detail];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    memcpy(detail, buf, sizeof detail);
    return status;
}

void disco_clear_error(void)
{
    detail[0] = '\0';
}
