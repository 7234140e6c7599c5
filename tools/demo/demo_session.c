/* demo_session.c - disco-demo's second part: a Disco session calling a
 * loaded library on every worker, an error caught and reported, and the
 * session's latency over rings against pipes. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "disco/session.h"
#include "disco/shm/wait.h"
#include "tools/bench/bench_util.h"
#include "tools/demo/demo.h"

#define CHECK(call) DEMO_CHECK(call, return false)

void demo_library_path(char *out, size_t cap)
{
    char self[3000];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    self[n > 0 ? n : 0] = '\0';
    char *slash = strrchr(self, '/');
    if (slash != NULL)
        *slash = '\0';
    snprintf(out, cap, "%s/../lib/libdisco_demo.so", self);
}

static bool sum_on_all(disco_session_t *s, int n, int64_t k)
{
    disco_dref_t f, r;
    disco_value_t arg = disco_value_int(k);
    CHECK(disco_session_get_func(s, "demo.partial_sum", &f));
    CHECK(disco_session_call(s, f, &arg, 1, &r));
    int64_t total = 0;
    printf("  demo.partial_sum(%lld):", (long long)k);
    for (int w = 0; w < n; w++) {
        disco_value_t v;
        CHECK(disco_session_debug_get(s, r, w, &v));
        printf(" w%d=%lld", w, (long long)v.v.i);
        total += v.v.i;
    }
    int64_t want = k * (k + 1) / 2;
    printf("  total %lld %s\n", (long long)total, total == want ? "(correct)" : "(WRONG)");
    CHECK(disco_session_free_reg(s, r));
    CHECK(disco_session_free_reg(s, f));
    return total == want;
}

/* Median ns of a no-op call on every worker + sync of the last worker. */
static double call_sync_ns(disco_session_t *s, int n)
{
    disco_dref_t f, r[200];
    double v[11];
    if (disco_session_get_func(s, "disco.noop", &f) != DISCO_OK)
        return -1;
    for (int rep = 0; rep < 11; rep++) {
        int64_t t0 = disco_now_ns();
        for (int i = 0; i < 200; i++)
            if (disco_session_call(s, f, NULL, 0, &r[i]) != DISCO_OK ||
                disco_session_sync(s, n - 1) != DISCO_OK)
                return -1;
        v[rep] = (double)(disco_now_ns() - t0) / 200;
        for (int i = 0; i < 200; i++)
            disco_session_free_reg(s, r[i]);
    }
    return bu_median(v, 11);
}

bool demo_session(int n)
{
    char lib[3100];
    demo_library_path(lib, sizeof lib);
    printf("\nsession: %d workers (worker 0 is this process), library %s\n", n, lib);
    disco_session_config_t cfg = disco_session_config_default(n);
    disco_session_t *s;
    int64_t t0 = disco_now_ns();
    CHECK(disco_session_open(&cfg, &s));
    printf("  opened in %.2f ms; worker pids:", (double)(disco_now_ns() - t0) / 1e6);
    for (int w = 0; w < n; w++)
        printf(" %d", disco_session_worker_pid(s, w));
    printf("\n");

    disco_dref_t r;
    disco_value_t path = disco_value_str(lib);
    CHECK(disco_session_call_by_name(s, "disco.load_library", &path, 1, &r));
    CHECK(disco_session_sync(s, n - 1));
    CHECK(disco_session_free_reg(s, r));
    bool ok = sum_on_all(s, n, 1000) && sum_on_all(s, n, 10000000);

    /* An error on every worker, caught at the next sync, named per worker. */
    disco_value_t bad = disco_value_int(-5);
    CHECK(disco_session_call_by_name(s, "demo.partial_sum", &bad, 1, &r));
    disco_status_t st = DISCO_OK;
    for (int w = n - 1; w >= 0; w--) { /* syncing every worker collects every report */
        disco_status_t one = disco_session_sync(s, w);
        if (one != DISCO_OK) {
            printf("  caught: %s: %s\n", disco_err_name(one), disco_last_error());
            st = one;
        }
    }
    ok = ok && st == DISCO_E_REMOTE;
    printf("  the session is still usable after the error:\n");
    ok = sum_on_all(s, n, 77) && ok;
    double ring = call_sync_ns(s, n);
    disco_session_close(s);

    cfg.transport = DISCO_TRANSPORT_PIPE;
    CHECK(disco_session_open(&cfg, &s));
    double pipe = call_sync_ns(s, n);
    disco_session_close(s);
    printf("  no-op call on every worker + sync: rings %.0f ns, pipes %.0f ns (%.0fx)\n", ring,
           pipe, pipe / ring);
    printf("  (medians of 11 x 200)\n");
    return ok && ring > 0 && pipe > 0;
}
