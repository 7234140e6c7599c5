/* test_segment.c - memfd segments: create, attach, refusal of bad input, cleanup. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "disco/shm/segment.h"
#include "shm/prefault.h"
#include "tests/testutil.h"

#define MiB (1024u * 1024u)

/* Fills n bytes with a pattern that depends on the offset and a seed. */
static void fill_pattern(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(i * 131u + seed + (i >> 12));
}

static int check_pattern(const unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)(i * 131u + seed + (i >> 12)))
            return 0;
    return 1;
}

static int is_cloexec(int fd)
{
    int fl = fcntl(fd, F_GETFD);
    return fl >= 0 && (fl & FD_CLOEXEC) != 0;
}

/* A memfd that is not a segment: n bytes of 0xA5. */
static int garbage_memfd(size_t n)
{
    int fd = memfd_create("disco-test-garbage", MFD_CLOEXEC);
    ck_assert_msg(fd >= 0, "memfd_create: %s", strerror(errno));
    if (n != 0) {
        ck_assert_msg(ftruncate(fd, (off_t)n) == 0, "ftruncate: %s", strerror(errno));
        unsigned char *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        ck_assert_msg(p != MAP_FAILED, "mmap: %s", strerror(errno));
        memset(p, 0xA5, n);
        munmap(p, n);
    }
    return fd;
}

/* Whether /proc/self/maps shows a mapping of "memfd:<name>". */
static int maps_show(const char *name)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (f == NULL)
        return 0;
    char want[128], line[512];
    snprintf(want, sizeof want, "memfd:%s", name);
    int found = 0;
    while (!found && fgets(line, sizeof line, f) != NULL)
        found = strstr(line, want) != NULL;
    fclose(f);
    return found;
}

/* A new segment is page-aligned, at least as large as asked, zero-filled,
 * fully allocated (fallocate), close-on-exec and named in /proc/self/maps. */
START_TEST(test_create_basic)
{
    disco_segment_t seg;
    CK_OK(disco_segment_create("disco-test-basic", 3 * MiB + 5, &seg));
    long page = sysconf(_SC_PAGESIZE);
    ck_assert_msg(seg.fd >= 0, "disco_segment_create: fd %d", seg.fd);
    ck_assert_msg((uintptr_t)seg.base % (uintptr_t)page == 0, "base %p not page-aligned", seg.base);
    ck_assert_msg((uintptr_t)disco_segment_data(&seg) % (uintptr_t)page == 0, "data not aligned");
    ck_assert_msg(disco_segment_data_size(&seg) >= 3 * MiB + 5, "data size %zu",
                  disco_segment_data_size(&seg));
    ck_assert_msg(seg.size % (size_t)page == 0, "size %zu not whole pages", seg.size);
    ck_assert_msg(is_cloexec(seg.fd), "segment fd %d is not close-on-exec", seg.fd);

    const unsigned char *d = disco_segment_data(&seg);
    size_t i = 0;
    while (i < disco_segment_data_size(&seg) && d[i] == 0)
        i++;
    ck_assert_msg(i == disco_segment_data_size(&seg), "data byte %zu is %u, want 0", i, d[i]);

    struct stat sb;
    ck_assert_int_eq(fstat(seg.fd, &sb), 0);
    ck_assert_msg((uint64_t)sb.st_size == seg.size, "file size %jd, mapped %zu",
                  (intmax_t)sb.st_size, seg.size);
    ck_assert_msg((uint64_t)sb.st_blocks * 512 >= seg.size,
                  "only %jd blocks allocated for %zu bytes: not backed at creation",
                  (intmax_t)sb.st_blocks, seg.size);
    ck_assert_msg(maps_show("disco-test-basic"), "/proc/self/maps lacks memfd:disco-test-basic");
    disco_segment_close(&seg);

    /* NULL name is allowed. */
    CK_OK(disco_segment_create(NULL, 1, &seg));
    ck_assert_msg(disco_segment_data_size(&seg) >= 1, "data size %zu", seg.size);
    disco_segment_close(&seg);
}
END_TEST

/* A forked child attaches by fd at a new address and reads what the parent
 * wrote; the parent reads the child's reply through its own mapping. */
