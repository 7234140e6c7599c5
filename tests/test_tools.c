/* test_tools.c - every tool answers --help (exit 0, a usage line on
 * stdout) and refuses an unknown option (exit 2, usage on stderr); the tools
 * that report figures write them with --json, and the JSON parses with the
 * keys the README names; disco-demo's decoder and MLP match their
 * one-process references on the CPU and on sim devices; disco-bench's GPU
 * section runs on sim (figures marked SIM, none recorded) and skips with
 * one line without a GPU. */
#include <check.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/testutil.h"

static const char *const tools[] = {"disco",         "disco-bench",      "disco-demo",
                                    "disco-jsonrpc", "disco-rpc-server", "disco-soak",
                                    "disco-worker"};
#define NTOOLS (sizeof tools / sizeof tools[0])

#define run tu_run

START_TEST(test_help)
{
    char cmd[1024], out[8192];
    snprintf(cmd, sizeof cmd, "%s/%s --help", DISCO_TEST_BIN, tools[_i]);
    ck_assert_msg(run(cmd, out, sizeof out) == 0, "%s --help did not exit 0", tools[_i]);
    ck_assert_msg(strstr(out, "usage:") != NULL, "%s --help printed no usage: %s", tools[_i], out);
    snprintf(cmd, sizeof cmd, "%s/%s --no-such-option 2>&1 >/dev/null", DISCO_TEST_BIN, tools[_i]);
    int rc = run(cmd, out, sizeof out);
    ck_assert_msg(rc == 2, "%s --no-such-option exited %d, not 2", tools[_i], rc);
    ck_assert_msg(strstr(out, "usage:") != NULL, "%s: no usage on stderr: %s", tools[_i], out);
}
END_TEST

/* The JSON file a command wrote: parsed, with every key in keys. */
static json_t *load_with(const char *path, const char *const *keys)
{
    json_error_t e;
    json_t *j = json_load_file(path, 0, &e);
    ck_assert_msg(j != NULL, "%s: %s (line %d)", path, e.text, e.line);
    for (; *keys != NULL; keys++)
        ck_assert_msg(json_object_get(j, *keys) != NULL, "%s has no \"%s\"", path, *keys);
    return j;
}

START_TEST(test_json)
{
    char dir[] = "/tmp/disco-tools-XXXXXX", cmd[2048], out[65536];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    const char *bin = DISCO_TEST_BIN;

    snprintf(cmd, sizeof cmd, "%s/disco-soak --rounds 4 --quiet --json %s/soak.json", bin, dir);
    ck_assert_int_eq(run(cmd, out, sizeof out), 0);
    snprintf(cmd, sizeof cmd, "%s/soak.json", dir);
    json_t *j = load_with(cmd, (const char *const[]){"rounds", "failures", "worst_worker_ms",
                                                     "worst_controller_ms", "sim_rounds", NULL});
    ck_assert_int_eq(json_integer_value(json_object_get(j, "rounds")), 4);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "failures")), 0);
    json_decref(j);

    snprintf(cmd, sizeof cmd,
             "%s/disco-demo --mlp-only --workers 2 --steps 2 --trace %s/t.json --json %s/d.json",
             bin, dir, dir);
    ck_assert_int_eq(run(cmd, out, sizeof out), 0);
    snprintf(cmd, sizeof cmd, "%s/d.json", dir);
    j = load_with(cmd, (const char *const[]){"step_us", "compute_us", "coordination_us",
                                             "max_rel_err", "ok", NULL});
    ck_assert(json_is_true(json_object_get(j, "ok")));
    json_decref(j);

    snprintf(cmd, sizeof cmd, "%s/disco trace %s/t.json --json > %s/s.json", bin, dir, dir);
    ck_assert_int_eq(run(cmd, out, sizeof out), 0);
    snprintf(cmd, sizeof cmd, "%s/s.json", dir);
    json_decref(load_with(cmd, (const char *const[]){"workers", NULL}));

    snprintf(cmd, sizeof cmd, "%s/disco topo --workers 2 --json > %s/p.json", bin, dir);
    ck_assert_int_eq(run(cmd, out, sizeof out), 0);
    snprintf(cmd, sizeof cmd, "%s/p.json", dir);
    json_decref(load_with(cmd, (const char *const[]){"workers", NULL}));

    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(run(cmd, out, sizeof out), 0);
}
END_TEST

