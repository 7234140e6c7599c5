/* run_tests.c - runs every Check suite listed in suites.def, in fork mode.
 * Usage: run_tests [suite-name ...]   (no names: all suites) */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SUITE(name) Suite *suite_##name(void);
#include "tests/suites.def"
#undef SUITE

struct entry {
    const char *name;
    Suite *(*make)(void);
};

static const struct entry suites[] = {
#define SUITE(name) {#name, suite_##name},
#include "tests/suites.def"
#undef SUITE
};

static int wanted(const char *name, int argc, char **argv)
{
    if (argc <= 1)
        return 1;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], name) == 0)
            return 1;
    return 0;
}

int main(int argc, char **argv)
{
    setenv("DISCO_QUIET", "1", 0); /* no oversubscription warning per test */
    SRunner *sr = NULL;
    for (size_t i = 0; i < sizeof suites / sizeof suites[0]; i++) {
        if (!wanted(suites[i].name, argc, argv))
            continue;
        if (sr == NULL)
            sr = srunner_create(suites[i].make());
        else
            srunner_add_suite(sr, suites[i].make());
    }
    if (sr == NULL) {
        fprintf(stderr, "run_tests: no such suite\n");
        return 2;
    }
    /* Fork mode, unless CK_FORK=no asks otherwise (for debugging). */
    srunner_set_fork_status(sr, getenv("CK_FORK") != NULL ? CK_FORK_GETENV : CK_FORK);
    srunner_run_all(sr, CK_ENV); /* CK_VERBOSITY, default normal */
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