START_TEST(test_attach_in_child)
{
    const size_t n = 2 * MiB;
    disco_segment_t seg;
    CK_OK(disco_segment_create("disco-test-child", 2 * n, &seg));
    unsigned char *d = disco_segment_data(&seg);
    fill_pattern(d, n, 7);

    pid_t pid = tu_fork();
    if (pid == 0) {
        disco_segment_t mine;
        disco_status_t st = disco_segment_attach(seg.fd, &mine);
        if (st != DISCO_OK)
            tu_child_fail("disco_segment_attach: %s (%s)", disco_err_name(st), disco_last_error());
        if (mine.base == seg.base)
            tu_child_fail("attach mapped at the inherited address %p", mine.base);
        if (mine.size != seg.size)
            tu_child_fail("attach size %zu, want %zu", mine.size, seg.size);
        unsigned char *md = disco_segment_data(&mine);
        if (!check_pattern(md, n, 7))
            tu_child_fail("parent's data differs in the attached mapping");
        fill_pattern(md + n, n, 11);
        disco_segment_close(&mine);
        _exit(0);
    }
    tu_wait_ok(pid, "attaching child");
    ck_assert_msg(check_pattern(d + n, n, 11), "child's reply not visible in the parent");
    disco_segment_close(&seg);
}
END_TEST

/* Attaching in the same process maps the segment a second time at another
 * address with its own close-on-exec fd; both views share the bytes, and the
 * attachment outlives the original handle. */
START_TEST(test_attach_same_process)
{
    disco_segment_t a, b;
    CK_OK(disco_segment_create("disco-test-twice", 64 * 1024, &a));
    CK_OK(disco_segment_attach(a.fd, &b));
    ck_assert_msg(b.base != a.base, "disco_segment_attach: same address %p", b.base);
    ck_assert_msg(b.fd != a.fd && b.fd >= 0, "disco_segment_attach: fd %d (original %d)", b.fd,
                  a.fd);
    ck_assert_msg(is_cloexec(b.fd), "attached fd %d is not close-on-exec", b.fd);
    ck_assert_uint_eq(b.size, a.size);
    ck_assert_uint_eq(disco_segment_data_size(&b), disco_segment_data_size(&a));

    size_t n = disco_segment_data_size(&a);
    fill_pattern(disco_segment_data(&a), n, 3);
    ck_assert_msg(check_pattern(disco_segment_data(&b), n, 3), "write via a not seen via b");
    fill_pattern(disco_segment_data(&b), n, 5);
    ck_assert_msg(check_pattern(disco_segment_data(&a), n, 5), "write via b not seen via a");

    disco_segment_close(&a);
    ck_assert_msg(check_pattern(disco_segment_data(&b), n, 5), "data lost after closing a");
    /* The attached handle still attaches further (its fd stayed open). */
    disco_segment_t c;
    CK_OK(disco_segment_attach(b.fd, &c));
    ck_assert_msg(check_pattern(disco_segment_data(&c), n, 5), "data differs in c");
    disco_segment_close(&c);
    disco_segment_close(&b);
}
END_TEST

/* A memfd that is not a segment (garbage, too small, empty) gives
 * DISCO_E_BAD_MAGIC, leaves *seg_out alone and leaks no fd or mapping. */
START_TEST(test_attach_bad_magic)
{
    const size_t sizes[] = {8192, 4096, 100, 0};
    int fds_before = tu_open_fds();
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        int fd = garbage_memfd(sizes[i]);
        disco_segment_t seg = {.fd = -7, .base = NULL, .size = 99};
        CK_STATUS(disco_segment_attach(fd, &seg), DISCO_E_BAD_MAGIC);
        ck_assert_msg(disco_last_error()[0] != '\0', "disco_segment_attach: no detail");
        ck_assert_msg(seg.fd == -7 && seg.base == NULL && seg.size == 99,
                      "disco_segment_attach: wrote *seg_out on failure (size %zu)", sizes[i]);
        close(fd);
    }
    ck_assert_int_eq(tu_open_fds(), fds_before);
}
END_TEST