/* disco-demo --device sim: the MLP with its tensors on sim devices matches
 * the one-process reference with 2, 3 and 4 workers, d_ff not a multiple
 * of the workers (the padded shards); DISCO_SIM_GPUS unset (the demo picks
 * one device per worker), or set to 2 (3 workers share 2 devices). */
START_TEST(test_demo_sim)
{
    char dir[] = "/tmp/disco-demo-sim-XXXXXX", cmd[2048], out[65536];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    int workers = 2 + _i;
    snprintf(cmd, sizeof cmd,
             "%s %s/disco-demo --mlp-only --device sim --workers %d --steps 3 --batch 4 "
             "--d-model 32 --d-ff 101 --trace %s/t.json --json %s/d.json",
             _i == 1 ? "env DISCO_SIM_GPUS=2" : "env -u DISCO_SIM_GPUS", DISCO_TEST_BIN, workers,
             dir, dir);
    int rc = run(cmd, out, sizeof out);
    ck_assert_msg(rc == 0, "%s exited %d: %s", cmd, rc, out);
    ck_assert_msg(strstr(out, "tensors on sim devices") != NULL, "not on sim: %s", out);
    ck_assert_msg(strstr(out, "demo: the sharded MLP matched the reference") != NULL, "%s", out);
    snprintf(cmd, sizeof cmd, "%s/d.json", dir);
    json_t *j = load_with(cmd, (const char *const[]){"device", "max_rel_err", "ok", NULL});
    ck_assert_str_eq(json_string_value(json_object_get(j, "device")), "sim");
    ck_assert(json_is_true(json_object_get(j, "ok")));
    ck_assert_int_eq(json_integer_value(json_object_get(j, "workers")), workers);
    json_decref(j);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(run(cmd, out, sizeof out), 0);
}
END_TEST

/* The decoder's runs: a small model (2 layers, 4 heads, vocab 64). */
#define DECODER_SMALL                                                                              \
    "--decoder-only --vocab 64 --d-model 32 --layers 2 --heads 4 --d-ff 64 --prompt 3,1,4 "        \
    "--tokens 5"

/* The decoder's figures file: ok, the tokens matched the reference's, the
 * error under the tolerance, 5 tokens below the vocabulary, and the keys
 * the README names. */
static void check_decoder_json(const char *path, const char *device, int workers)
{
    json_t *j = load_with(
        path, (const char *const[]){
                  "token_us", "token_p99_us", "compute_us", "coordination_us", "coordination_pct",
                  "tokens_per_s", "max_rel_err", "tolerance", "tokens_match", "ok", "tokens",
                  "commands_per_token", "ctx_allreduce_us", "one_command_tokens_per_s",
                  "controller_driven_tokens_per_s", "one_command_speedup", "form", NULL});
    ck_assert_str_eq(json_string_value(json_object_get(j, "device")), device);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "workers")), workers);
    ck_assert_msg(json_is_true(json_object_get(j, "ok")), "%s: ok is not true", path);
    ck_assert_msg(json_is_true(json_object_get(j, "tokens_match")), "%s: tokens differ", path);
    double err = json_real_value(json_object_get(j, "max_rel_err"));
    ck_assert_msg(err >= 0 && err <= 1e-4, "%s: max_rel_err %g", path, err);
    json_t *toks = json_object_get(j, "tokens");
    ck_assert_int_eq(json_array_size(toks), 5);
    for (size_t i = 0; i < 5; i++) {
        json_int_t t = json_integer_value(json_array_get(toks, i));
        ck_assert_msg(t >= 0 && t < 64, "%s: token %lld", path, (long long)t);
    }
    ck_assert(json_real_value(json_object_get(j, "token_us")) > 0);
    ck_assert(json_real_value(json_object_get(j, "tokens_per_s")) > 0);
    json_decref(j);
}

/* disco-demo's decoder on the CPU with 1, 2 and 4 workers (4 heads: 4, 2
 * and 1 a worker): it exits 0, its logits and tokens match the one-process
 * reference (the JSON says so), and it writes a trace that disco trace
 * reads. */
