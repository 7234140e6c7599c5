/* demo_mlp.h - the sharded MLP of disco-demo: the weight generator shared by
 * the workers' library (demo_lib.c) and the controller's reference
 * (demo_mlp.c), so every process derives the same weights from one seed.
 *
 * The block: y = gelu(x W1) W2, x [batch, d_model], W1 [d_model, d_ff],
 * W2 [d_ff, d_model]. Tensor parallel over N workers (Megatron style):
 * worker r holds columns [r*d_ff/N, (r+1)*d_ff/N) of W1 and the same rows
 * of W2, computes its partial y, and an allreduce (sum) gives y. */
#ifndef DISCO_TOOLS_DEMO_MLP_H
#define DISCO_TOOLS_DEMO_MLP_H

#include <math.h>
#include <stdint.h>

/* A weight or input in [-1, 1): splitmix64 of (seed, tensor, index). */
static inline float demo_mlp_value(uint64_t seed, uint64_t tensor, uint64_t index)
{
    uint64_t z = seed * 0x9E3779B97F4A7C15ULL + tensor * 0xBF58476D1CE4E5B9ULL + index + 1;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return (float)((double)(z >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* W1[i][j] and W2[j][i] for i < d_model, j < d_ff, scaled so activations
 * stay of order 1. */
static inline float demo_mlp_w1(uint64_t seed, int64_t d_model, int64_t d_ff, int64_t i, int64_t j)
{
    return demo_mlp_value(seed, 1, (uint64_t)(i * d_ff + j)) / sqrtf((float)d_model);
}

static inline float demo_mlp_w2(uint64_t seed, int64_t d_model, int64_t d_ff, int64_t j, int64_t i)
{
    return demo_mlp_value(seed, 2, (uint64_t)(j * d_model + i)) / sqrtf((float)d_ff);
}

static inline float demo_mlp_gelu(float v)
{
    return 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
}

/* The first and last column of W1 (row of W2) that worker r of n holds. */
static inline void demo_mlp_share(int64_t d_ff, int r, int n, int64_t *lo, int64_t *hi)
{
    *lo = d_ff * r / n;
    *hi = d_ff * (r + 1) / n;
}

#endif