/* A real segment whose layout word or file size no longer matches is refused. */
START_TEST(test_attach_bad_layout_or_size)
{
    disco_segment_t seg, other;
    CK_OK(disco_segment_create("disco-test-layout", 4096, &seg));
    /* The header is magic (8 bytes) then the layout version (4 bytes). */
    uint32_t *layout = (uint32_t *)((char *)seg.base + 8);
    ck_assert_uint_eq(*layout, DISCO_SEGMENT_LAYOUT);
    *layout = DISCO_SEGMENT_LAYOUT + 1;
    CK_STATUS(disco_segment_attach(seg.fd, &other), DISCO_E_BAD_MAGIC);
    *layout = DISCO_SEGMENT_LAYOUT;
    CK_OK(disco_segment_attach(seg.fd, &other));
    disco_segment_close(&other);

    /* The size in the header disagrees with the file. */
    uint64_t *size = (uint64_t *)((char *)seg.base + 16);
    *size += 4096;
    CK_STATUS(disco_segment_attach(seg.fd, &other), DISCO_E_BAD_MAGIC);
    *size -= 4096;
    disco_segment_close(&seg);
}
END_TEST

/* A segment is sealed at its size from its creation: neither a shrink (which
 * would SIGBUS every mapping of it) nor a growth is possible, for a full or
 * a partial (lazily backed) segment, whose holes can still be backed. */
START_TEST(test_segment_sealed)
{
    disco_segment_t seg;
    for (int partial = 0; partial < 2; partial++) {
        if (partial)
            CK_OK(disco_segment_create_partial("disco-test-seal", 1 << 20, 4096, &seg));
        else
            CK_OK(disco_segment_create("disco-test-seal", 1 << 20, &seg));
        int seals = fcntl(seg.fd, F_GET_SEALS);
        ck_assert_int_eq(seals & (F_SEAL_SHRINK | F_SEAL_GROW), F_SEAL_SHRINK | F_SEAL_GROW);
        ck_assert_int_ne(ftruncate(seg.fd, 4096), 0);
        ck_assert_int_eq(errno, EPERM);
        ck_assert_int_ne(ftruncate(seg.fd, (off_t)seg.size + 4096), 0);
        ck_assert_int_eq(errno, EPERM);
        CK_OK(disco_segment_back(&seg, 8192, 65536));
        memset((char *)disco_segment_data(&seg) + 8192, 1, 65536);
        disco_segment_close(&seg);
    }
}
END_TEST

/* A memfd with a well-formed segment header but no seals is refused before
 * it is mapped: its maker could truncate it under the mapping. */
START_TEST(test_attach_refuses_unsealed)
{
    disco_segment_t seg, other;
    CK_OK(disco_segment_create("disco-test-unsealed", 4096, &seg));
    int fd = memfd_create("disco-test-unsealed", MFD_CLOEXEC);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, (off_t)seg.size), 0);
    ck_assert_int_eq(pwrite(fd, seg.base, 4096, 0), 4096); /* the very header */
    CK_STATUS(disco_segment_attach(fd, &other), DISCO_E_BAD_MAGIC);
    ck_assert_ptr_nonnull(strstr(disco_last_error(), "not sealed"));
    CK_STATUS(disco_segment_attach_readonly(fd, &other), DISCO_E_BAD_MAGIC);
    close(fd);
    disco_segment_close(&seg);
}
END_TEST

/* An fd that is not open gives DISCO_E_SYS. */
START_TEST(test_attach_bad_fd)
{
    disco_segment_t seg;
    CK_STATUS(disco_segment_attach(-1, &seg), DISCO_E_SYS);
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    close(p[0]);
    close(p[1]);
    CK_STATUS(disco_segment_attach(p[0], &seg), DISCO_E_SYS);
}
END_TEST

/* Reads MemAvailable from /proc/meminfo in bytes (0 if absent). */
static uint64_t mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (f == NULL)
        return 0;
    char line[256];
    uint64_t kb = 0;
    while (fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "MemAvailable: %" SCNu64 " kB", &kb) == 1)
            break;
    fclose(f);
    return kb * 1024;
}

/* Sizes that cannot be backed (1 << 50, MemAvailable + 1 GiB) fail at creation
 * with DISCO_E_NOSPACE and a message: no SIGBUS later, no fd leaked, *seg_out
 * untouched. */