START_TEST(test_decoder_cpu)
{
    static const int workers[] = {1, 2, 4};
    char dir[] = "/tmp/disco-decoder-XXXXXX", cmd[2048], out[65536];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(cmd, sizeof cmd,
             "%s/disco-demo " DECODER_SMALL " --device cpu --workers %d --trace %s/t.json "
             "--json %s/d.json",
             DISCO_TEST_BIN, workers[_i], dir, dir);
    int rc = run(cmd, out, sizeof out);
    ck_assert_msg(rc == 0, "%s exited %d: %s", cmd, rc, out);
    ck_assert_msg(strstr(out, "demo: the sharded decoder matched the reference") != NULL, "%s",
                  out);
    ck_assert_msg(strstr(out, "tokens match") != NULL, "%s", out);
    snprintf(cmd, sizeof cmd, "%s/d.json", dir);
    check_decoder_json(cmd, "cpu", workers[_i]);
    snprintf(cmd, sizeof cmd, "%s/disco trace %s/t.json > /dev/null", DISCO_TEST_BIN, dir);
    ck_assert_int_eq(run(cmd, out, sizeof out), 0);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(run(cmd, out, sizeof out), 0);
}
END_TEST

/* The decoder with its weights, residual stream, KV caches and partials on
 * sim devices (2 workers, DISCO_SIM_GPUS unset: one device each) matches
 * the reference as on the CPU. */
START_TEST(test_decoder_sim)
{
    char dir[] = "/tmp/disco-decoder-sim-XXXXXX", cmd[2048], out[65536];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(cmd, sizeof cmd,
             "env -u DISCO_SIM_GPUS %s/disco-demo " DECODER_SMALL " --device sim --workers 2 "
             "--trace %s/t.json --json %s/d.json",
             DISCO_TEST_BIN, dir, dir);
    int rc = run(cmd, out, sizeof out);
    ck_assert_msg(rc == 0, "%s exited %d: %s", cmd, rc, out);
    ck_assert_msg(strstr(out, "on sim devices") != NULL, "not on sim: %s", out);
    ck_assert_msg(strstr(out, "computed on host copies") != NULL, "%s", out);
    snprintf(cmd, sizeof cmd, "%s/d.json", dir);
    check_decoder_json(cmd, "sim", 2);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(run(cmd, out, sizeof out), 0);
}
END_TEST

/* The ctx_allreduce slices of a trace file: each inside a demo.dec_step
 * slice of its worker's track and command (args.seq); per track, how many
 * (counts[tid]); and the "comm" flows' starts and finishes. */
static void check_trace_colls(const char *path, size_t *counts, size_t ntids, size_t *flows_s,
                              size_t *flows_f)
{
    json_error_t e;
    json_t *doc = json_load_file(path, 0, &e), *ev = json_object_get(doc, "traceEvents");
    ck_assert_msg(doc != NULL, "%s: %s", path, e.text);
    *flows_s = *flows_f = 0;
    for (size_t i = 0; i < json_array_size(ev); i++) {
        json_t *c = json_array_get(ev, i);
        const char *ph = json_string_value(json_object_get(c, "ph"));
        const char *cat = json_string_value(json_object_get(c, "cat"));
        if (cat == NULL || strcmp(cat, "comm") != 0)
            continue;
        *flows_s += strcmp(ph, "s") == 0;
        *flows_f += strcmp(ph, "f") == 0;
        if (strcmp(ph, "X") != 0)
            continue;
        json_int_t tid = json_integer_value(json_object_get(c, "tid"));
        json_int_t seq = json_integer_value(json_object_get(json_object_get(c, "args"), "seq"));
        double ts = json_real_value(json_object_get(c, "ts")),
               end = ts + json_real_value(json_object_get(c, "dur"));
        ck_assert_str_eq(json_string_value(json_object_get(c, "name")), "ctx_allreduce");
        ck_assert(tid >= 1 && (size_t)tid < ntids);
        counts[tid]++;
        bool inside = false;
        for (size_t j = 0; j < json_array_size(ev) && !inside; j++) {
            json_t *p = json_array_get(ev, j);
            const char *name = json_string_value(json_object_get(p, "name"));
            double ps = json_real_value(json_object_get(p, "ts"));
            inside =
                name != NULL && strcmp(name, "demo.dec_step") == 0 &&
                json_integer_value(json_object_get(p, "tid")) == tid &&
                json_integer_value(json_object_get(json_object_get(p, "args"), "seq")) == seq &&
                ps <= ts && end <= ps + json_real_value(json_object_get(p, "dur"));
        }
        ck_assert_msg(inside, "%s: ctx_allreduce of seq %lld on track %lld outside its step", path,
                      (long long)seq, (long long)tid);
    }
    json_decref(doc);
}

