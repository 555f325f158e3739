// Host launch wrappers for the sample CUDA kernels. The kernels themselves
// live in the static libraries gemm_kernels, nbody_kernels and
// stencil_kernels, so device-compiler flags applied to those libraries
// change the generated kernel code. All wrappers are asynchronous on the
// given stream; call cudaGetLastError() afterwards to catch launch errors.
#pragma once

#include <cuda_runtime.h>

// C = A * B for square row-major n x n float matrices (any n >= 1).
void gemm_launch(const float* A, const float* B, float* C, int n, cudaStream_t s);

// All-pairs screened-gravity accelerations. pos[i] = (x, y, z, mass);
// acc[i] = (ax, ay, az, 0). Pair force per unit mass:
//   m_j * exp(-kappa r) * (1 + kappa r) / r^3 * d,   r = sqrt(|d|^2 + eps2)
void nbody_launch(const float4* pos, float4* acc, int n, float eps2, float kappa, cudaStream_t s);

// Radius-2 star stencil (13 points) on an nx*ny*nz grid, x fastest:
//   out = c0*in + c1*(6 nearest neighbours) + c2*(6 neighbours at distance 2)
// Only interior points (2 away from every face) are written.
void stencil_launch(const float* in, float* out, int nx, int ny, int nz, float c0, float c1, float c2,
                    cudaStream_t s);
