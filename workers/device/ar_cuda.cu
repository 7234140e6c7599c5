/*
 * ar_cuda.cu - the allreduce kernels of ar.h on CUDA (compiled by nvcc when
 * the Makefile finds the toolkit; cuda_ar.c launches them through
 * disco__cuda_ar_kernel, ar_cuda.h).
 *
 * One thread block per piece (grid = job.pieces), kThreads threads each.
 * Block b runs ar.h's protocol for piece b:
 *   one-shot: START; out[rank][piece b] = fold of in[0..size-1]; END.
 *   two-shot: START; out[rank][piece b of slice rank] = fold of in[0..size-1];
 *             MID; for every other member m: copy piece b of slice m from
 *             out[m] into out[rank]; END.
 * A meeting (meet) is an arrival (F1) and a wait (F2). Thread t < size
 * arrives at member t and waits for member t, so one block's flags are
 * written and read by its first size threads; the other threads only take
 * part in the block's barriers.
 *
 * Reductions match disco_reduce (disco/dtype.h, workers/value/dtype.c) bit
 * for bit: every element is folded over the sources in rank order with the
 * same arithmetic (IEEE round-to-nearest, never contracted into an FMA, no
 * flush to zero: nvcc's defaults, and the _rn intrinsics say so), fp16 and
 * bf16 widened exactly, accumulated in float32 and rounded once (to nearest
 * even), NaN kept as the CPU keeps it in min and max. One exception: a NaN
 * that arithmetic produces (sum, prod, avg) is the GPU's canonical NaN,
 * while the CPU carries an operand's payload and sign; both are NaN.
 *
 * Nothing of the C++ standard library is used, so that the object needs
 * only the CUDA runtime (linked statically with the library).
 */
#include <stdint.h>

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#include "disco/dtype.h"
#include "workers/device/ar_cuda.h"

static_assert(sizeof(struct disco__ar_job) <= 4096, "the job is passed as a kernel parameter");
static_assert(DISCO_AR_SLOTS * DISCO_AR_PHASES * DISCO_AR_MAX_PIECES * DISCO_AR_MAX_RANKS * 4u <=
                  DISCO_AR_SIGNAL_BYTES,
              "every flag lies in the signal region");

namespace
{

constexpr unsigned kThreads = 512;    /* per block, so per piece */
constexpr uint32_t kPollEvery = 1024; /* spins between looks at the clock and the words */

/* ---- flags ---------------------------------------------------------------- */

/* Signal regions are cudaMalloc'd memory (own or IPC imports): global
 * state space, reached through its generic address. */
__device__ __forceinline__ void st_release_sys(uint32_t *p, uint32_t v)
{
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(__cvta_generic_to_global(p)), "r"(v)
                 : "memory");
}

__device__ __forceinline__ uint32_t ld_acquire_sys(const uint32_t *p)
{
    uint32_t v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];"
                 : "=r"(v)
                 : "l"(__cvta_generic_to_global(p))
                 : "memory");
    return v;
}