/* Both forms of a decoder step, each the main one (_i / 2: --controller-
 * driven), on the CPU and on sim (_i % 2), 2 workers: the run matches the
 * reference (both forms' logits are checked); demo.json says which form
 * leads, the one-command form takes one command a token (at most 2, the
 * goal of issue 34) against at least 2 + 4L for the other, both forms'
 * tokens/s and the in-worker allreduce's time are there; the trace has
 * every one-command step's 2L in-worker allreduces on both workers, nested
 * in the step, and a flow for each. */
START_TEST(test_decoder_forms)
{
    bool ctl = _i / 2, sim = _i % 2;
    char dir[] = "/tmp/disco-decoder-forms-XXXXXX", cmd[2048], out[65536];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(cmd, sizeof cmd,
             "env -u DISCO_SIM_GPUS %s/disco-demo " DECODER_SMALL " --device %s --workers 2 %s "
             "--trace %s/t.json --json %s/d.json",
             DISCO_TEST_BIN, sim ? "sim" : "cpu", ctl ? "--controller-driven" : "", dir, dir);
    int rc = run(cmd, out, sizeof out);
    ck_assert_msg(rc == 0, "%s exited %d: %s", cmd, rc, out);
    ck_assert_msg(strstr(out, ctl ? "the one-command form, in the same session"
                                  : "the controller-driven form, in the same session") != NULL,
                  "%s", out);
    snprintf(cmd, sizeof cmd, "%s/d.json", dir);
    check_decoder_json(cmd, sim ? "sim" : "cpu", 2);
    json_t *j = json_load_file(cmd, 0, NULL);
    ck_assert_str_eq(json_string_value(json_object_get(j, "form")),
                     ctl ? "controller-driven" : "one-command");
    double one = json_real_value(json_object_get(j, "one_command_commands_per_token")),
           other = json_real_value(json_object_get(j, "controller_driven_commands_per_token")),
           top = json_real_value(json_object_get(j, "commands_per_token"));
    ck_assert_msg(one >= 1 && one <= 2, "one-command form: %g commands a token", one);
    ck_assert_msg(other >= 2 + 4 * 2, "controller-driven form: %g commands a token", other);
    ck_assert(top == (ctl ? other : one));
    ck_assert(json_real_value(json_object_get(j, "ctx_allreduce_us")) > 0);
    ck_assert(json_real_value(json_object_get(j, "one_command_tokens_per_s")) > 0);
    ck_assert(json_real_value(json_object_get(j, "controller_driven_tokens_per_s")) > 0);
    ck_assert(json_real_value(json_object_get(j, "one_command_speedup")) > 0);
    json_decref(j);
    size_t counts[4] = {0}, fs, ff;
    snprintf(cmd, sizeof cmd, "%s/t.json", dir);
    check_trace_colls(cmd, counts, 4, &fs, &ff);
    size_t want = (3 + 5 - 1) * 2 * 2; /* steps (prompt 3, 5 tokens) x 2L */
    ck_assert_msg(counts[1] == want && counts[2] == want, "ctx_allreduce slices: %zu, %zu",
                  counts[1], counts[2]);
    ck_assert_msg(fs == want && ff == want, "flows: %zu starts, %zu finishes", fs, ff);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(run(cmd, out, sizeof out), 0);
}
END_TEST

/* --weights: a model written with --save-weights --seed 7 and read back by
 * every worker (its shard) and the reference gives the tokens of seed 7
 * itself, matching; a file of another model's size is refused (exit 1,
 * the size named). */