START_TEST(test_create_absurd_size)
{
    uint64_t avail = mem_available();
    ck_assert_msg(avail != 0, "no MemAvailable in /proc/meminfo");
    const uint64_t sizes[] = {1ULL << 50, avail + (1ULL << 30)};
    int fds_before = tu_open_fds();
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        disco_segment_t seg = {.fd = -7, .base = NULL, .size = 99};
        disco_clear_error();
        CK_STATUS(disco_segment_create("disco-test-huge", (size_t)sizes[i], &seg), DISCO_E_NOSPACE);
        ck_assert_msg(disco_last_error()[0] != '\0',
                      "disco_segment_create(%" PRIu64 "): DISCO_E_NOSPACE without a message",
                      sizes[i]);
        ck_assert_msg(seg.fd == -7 && seg.base == NULL && seg.size == 99,
                      "disco_segment_create: wrote *seg_out on failure");
    }
    ck_assert_int_eq(tu_open_fds(), fds_before);
}
END_TEST

/* A size whose page rounding would overflow fails instead of wrapping to a
 * tiny segment. */
START_TEST(test_create_overflow_size)
{
    disco_segment_t seg;
    int st = disco_segment_create("disco-test-overflow", SIZE_MAX, &seg);
    ck_assert_msg(st == DISCO_E_INVAL || st == DISCO_E_NOSPACE,
                  "disco_segment_create(SIZE_MAX): %s (%s)", disco_err_name(st),
                  disco_last_error());
    st = disco_segment_create("disco-test-overflow", SIZE_MAX - 4096, &seg);
    ck_assert_msg(st == DISCO_E_INVAL || st == DISCO_E_NOSPACE,
                  "disco_segment_create(SIZE_MAX - 4096): %s (%s)", disco_err_name(st),
                  disco_last_error());
}
END_TEST

/* Size 0 is DISCO_E_INVAL with a message. */
START_TEST(test_create_size_zero)
{
    disco_segment_t seg;
    disco_clear_error();
    CK_STATUS(disco_segment_create("disco-test-zero", 0, &seg), DISCO_E_INVAL);
    ck_assert_msg(disco_last_error()[0] != '\0', "disco_segment_create(0): no message");
}
END_TEST

/* Closing twice, or closing a zeroed handle, is harmless: the second close
 * does not close some other fd that reused the number, nor fd 0. */
START_TEST(test_close_twice)
{
    disco_segment_t seg;
    CK_OK(disco_segment_create("disco-test-close", 4096, &seg));
    int fd = seg.fd;
    disco_segment_close(&seg);
    ck_assert_msg(fcntl(fd, F_GETFD) < 0 && errno == EBADF, "fd %d still open after close", fd);
    ck_assert_msg(seg.base == NULL && seg.fd == -1, "close left base %p fd %d", seg.base, seg.fd);

    int p[2];
    ck_assert_int_eq(pipe(p), 0); /* likely reuses fd's number */
    disco_segment_close(&seg);
    ck_assert_msg(fcntl(p[0], F_GETFD) >= 0 && fcntl(p[1], F_GETFD) >= 0,
                  "second disco_segment_close closed an unrelated fd");

    int fd0 = fcntl(0, F_GETFD);
    disco_segment_t zero;
    memset(&zero, 0, sizeof zero);
    disco_segment_close(&zero);
    ck_assert_msg(fcntl(0, F_GETFD) == fd0, "closing a zeroed handle closed fd 0");
    close(p[0]);
    close(p[1]);
}
END_TEST

/* Segments never appear in /dev/shm: not while open, not after close. */
START_TEST(test_nothing_in_dev_shm)
{
    int before = tu_dev_shm_disco_entries();
    ck_assert_msg(before == 0, "%d disco entries in /dev/shm before the test", before);
    disco_segment_t a, b;
    CK_OK(disco_segment_create("disco-test-shm", 1 * MiB, &a));
    CK_OK(disco_segment_attach(a.fd, &b));
    ck_assert_int_eq(tu_dev_shm_disco_entries(), 0);
    disco_segment_close(&b);
    disco_segment_close(&a);
    ck_assert_int_eq(tu_dev_shm_disco_entries(), 0);
}
END_TEST