/* Nanoseconds of the GPU's global timer. */
__device__ __forceinline__ uint64_t now_ns()
{
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* F1: this member arrives at phase of piece b. The barrier first: every
 * thread's reads and writes of piece b so far (its output elements, its
 * reads of the peers' inputs or outputs) happen before it, and the release
 * store at system scope is cumulative over what happens before it (PTX
 * memory model: the barrier is a CTA-scope synchronization, causality order
 * is transitive), so a peer whose acquire (F2) reads this epoch sees those
 * writes and knows those reads are done. Thread t < size stores into member
 * t's region; member t's region is a mapping of its memory (or ours, for
 * t == rank). */
__device__ __forceinline__ void arrive(const disco__ar_job &j, uint32_t phase, uint32_t b)
{
    __syncthreads();
    if (threadIdx.x < j.size)
        st_release_sys(j.signal[threadIdx.x] + disco__ar_flag(j.slot, phase, b, j.rank), j.epoch);
}

/* F2: waits until every member arrived at phase of piece b; false when the
 * block must stop (then every thread of it returns false, and the kernel
 * returns without another barrier or wait). Thread t < size spins on member
 * t's flag in our own region with an acquire load at system scope, which
 * synchronizes with member t's release (F1); the barrier after it extends
 * that to every thread of the block (causality order again), so the reads
 * of the peers' bytes that follow see what they wrote before arriving.
 *
 * The spin is bounded: every kPollEvery spins a thread looks at the
 * clock (job.budget_ns counted from the wait's start, 0: no budget), at the
 * abort word the host sets (a volatile read of mapped host memory: it sees the
 * host's store eventually, which is all it needs) and at the error word
 * (another block of this kernel gave up: stop too, recording nothing). The
 * first give-up records itself with an atomicCAS from 0 (atomic among this
 * device's threads, which are the only writers; the host reads the word
 * after the sync that completed the kernel, which orders it). The flag holds
 * a 32-bit epoch compared for equality, so a flag from an earlier call is
 * never taken for this one (ar.h).
 *
 * Progress (ar.h, ar_cuda.h): at each of those looks that finds nothing
 * wrong, the thread stores its piece's word, "waits at phase for member t,
 * whose flag holds v", into the mapped words, and "passed" once its wait
 * ends; a wait shorter than kPollEvery spins writes nothing. The store is
 * volatile (PTX: relaxed at system scope): it orders nothing and needs to,
 * the host only copies the word for observers. Several threads of a block
 * may write the same word (each waits for another member): the last store
 * of each thread that wrote is its "passed", so once they all passed the
 * word says so. */
__device__ __forceinline__ bool await(const disco__ar_job &j, uint32_t phase, uint32_t b,
                                      disco__ar_words *words)
{
    int give_up = 0;
    if (threadIdx.x < j.size) {
        const uint32_t *f = j.signal[j.rank] + disco__ar_flag(j.slot, phase, b, threadIdx.x);
        const volatile uint32_t *abort_w = &words->abort_w;
        uint32_t *err_w = &words->err;
        volatile uint64_t *pw = &words->piece[b]; /* b < pieces <= DISCO_AR_MAX_PIECES */
        const uint64_t t0 = now_ns();
        bool told = false;
        uint32_t v;
        for (uint32_t spins = 1; (v = ld_acquire_sys(f)) != j.epoch; spins++) {
            if (spins % kPollEvery != 0)
                continue;
            uint32_t kind = 0;
            if (*abort_w != 0)
                kind = DISCO_AR_ERR_ABORTED;
            else if (j.budget_ns != 0 && now_ns() - t0 >= j.budget_ns)
                kind = DISCO_AR_ERR_TIMEOUT;
            else if (*(const volatile uint32_t *)err_w == 0) {
                /* nothing wrong: say where we wait, and spin on */
                *pw = DISCO_AR_PW(v, j.epoch, phase, DISCO_AR_PW_WAITING, threadIdx.x);
                told = true;
                continue;
            }
            if (kind != 0)
                atomicCAS(err_w, 0u, DISCO_AR_ERR_WORD(kind, phase, b, threadIdx.x));
            give_up = 1;
            break;
        }
        if (told && give_up == 0)
            *pw = DISCO_AR_PW(j.epoch, j.epoch, phase, DISCO_AR_PW_PASSED, threadIdx.x);
    }
    /* A barrier that also tells every thread whether any gave up. */
    return __syncthreads_or(give_up) == 0;
}

/* One meeting: arrive (F1), then wait for everyone (F2). */
__device__ __forceinline__ bool meet(const disco__ar_job &j, uint32_t phase, uint32_t b,
                                     disco__ar_words *words)
{
    arrive(j, phase, b);
    return await(j, phase, b, words);
}

/* ---- element arithmetic (as workers/value/dtype.c) ------------------------ */

enum Op {
    SUM = DISCO_REDUCE_SUM,
    PROD = DISCO_REDUCE_PROD,
    MIN = DISCO_REDUCE_MIN,
    MAX = DISCO_REDUCE_MAX,
    AVG = DISCO_REDUCE_AVG
};

__device__ __forceinline__ float add_rn(float a, float b)
{
    return __fadd_rn(a, b);
}
__device__ __forceinline__ double add_rn(double a, double b)
{
    return __dadd_rn(a, b);
}
__device__ __forceinline__ float mul_rn(float a, float b)
{
    return __fmul_rn(a, b);
}
__device__ __forceinline__ double mul_rn(double a, double b)
{
    return __dmul_rn(a, b);
}
__device__ __forceinline__ float div_rn(float a, float b)
{
    return __fdiv_rn(a, b);
}
__device__ __forceinline__ double div_rn(double a, double b)
{
    return __ddiv_rn(a, b);
}

/* NaN-propagating, the earlier source winning between equal values: dtype.c's
 * FMIN and FMAX (an earlier NaN stays, comparisons with it being false; a
 * later NaN is taken explicitly). */
template <typename A> __device__ __forceinline__ A min_nan(A a, A b)
{
    return b != b ? b : (b < a ? b : a);
}
template <typename A> __device__ __forceinline__ A max_nan(A a, A b)
{
    return b != b ? b : (a < b ? b : a);
}

/* Element types of the floating reductions: the element E, the accumulator
 * A, exact widening and round-to-nearest-even narrowing. NaN is handled
 * apart to keep what half.h keeps (sign and payload on widening; sign, the
 * top payload bits and the quiet bit on narrowing), where the hardware
 * conversions would give the canonical NaN. */
struct F16 {
    typedef uint16_t E;
    typedef float A;
    static __device__ __forceinline__ float widen(uint16_t h)
    {
        if ((h & 0x7fffu) > 0x7c00u)
            return __uint_as_float((uint32_t)(h & 0x8000u) << 16 | 0x7f800000u |
                                   (uint32_t)(h & 0x3ffu) << 13);
        return __half2float(__ushort_as_half(h));
    }
    static __device__ __forceinline__ uint16_t narrow(float f)
    {
        uint32_t x = __float_as_uint(f);
        if ((x & 0x7fffffffu) > 0x7f800000u)
            return (uint16_t)((x >> 16 & 0x8000u) | 0x7e00u | (x >> 13 & 0x3ffu));
        return __half_as_ushort(__float2half_rn(f));
    }
};

struct BF16 {
    typedef uint16_t E;
    typedef float A;
    static __device__ __forceinline__ float widen(uint16_t b)
    {
        return __uint_as_float((uint32_t)b << 16); /* exact, NaN included */
    }
    static __device__ __forceinline__ uint16_t narrow(float f)
    {
        uint32_t x = __float_as_uint(f);
        if ((x & 0x7fffffffu) > 0x7f800000u)
            return (uint16_t)(x >> 16 | 0x0040u);
        return __bfloat16_as_ushort(__float2bfloat16_rn(f));
    }
};

template <typename T> struct Same {
    typedef T E;
    typedef T A;
    static __device__ __forceinline__ T widen(T x)
    {
        return x;
    }
    static __device__ __forceinline__ T narrow(T x)
    {
        return x;
    }
};

/* Each reduction R: element E, accumulator A, first(x, n) for source 0,
 * fold(a, x, n) for each later source in rank order, fin(a, n) to store. */

/* float16, bfloat16 (accumulated in float32), float32, float64. */
template <class C, int OP> struct Float {
    typedef typename C::E E;
    typedef typename C::A A;
    static __device__ __forceinline__ A first(E x, uint32_t)
    {
        return C::widen(x);
    }
    static __device__ __forceinline__ A fold(A a, E x, uint32_t)
    {
        A b = C::widen(x);
        if constexpr (OP == SUM || OP == AVG)
            return add_rn(a, b);
        else if constexpr (OP == PROD)
            return mul_rn(a, b);
        else if constexpr (OP == MIN)
            return min_nan(a, b);
        else
            return max_nan(a, b);
    }
    static __device__ __forceinline__ E fin(A a, uint32_t n)
    {
        if constexpr (OP == AVG)
            return C::narrow(div_rn(a, (A)n));
        else
            return C::narrow(a);
    }
};

/* Integer sum and prod wrap modulo 2^bits: computed in W, unsigned and at
 * least as wide as unsigned int (so nothing promotes to int), whose low
 * bits are the same modulo 2^bits whatever the width; the store truncates
 * (two's complement, as nvcc and GCC convert). */
template <typename T, typename W, int OP> struct IntWrap {
    typedef T E;
    typedef W A;
    static __device__ __forceinline__ W first(T x, uint32_t)
    {
        return (W)x;
    }
    static __device__ __forceinline__ W fold(W a, T x, uint32_t)
    {
        if constexpr (OP == SUM)
            return a + (W)x;
        else
            return a * (W)x;
    }
    static __device__ __forceinline__ T fin(W a, uint32_t)
    {
        return (T)a;
    }
};

/* Integer min and max, exact. */
template <typename T, int OP> struct IntMinMax {
    typedef T E;
    typedef T A;
    static __device__ __forceinline__ T first(T x, uint32_t)
    {
        return x;
    }
    static __device__ __forceinline__ T fold(T a, T x, uint32_t)
    {
        if constexpr (OP == MIN)
            return x < a ? x : a;
        else
            return a < x ? x : a;
    }
    static __device__ __forceinline__ T fin(T a, uint32_t)
    {
        return a;
    }
};

/* Integer avg up to 32 bits: the int64 sum is exact; division truncates
 * toward zero. */
template <typename T> struct IntAvg {
    typedef T E;
    typedef int64_t A;
    static __device__ __forceinline__ int64_t first(T x, uint32_t)
    {
        return (int64_t)x;
    }
    static __device__ __forceinline__ int64_t fold(int64_t a, T x, uint32_t)
    {
        return a + (int64_t)x;
    }
    static __device__ __forceinline__ T fin(int64_t a, uint32_t n)
    {
        return (T)(a / (int64_t)n);
    }
};

/* int64 avg: dtype.c's i64_avg. The sum S may not fit, so keep S = n*q + r
 * with each x split as n*(x/n) + x%n, then normalize and truncate. */
struct QR {
    int64_t q, r;
};
struct I64Avg {
    typedef int64_t E;
    typedef QR A;
    static __device__ __forceinline__ QR first(int64_t x, uint32_t n)
    {
        return QR{x / (int64_t)n, x % (int64_t)n};
    }
    static __device__ __forceinline__ QR fold(QR a, int64_t x, uint32_t n)
    {
        return QR{a.q + x / (int64_t)n, a.r + x % (int64_t)n};
    }
    static __device__ __forceinline__ int64_t fin(QR a, uint32_t n)
    {
        int64_t q = a.q + a.r / (int64_t)n, r = a.r % (int64_t)n;
        if (q > 0 && r < 0)
            q--;
        else if (q < 0 && r > 0)
            q++;
        return q;
    }
};

/* bool: any nonzero byte is true. sum and max: or; prod and min: and; avg:
 * majority, true iff 2 * (number true) >= n. Writes 0 or 1. */
template <int OP> struct Bool {
    typedef uint8_t E;
    typedef uint32_t A;
    static __device__ __forceinline__ uint32_t first(uint8_t x, uint32_t)
    {
        return x != 0;
    }
    static __device__ __forceinline__ uint32_t fold(uint32_t a, uint8_t x, uint32_t)
    {
        if constexpr (OP == SUM || OP == MAX)
            return a | (uint32_t)(x != 0);
        else if constexpr (OP == PROD || OP == MIN)
            return a & (uint32_t)(x != 0);
        else
            return a + (uint32_t)(x != 0);
    }
    static __device__ __forceinline__ uint8_t fin(uint32_t a, uint32_t n)
    {
        if constexpr (OP == AVG)
            return (uint8_t)(a >= (n + 1u) / 2u);
        else
            return (uint8_t)a;
    }
};

/* ---- the kernel ----------------------------------------------------------- */

/* Elements [lo, hi) of every member's input, folded in rank order into our
 * output. Plain loads and stores: the meetings order them (F1, F2). */
template <class R> __device__ void reduce_range(const disco__ar_job &j, uint64_t lo, uint64_t hi)
{
    typedef typename R::E E;
    typedef typename R::A A;
    E *dst = static_cast<E *>(j.out[j.rank]);
    for (uint64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        A a = R::first(static_cast<const E *>(j.in[0])[i], j.size);
        for (uint32_t r = 1; r < j.size; r++)
            a = R::fold(a, static_cast<const E *>(j.in[r])[i], j.size);
        dst[i] = R::fin(a, j.size);
    }
}

/* Two-shot: piece b of every other member's slice, from its output (final
 * since its MID arrival, F1) into ours. */
template <typename E> __device__ void gather_piece(const disco__ar_job &j, uint32_t b)
{
    E *dst = static_cast<E *>(j.out[j.rank]);
    for (uint32_t m = 0; m < j.size; m++) {
        if (m == j.rank)
            continue;
        uint64_t lo, hi;
        disco__ar_range(&j, m, b, &lo, &hi);
        const E *src = static_cast<const E *>(j.out[m]);
        for (uint64_t i = lo + threadIdx.x; i < hi; i += blockDim.x)
            dst[i] = src[i];
    }
}

/* Block b: piece b (the protocol at the top of the file). A meeting that
 * fails ends the block at once, every thread alike (await). */
template <class R>
__global__ void __launch_bounds__(kThreads)
    ar_kernel(const __grid_constant__ disco__ar_job job, disco__ar_words *words)
{
    const uint32_t b = blockIdx.x;
    uint64_t lo, hi;
    /* F3: the START wait needs nothing beyond F2. A member arrives from
     * inside its kernel, so its stream had completed everything queued
     * before (its input's producers included) and those writes happen
     * before its release. */
    if (!meet(job, DISCO_AR_START, b, words))
        return;
    disco__ar_range(&job, job.two_shot ? job.rank : 0, b, &lo, &hi);
    reduce_range<R>(job, lo, hi);
    if (job.two_shot) {
        if (!meet(job, DISCO_AR_MID, b, words))
            return;
        gather_piece<typename R::E>(job, b);
    }
    /* After END nobody reads our input or output any more: our stream may
     * reuse them once the kernel is done. */
    (void)meet(job, DISCO_AR_END, b, words);
}

/* ---- dispatch ------------------------------------------------------------- */

template <class R> int launch(const disco__ar_job *job, cudaStream_t s, disco__ar_words *words)
{
    ar_kernel<R><<<job->pieces, kThreads, 0, s>>>(*job, words);
    return (int)cudaGetLastError();
}

template <class C>
int launch_float(const disco__ar_job *job, cudaStream_t s, disco__ar_words *words)
{
    switch (job->op) {
    case SUM:
        return launch<Float<C, SUM>>(job, s, words);
    case PROD:
        return launch<Float<C, PROD>>(job, s, words);
    case MIN:
        return launch<Float<C, MIN>>(job, s, words);
    case MAX:
        return launch<Float<C, MAX>>(job, s, words);
    case AVG:
        return launch<Float<C, AVG>>(job, s, words);
    default:
        return (int)cudaErrorInvalidValue;
    }
}

/* T the integer type, W its wrapping type, Avg its avg reduction. */
template <typename T, typename W, class Avg>
int launch_int(const disco__ar_job *job, cudaStream_t s, disco__ar_words *words)
{
    switch (job->op) {
    case SUM:
        return launch<IntWrap<T, W, SUM>>(job, s, words);
    case PROD:
        return launch<IntWrap<T, W, PROD>>(job, s, words);
    case MIN:
        return launch<IntMinMax<T, MIN>>(job, s, words);
    case MAX:
        return launch<IntMinMax<T, MAX>>(job, s, words);
    case AVG:
        return launch<Avg>(job, s, words);
    default:
        return (int)cudaErrorInvalidValue;
    }
}

int launch_bool(const disco__ar_job *job, cudaStream_t s, disco__ar_words *words)
{
    switch (job->op) {
    case SUM:
        return launch<Bool<SUM>>(job, s, words);
    case PROD:
        return launch<Bool<PROD>>(job, s, words);
    case MIN:
        return launch<Bool<MIN>>(job, s, words);
    case MAX:
        return launch<Bool<MAX>>(job, s, words);
    case AVG:
        return launch<Bool<AVG>>(job, s, words);
    default:
        return (int)cudaErrorInvalidValue;
    }
}

} // namespace