START_TEST(test_decoder_weights_file)
{
    char dir[] = "/tmp/disco-decoder-w-XXXXXX", cmd[2048], out[65536];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(cmd, sizeof cmd,
             "%s/disco-demo " DECODER_SMALL " --workers 2 --seed 7 --save-weights %s/w.bin "
             "--trace /dev/null --json %s/a.json",
             DISCO_TEST_BIN, dir, dir);
    int rc = run(cmd, out, sizeof out);
    ck_assert_msg(rc == 0, "%s exited %d: %s", cmd, rc, out);
    snprintf(cmd, sizeof cmd,
             "%s/disco-demo " DECODER_SMALL " --workers 2 --weights %s/w.bin --trace /dev/null "
             "--json %s/b.json",
             DISCO_TEST_BIN, dir, dir);
    rc = run(cmd, out, sizeof out);
    ck_assert_msg(rc == 0, "%s exited %d: %s", cmd, rc, out);
    ck_assert_msg(strstr(out, "weights read from") != NULL, "%s", out);
    snprintf(cmd, sizeof cmd, "%s/b.json", dir);
    check_decoder_json(cmd, "cpu", 2);
    json_t *a = json_load_file(cmd, 0, NULL);
    snprintf(cmd, sizeof cmd, "%s/a.json", dir);
    json_t *b = json_load_file(cmd, 0, NULL);
    ck_assert(a != NULL && b != NULL);
    ck_assert_msg(json_equal(json_object_get(a, "tokens"), json_object_get(b, "tokens")),
                  "the file's tokens differ from seed 7's");
    json_decref(a);
    json_decref(b);
    snprintf(cmd, sizeof cmd,
             "%s/disco-demo " DECODER_SMALL " --layers 3 --workers 2 --weights %s/w.bin "
             "--trace /dev/null",
             DISCO_TEST_BIN, dir);
    rc = run(cmd, out, sizeof out);
    ck_assert_msg(rc == 1, "a wrong-sized file: exit %d: %s", rc, out);
    ck_assert_msg(strstr(out, "not the model's size") != NULL, "%s", out);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(run(cmd, out, sizeof out), 0);
}
END_TEST

/* Models the workers cannot shard and bad prompts are refused with exit 2
 * and a message naming the flag, before any session opens. */
START_TEST(test_decoder_bad_flags)
{
    static const char *const bad[][2] = {
        {"--workers 4 --heads 2", "--heads and --d-ff must be at least"},
        {"--heads 6", "--d-model must be --heads times an even head size"},
        {"--prompt 1,512", "--prompt token id is not below --vocab"},
        {"--prompt 1,,2", "--prompt wants"},
        {"--tokens 0", "--tokens wants a number"},
        {"--device tpu", "--device wants cpu, sim or cuda"},
    };
    char cmd[1024], out[8192];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(cmd, sizeof cmd, "%s/disco-demo --decoder-only %s 2>&1", DISCO_TEST_BIN,
                 bad[i][0]);
        int rc = run(cmd, out, sizeof out);
        ck_assert_msg(rc == 2, "%s exited %d, not 2: %s", bad[i][0], rc, out);
        ck_assert_msg(strstr(out, bad[i][1]) != NULL, "%s: no \"%s\" in: %s", bad[i][0], bad[i][1],
                      out);
    }
}
END_TEST

/* disco-demo --device cuda, the MLP (_i 0) and the decoder (_i 1): with a
 * GPU it matches the reference; without one (or without CUDA in the build)
 * it exits 1, not by a signal, saying "no CUDA device". DISCO_REQUIRE_GPU=1
 * makes the second case a failure. */
START_TEST(test_demo_cuda)
{
    char cmd[1024], out[65536];
    snprintf(cmd, sizeof cmd, "%s/disco-demo %s --device cuda --workers 2 --trace /dev/null 2>&1",
             DISCO_TEST_BIN,
             _i == 0 ? "--mlp-only --steps 2 --batch 2 --d-model 16 --d-ff 32" : DECODER_SMALL);
    int rc = run(cmd, out, sizeof out);
    const char *req = getenv("DISCO_REQUIRE_GPU");
    bool required = req != NULL && req[0] != '\0' && strcmp(req, "0") != 0;
    if (rc == 0) {
        ck_assert_msg(strstr(out, _i == 0
                                      ? "demo: the sharded MLP matched the reference"
                                      : "demo: the sharded decoder matched the reference") != NULL,
                      "%s", out);
        return;
    }
    ck_assert_msg(!required, "DISCO_REQUIRE_GPU is set and --device cuda exited %d: %s", rc, out);
    ck_assert_msg(rc == 1, "--device cuda without a GPU exited %d, not 1: %s", rc, out);
    ck_assert_msg(strstr(out, "no CUDA device") != NULL, "no \"no CUDA device\" in: %s", out);
    printf("test_demo_cuda: no GPU here: %s", out);
}
END_TEST

