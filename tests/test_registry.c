/* test_registry.c - the function table (workers/core/registry.h) and the
 * lookup that puts the built-in libraries into it (workers/core/lookup.h). */
#include <check.h>
#include <string.h>

#include "workers/core/ctx.h"
#include "workers/core/lookup.h"
#include "workers/core/registry.h"
#include "tests/testutil.h"

static disco_status_t answer(disco_ctx_t *ctx, const disco_value_t *args, int nargs,
                             disco_value_t *ret)
{
    (void)ctx, (void)args, (void)nargs;
    *ret = disco_value_int(42);
    return DISCO_OK;
}

/* Runs the function registered as name with no worker and one argument. */
static disco_status_t run_named(const char *name, disco_value_t *ret_out)
{
    uint64_t h;
    disco_status_t st = disco__func_find(name, &h);
    if (st != DISCO_OK)
        return st;
    const struct disco__func *f = disco__func_at(h);
    ck_assert_msg(f != NULL && strcmp(f->name, name) == 0, "disco__func_at(%s)", name);
    disco_value_t arg = disco_value_int(7);
    return disco__func_run(f, NULL, &arg, 1, ret_out);
}

/* A lookup finds the functions of both built-in libraries (builtins.c and
 * the collectives) and refuses a name nobody registered. */
START_TEST(test_builtin_libs_found)
{
    uint64_t h;
    CK_OK(disco__func_find("disco.echo", &h));
    CK_OK(disco__func_find("disco.allreduce", &h));
    CK_OK(disco__func_find("disco.cpu_affinity", &h));
    CK_STATUS(disco__func_find("no.such.function", &h), DISCO_E_NO_FUNC);
    disco_value_t v = disco_value_null();
    CK_OK(run_named("disco.echo", &v));
    ck_assert_msg(v.type == DISCO_T_INT && v.v.i == 7, "disco.echo(7) gave type %u", v.type);
    /* A collective registers as needing a session worker: refused here. */
    CK_STATUS(run_named("disco.allreduce", &v), DISCO_E_INVAL);
}
END_TEST

/* The built-in libraries register once: a function registered afterwards
 * under a builtin's name replaces it, and later lookups (which make sure
 * the libraries are in) do not put the builtin back. */
START_TEST(test_libs_register_once)
{
    disco__builtins_init();
    CK_OK(disco_register_func("disco.echo", NULL, answer));
    for (int i = 0; i < 2; i++) {
        disco__builtins_init();
        disco_value_t v = disco_value_null();
        CK_OK(run_named("disco.echo", &v));
        ck_assert_msg(v.type == DISCO_T_INT && v.v.i == 42, "lookup %d: the builtin came back", i);
    }
}
END_TEST

Suite *suite_registry(void)
{
    Suite *s = suite_create("registry");
    TCase *tc = tcase_create("registry");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_builtin_libs_found);
    tcase_add_test(tc, test_libs_register_once);
    suite_add_tcase(s, tc);
    return s;
}
