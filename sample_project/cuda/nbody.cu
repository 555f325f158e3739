// All-pairs n-body step with a screened (Yukawa-like) softened force.
// Every pair evaluates sqrtf, expf and a float division, so the speed is
// dominated by how special functions are compiled: --use_fast_math,
// -ftz, -prec-div, -prec-sqrt change the instruction sequences a lot.
#include "kernels.h"

namespace {

constexpr int BLOCK = 128;

// (No __launch_bounds__, so that -maxrregcount applies to the kernel.)
__global__ void nbody_accel(const float4* __restrict__ pos, float4* __restrict__ acc, int n, float eps2,
                            float kappa) {
    __shared__ float4 tile[BLOCK];
    const int i = blockIdx.x * BLOCK + threadIdx.x;
    const float4 pi = (i < n) ? pos[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    float ax = 0.0f, ay = 0.0f, az = 0.0f;

    for (int base = 0; base < n; base += BLOCK) {
        const int j = base + threadIdx.x;
        // Padding bodies have zero mass and contribute nothing.
        tile[threadIdx.x] = (j < n) ? pos[j] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        __syncthreads();
#pragma unroll 4
        for (int t = 0; t < BLOCK; ++t) {
            const float4 pj = tile[t];
            const float dx = pj.x - pi.x;
            const float dy = pj.y - pi.y;
            const float dz = pj.z - pi.z;
            const float r2 = dx * dx + dy * dy + dz * dz + eps2;
            const float r = sqrtf(r2);
            const float kr = kappa * r;
            const float s = pj.w * expf(-kr) * (1.0f + kr) / (r2 * r);
            ax += s * dx;
            ay += s * dy;
            az += s * dz;
        }
        __syncthreads();
    }
    if (i < n) acc[i] = make_float4(ax, ay, az, 0.0f);
}

}  // namespace

void nbody_launch(const float4* pos, float4* acc, int n, float eps2, float kappa, cudaStream_t s) {
    if (n <= 0) return;
    nbody_accel<<<(n + BLOCK - 1) / BLOCK, BLOCK, 0, s>>>(pos, acc, n, eps2, kappa);
}