/* disco-bench --only GPU --device sim: the GPU section's code runs on the
 * simulated device (2 workers, 512 B and 32 KiB, copies of 64 KiB), exits
 * 0, prints every figure's name marked SIM and each allreduce figure's
 * path, and records none of them (the JSON has no results). */
START_TEST(test_bench_gpu_sim)
{
    char dir[] = "/tmp/disco-bench-gpu-XXXXXX", cmd[2048], out[65536];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(cmd, sizeof cmd,
             "env -u DISCO_SIM_GPUS %s/disco-bench --only GPU --quick --device sim --json "
             "%s/b.json 2>&1",
             DISCO_TEST_BIN, dir);
    int rc = run(cmd, out, sizeof out);
    ck_assert_msg(rc == 0, "disco-bench --device sim exited %d: %s", rc, out);
    static const char *const names[] = {"ipc_open_us_first",
                                        "ipc_open_us_cached",
                                        "call_sync_spawn_ns",
                                        "gpu_call_sync_ns",
                                        "gpu_copy_to_worker0_gbps",
                                        "gpu_memcpy_h2d_gbps",
                                        "gpu_copy_from_worker0_gbps",
                                        "gpu_memcpy_d2h_gbps",
                                        "gpu_d2d_peer_gbps",
                                        "gpu_memcpy_d2d_gbps",
                                        "gpu_allreduce_us_512B_f16_n2",
                                        "gpu_allreduce_us_32KiB_f32_n2",
                                        "gpu_memcpy_allreduce_us_512B_n2"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char want[96];
        snprintf(want, sizeof want, "SIM %s ", names[i]);
        ck_assert_msg(strstr(out, want) != NULL, "no \"%s\" in: %s", want, out);
    }
    /* Each allreduce figure names its path (a device per worker: kernels). */
    static const char *const paths[] = {"SIM gpu_allreduce_us_512B_f16_n2_path kernel-one-shot",
                                        "SIM gpu_allreduce_twoshot_us_8KiB_n2_path kernel-two-shot",
                                        "SIM gpu_allreduce_switch_bytes_n2_path kernels"};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
        ck_assert_msg(strstr(out, paths[i]) != NULL, "no \"%s\" in: %s", paths[i], out);
    snprintf(cmd, sizeof cmd, "%s/b.json", dir);
    json_t *j = load_with(cmd, (const char *const[]){"results", NULL});
    ck_assert_msg(json_object_size(json_object_get(j, "results")) == 0,
                  "a sim figure was recorded in %s", cmd);
    json_decref(j);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(run(cmd, out, sizeof out), 0);
}
END_TEST

/* disco-bench --only GPU (CUDA): without a GPU (or without CUDA in the
 * build) it prints the one skip line and exits 0; with one it exits 0
 * having recorded the GPU figures. DISCO_REQUIRE_GPU=1 makes a skip a
 * failure (of this test, and disco-bench's exit status 3). */
START_TEST(test_bench_gpu_skip)
{
    char cmd[1024], out[65536];
    snprintf(cmd, sizeof cmd, "%s/disco-bench --only GPU --quick 2>&1", DISCO_TEST_BIN);
    int rc = run(cmd, out, sizeof out);
    const char *skip = strstr(out, "GPU: skipped: no CUDA device (");
    const char *req = getenv("DISCO_REQUIRE_GPU");
    bool required = req != NULL && req[0] != '\0' && strcmp(req, "0") != 0;
    if (skip == NULL) {
        ck_assert_msg(rc == 0, "disco-bench --only GPU exited %d: %s", rc, out);
        ck_assert_msg(strstr(out, "gpu_call_sync_ns") != NULL, "neither figures nor skip: %s", out);
        return;
    }
    ck_assert_msg(!required, "DISCO_REQUIRE_GPU is set and the GPU section skipped (exit %d): %s",
                  rc, out);
    ck_assert_msg(rc == 0, "disco-bench --only GPU exited %d: %s", rc, out);
    ck_assert_msg(strstr(out, "gpu_") == NULL, "a GPU figure beside the skip line: %s", out);
    printf("test_bench_gpu_skip: %s", skip);
}
END_TEST