extern "C" int disco__cuda_ar_kernel(const struct disco__ar_job *job, void *stream,
                                     struct disco__ar_words *words_dev)
{
    /* The job is checked (disco__ar_launch); what the grid and the source
     * loops index by is checked again here, cheaply. */
    if (job->pieces < 1 || job->pieces > DISCO_AR_MAX_PIECES || job->size < 1 ||
        job->size > DISCO_AR_MAX_RANKS || job->rank >= job->size || job->dtype.lanes != 1)
        return (int)cudaErrorInvalidValue;
    cudaStream_t s = (cudaStream_t)stream;
    const unsigned bits = job->dtype.bits;
    switch (job->dtype.code) {
    case kDLFloat:
        if (bits == 16)
            return launch_float<F16>(job, s, words_dev);
        if (bits == 32)
            return launch_float<Same<float>>(job, s, words_dev);
        if (bits == 64)
            return launch_float<Same<double>>(job, s, words_dev);
        break;
    case kDLBfloat:
        if (bits == 16)
            return launch_float<BF16>(job, s, words_dev);
        break;
    case kDLInt:
        if (bits == 8)
            return launch_int<int8_t, uint32_t, IntAvg<int8_t>>(job, s, words_dev);
        if (bits == 16)
            return launch_int<int16_t, uint32_t, IntAvg<int16_t>>(job, s, words_dev);
        if (bits == 32)
            return launch_int<int32_t, uint32_t, IntAvg<int32_t>>(job, s, words_dev);
        if (bits == 64)
            return launch_int<int64_t, uint64_t, I64Avg>(job, s, words_dev);
        break;
    case kDLUInt:
        if (bits == 8)
            return launch_int<uint8_t, uint32_t, IntAvg<uint8_t>>(job, s, words_dev);
        if (bits == 1) /* TVM's bool, one byte per element */
            return launch_bool(job, s, words_dev);
        break;
    case DISCO_DL_BOOL:
        if (bits == 8)
            return launch_bool(job, s, words_dev);
        break;
    default:
        break;
    }
    return (int)cudaErrorInvalidValue;
}
