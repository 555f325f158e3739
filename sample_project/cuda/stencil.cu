// Memory-bound 3D star stencil of radius 2 (13 points), one output per
// thread. Neighbouring threads re-read each other's inputs, so the kernel
// relies on the L1/texture path for reuse: the global-load caching mode
// (-Xptxas -dlcm=ca|cg) and load/store cache hints change its bandwidth.
// The input is deliberately NOT marked __restrict__/__ldg so its loads are
// plain ld.global, whose caching is governed by -dlcm.
#include "kernels.h"

#include <cstddef>

namespace {

constexpr int BX = 32;
constexpr int BY = 8;

// (No __launch_bounds__, so that -maxrregcount applies to the kernel.)
__global__ void star13(const float* in, float* out, int nx, int ny, int nz, float c0, float c1, float c2) {
    const int x = blockIdx.x * BX + threadIdx.x;
    const int y = blockIdx.y * BY + threadIdx.y;
    const int z = blockIdx.z;
    if (x < 2 || y < 2 || z < 2 || x >= nx - 2 || y >= ny - 2 || z >= nz - 2) return;

    const std::ptrdiff_t sx = 1;
    const std::ptrdiff_t sy = nx;
    const std::ptrdiff_t sz = static_cast<std::ptrdiff_t>(nx) * ny;
    const std::ptrdiff_t c = z * sz + y * sy + x;

    const float near = in[c - sx] + in[c + sx] + in[c - sy] + in[c + sy] + in[c - sz] + in[c + sz];
    const float far = in[c - 2 * sx] + in[c + 2 * sx] + in[c - 2 * sy] + in[c + 2 * sy] + in[c - 2 * sz] +
                      in[c + 2 * sz];
    out[c] = c0 * in[c] + c1 * near + c2 * far;
}

}  // namespace

void stencil_launch(const float* in, float* out, int nx, int ny, int nz, float c0, float c1, float c2,
                    cudaStream_t s) {
    if (nx < 5 || ny < 5 || nz < 5) return;  // no interior points
    const dim3 block(BX, BY, 1);
    const dim3 grid((nx + BX - 1) / BX, (ny + BY - 1) / BY, nz);
    star13<<<grid, block, 0, s>>>(in, out, nx, ny, nz, c0, c1, c2);
}