/* DISCO_REQUIRE_GPU=1 disco-bench --only GPU: where the section skips (no
 * CUDA device) disco-bench exits 3 saying why, so that a script (the GPU
 * kit's bench steps) cannot take a skip for a pass; with a GPU it exits 0
 * with the figures. Without the exit status (issue 32) it exited 0. */
START_TEST(test_bench_gpu_required)
{
    char cmd[1024], out[65536];
    snprintf(cmd, sizeof cmd, "env DISCO_REQUIRE_GPU=1 %s/disco-bench --only GPU --quick 2>&1",
             DISCO_TEST_BIN);
    int rc = run(cmd, out, sizeof out);
    if (strstr(out, "GPU: skipped: no CUDA device (") == NULL) {
        ck_assert_msg(rc == 0, "disco-bench --only GPU exited %d: %s", rc, out);
        ck_assert_msg(strstr(out, "gpu_call_sync_ns") != NULL, "neither figures nor skip: %s", out);
        return;
    }
    ck_assert_msg(rc == 3, "DISCO_REQUIRE_GPU=1 and a skipped GPU section: exit %d, not 3: %s", rc,
                  out);
    ck_assert_msg(strstr(out, "DISCO_REQUIRE_GPU is set and the GPU section skipped") != NULL,
                  "no reason for exit 3 in: %s", out);
}
END_TEST

/* disco-bench --only node without node_bench and mpi_node_base (as when
 * disco is built without Open MPI): the section says it skipped in one
 * line, records nothing, and the run exits 0. */
START_TEST(test_bench_node_skip)
{
    char dir[] = "/tmp/disco-bench-node-XXXXXX", cmd[2048], out[65536];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(cmd, sizeof cmd,
             "env -u DISCO_BENCH_NODE -u DISCO_BENCH_NODE_BASE %s/disco-bench --only node --quick "
             "--json %s/b.json 2>&1",
             DISCO_TEST_BIN, dir);
    int rc = run(cmd, out, sizeof out);
    ck_assert_msg(rc == 0, "disco-bench --only node exited %d: %s", rc, out);
    ck_assert_msg(strstr(out, "across nodes") != NULL && strstr(out, "  skipped: no node_bench"),
                  "no skip line in: %s", out);
    snprintf(cmd, sizeof cmd, "%s/b.json", dir);
    json_t *j = load_with(cmd, (const char *const[]){"results", NULL});
    ck_assert_msg(json_object_size(json_object_get(j, "results")) == 0,
                  "a figure was recorded in %s", cmd);
    json_decref(j);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(run(cmd, out, sizeof out), 0);
}
END_TEST

Suite *suite_tools(void)
{
    Suite *s = suite_create("tools");
    TCase *tc = tcase_create("tools");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_help, 0, NTOOLS);
    tcase_add_test(tc, test_json);
    tcase_add_loop_test(tc, test_demo_sim, 0, 3);
    tcase_add_loop_test(tc, test_demo_cuda, 0, 2);
    tcase_add_loop_test(tc, test_decoder_cpu, 0, 3);
    tcase_add_test(tc, test_decoder_sim);
    tcase_add_loop_test(tc, test_decoder_forms, 0, 4);
    tcase_add_test(tc, test_decoder_bad_flags);
    tcase_add_test(tc, test_decoder_weights_file);
    tcase_add_test(tc, test_bench_gpu_sim);
    tcase_add_test(tc, test_bench_gpu_skip);
    tcase_add_test(tc, test_bench_gpu_required);
    tcase_add_test(tc, test_bench_node_skip);
    suite_add_tcase(s, tc);
    return s;
}