/* The fd does not survive exec: an exec'd shell cannot see it. */
START_TEST(test_fd_cloexec_across_exec)
{
    disco_segment_t seg;
    CK_OK(disco_segment_create("disco-test-exec", 4096, &seg));
    ck_assert_msg(is_cloexec(seg.fd), "segment fd %d is not close-on-exec", seg.fd);
    pid_t pid = tu_fork();
    if (pid == 0) {
        char arg[64];
        /* Exits 0 only if the fd is closed in the exec'd program. */
        snprintf(arg, sizeof arg, "[ ! -e /proc/self/fd/%d ]", seg.fd);
        execl("/bin/sh", "sh", "-c", arg, (char *)NULL);
        _exit(127);
    }
    tu_wait_ok(pid, "exec'd shell testing the fd");
    disco_segment_close(&seg);
}
END_TEST

static void exit_segv(int sig)
{
    (void)sig;
    _exit(42);
}

/* Hot memory (shm/prefault.h) is zeroed, resident before any store, and
 * not mapped in a child forked later: touching it there is a SIGSEGV, not
 * a copy of each page at the parent's next store. disco__prefault makes a
 * hole of a shared file resident and allocated, inside the range only. */
START_TEST(test_hot_memory)
{
    long page = sysconf(_SC_PAGESIZE);
    size_t len = 64 * (size_t)page;
    unsigned char *p = disco__hot_alloc(len);
    ck_assert_ptr_nonnull(p);
    unsigned char vec[64];
    ck_assert_int_eq(mincore(p, len, vec), 0);
    for (int i = 0; i < 64; i++)
        ck_assert_msg(vec[i] & 1, "page %d is not resident", i);
    for (size_t i = 0; i < len; i += 997)
        ck_assert_int_eq(p[i], 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) { /* its own handler: a sanitizer's would report and exit 1 */
        signal(SIGSEGV, exit_segv);
        volatile unsigned char c = p[0];
        (void)c;
        _exit(0);
    }
    int ws;
    ck_assert_int_eq(waitpid(pid, &ws, 0), pid);
    ck_assert_msg(WIFEXITED(ws) && WEXITSTATUS(ws) == 42, "the child read it: status %#x", ws);
    disco__hot_free(p, len);

    int fd = memfd_create("disco-test-prefault", MFD_CLOEXEC);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, (off_t)len), 0);
    unsigned char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ck_assert(m != MAP_FAILED);
    struct stat st;
    ck_assert_int_eq(fstat(fd, &st), 0);
    ck_assert_int_eq(st.st_blocks, 0);
    ck_assert_int_eq(disco__prefault(m + page + 1, 2 * (size_t)page), 0);
    ck_assert_int_eq(fstat(fd, &st), 0);
    ck_assert_int_eq((long long)st.st_blocks * 512, 3LL * page); /* pages 1, 2, 3 */
    munmap(m, len);
    close(fd);
}
END_TEST

Suite *suite_segment(void)
{
    Suite *s = suite_create("segment");
    TCase *tc = tcase_create("create_attach");
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, test_create_basic);
    tcase_add_test(tc, test_attach_in_child);
    tcase_add_test(tc, test_attach_same_process);
    suite_add_tcase(s, tc);

    tc = tcase_create("refusals");
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, test_attach_bad_magic);
    tcase_add_test(tc, test_attach_bad_layout_or_size);
    tcase_add_test(tc, test_segment_sealed);
    tcase_add_test(tc, test_attach_refuses_unsealed);
    tcase_add_test(tc, test_attach_bad_fd);
    tcase_add_test(tc, test_create_absurd_size);
    tcase_add_test(tc, test_create_overflow_size);
    tcase_add_test(tc, test_create_size_zero);
    suite_add_tcase(s, tc);

    tc = tcase_create("lifetime");
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, test_close_twice);
    tcase_add_test(tc, test_nothing_in_dev_shm);
    tcase_add_test(tc, test_fd_cloexec_across_exec);
    tcase_add_test(tc, test_hot_memory);
    suite_add_tcase(s, tc);
    return s;
}
