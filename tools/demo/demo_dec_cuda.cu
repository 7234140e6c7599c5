/* demo_dec_cuda.cu - the decoder's GPU kernels (demo_dec_kernels.h): the
 * one-command step's model work on CUDA devices, float32 throughout.
 *
 * Built by nvcc to PTX (the Makefile's CUDA block), embedded in the demo
 * library as a string and loaded through the CUDA driver at run time
 * (demo_dec_kernels.c: dlopen of libcuda.so.1, cuModuleLoadData), so the
 * library needs no CUDA runtime of its own: it launches into the context
 * disco's runtime made current. Each kernel mirrors a host function of
 * demo_dec_kernels.c; the reference is the one-process model in double
 * (demo_decoder_ref.c), so the sums' order may differ (about 1e-6).
 *
 * Never run on a GPU by its author (no GPU was lent): compiled only. */

/* out[cols] = x[rows] W[rows, cols]: a thread a column, rows summed in
 * order (reads of W coalesced across the threads of a warp). */
extern "C" __global__ void dk_matvec(const float *x, const float *w, float *out, long long rows,
                                     long long cols)
{
    long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= cols)
        return;
    float acc = 0.0f;
    for (long long i = 0; i < rows; i++)
        acc += x[i] * w[i * cols + j];
    out[j] = acc;
}

/* Sum of v over the block (blockDim.x a power of two, red blockDim.x
 * floats); every thread gets it. Ends with a barrier, so red may be reused. */
__device__ static float block_sum(float v, float *red)
{
    red[threadIdx.x] = v;
    __syncthreads();
    for (unsigned k = blockDim.x / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k)
            red[threadIdx.x] += red[threadIdx.x + k];
        __syncthreads();
    }
    float r = red[0];
    __syncthreads();
    return r;
}

__device__ static float block_max(float v, float *red)
{
    red[threadIdx.x] = v;
    __syncthreads();
    for (unsigned k = blockDim.x / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k)
            red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + k]);
        __syncthreads();
    }
    float r = red[0];
    __syncthreads();
    return r;
}

#define DK_BLOCK 256 /* threads of the one-block kernels (a power of two) */

/* out = x / sqrt(mean(x^2) + eps) * gain: one block. */
extern "C" __global__ void dk_rmsnorm(const float *x, const float *gain, float *out, long long d,
                                      float eps)
{
    __shared__ float red[DK_BLOCK];
    float acc = 0.0f;
    for (long long i = threadIdx.x; i < d; i += blockDim.x)
        acc += x[i] * x[i];
    float inv = rsqrtf(block_sum(acc, red) / (float)d + eps);
    for (long long i = threadIdx.x; i < d; i += blockDim.x)
        out[i] = x[i] * inv * gain[i];
}

/* Rotates pair (2p, 2p + 1) of each of nh heads of v by pos * base^(-2p /
 * hd): a thread a (head, pair); the angle in double, as on the host. */
extern "C" __global__ void dk_rope(float *v, long long nh, long long hd, long long pos, double base)
{
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x, half = hd / 2;
    if (t >= nh * half)
        return;
    long long h = t / half, p = t % half;
    double a = (double)pos * pow(base, -2.0 * (double)p / (double)hd);
    float c = (float)cos(a), s = (float)sin(a);
    float *x = v + h * hd + 2 * p, x0 = x[0], x1 = x[1];
    x[0] = x0 * c - x1 * s;
    x[1] = x0 * s + x1 * c;
}

/* o[h * hd ..] = causal attention of head h's q over K, V rows 0..pos
 * (row stride ld): a block a head; the scores in dynamic shared memory
 * (pos + 1 floats, then DK_BLOCK for the reductions). */
extern "C" __global__ void dk_attend(const float *q, const float *k, const float *v, float *o,
                                     long long hd, long long ld, long long pos, float scale)
{
    extern __shared__ float sh[];
    float *p = sh, *red = sh + pos + 1;
    long long h = blockIdx.x;
    float most = -INFINITY, sum = 0.0f;
    for (long long t = threadIdx.x; t <= pos; t += blockDim.x) {
        float dot = 0.0f;
        for (long long i = 0; i < hd; i++)
            dot += q[h * hd + i] * k[t * ld + h * hd + i];
        p[t] = dot * scale;
        most = fmaxf(most, p[t]);
    }
    most = block_max(most, red);
    for (long long t = threadIdx.x; t <= pos; t += blockDim.x) {
        p[t] = expf(p[t] - most);
        sum += p[t];
    }
    sum = block_sum(sum, red); /* its barriers also publish p[] */
    for (long long i = threadIdx.x; i < hd; i += blockDim.x) {
        float acc = 0.0f;
        for (long long t = 0; t <= pos; t++)
            acc += p[t] / sum * v[t * ld + h * hd + i];
        o[h * hd + i] = acc;
    }
}

/* v = gelu(v) (the tanh form of demo_mlp_gelu). */
extern "C" __global__ void dk_gelu(float *v, long long n)
{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float x = v[i];
        v[i] = 0.5f * x * (1.0f + tanhf(0.7978845608f * (x + 0.044715f * x * x * x)));
    }
}

/* h += a. */
extern "C" __global__ void dk_add(float *h, const float *a, long long n)
{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        h[i] += a[i];
}
