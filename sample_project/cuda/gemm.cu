// Register-blocked tiled SGEMM: each 256-thread block computes a 128x128 tile
// of C, each thread an 8x8 sub-block held in 64 accumulator registers.
// Shared-memory tiles of A (stored transposed) and B are BK=8 deep.
// Speed depends strongly on register allocation (-maxrregcount,
// -Xptxas -O<n>, register-usage level) and on FMA contraction.
#include "kernels.h"

#include <cstddef>

namespace {

constexpr int BM = 128;
constexpr int BN = 128;
constexpr int BK = 8;
constexpr int THREADS = 256;  // 16 x 16 threads, 8x8 outputs each

// No __launch_bounds__: it would make nvcc ignore -maxrregcount for this kernel.
__global__ void sgemm_reg8x8(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                             int n) {
    __shared__ __align__(16) float As[BK][BM];  // As[k][m] = A[row m][col k]
    __shared__ __align__(16) float Bs[BK][BN];  // Bs[k][c] = B[row k][col c]

    const int tid = threadIdx.x;
    const int tx = tid % 16;
    const int ty = tid / 16;
    const int row0 = blockIdx.y * BM;
    const int col0 = blockIdx.x * BN;
    const std::size_t ldn = static_cast<std::size_t>(n);

    // Global -> shared copy assignment: A tile is 128 rows x 8 cols (4 floats
    // per thread), B tile is 8 rows x 128 cols (4 floats per thread).
    const int a_row = tid / 2;
    const int a_col = (tid % 2) * 4;
    const int b_row = tid / 32;
    const int b_col = (tid % 32) * 4;

    // A thread owns rows {ty*4+i, 64+ty*4+i} and cols {tx*4+j, 64+tx*4+j}:
    // this keeps the shared-memory float4 reads conflict free.
    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;

    const bool vec_ok = (n % 4) == 0;

    for (int k0 = 0; k0 < n; k0 += BK) {
        const bool full = vec_ok && (row0 + BM <= n) && (col0 + BN <= n) && (k0 + BK <= n);
        if (full) {
            const float4 av = *reinterpret_cast<const float4*>(&A[(row0 + a_row) * ldn + k0 + a_col]);
            As[a_col + 0][a_row] = av.x;
            As[a_col + 1][a_row] = av.y;
            As[a_col + 2][a_row] = av.z;
            As[a_col + 3][a_row] = av.w;
            *reinterpret_cast<float4*>(&Bs[b_row][b_col]) =
                *reinterpret_cast<const float4*>(&B[(k0 + b_row) * ldn + col0 + b_col]);
        } else {
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int ar = row0 + a_row, ac = k0 + a_col + j;
                As[a_col + j][a_row] = (ar < n && ac < n) ? A[ar * ldn + ac] : 0.0f;
                const int br = k0 + b_row, bc = col0 + b_col + j;
                Bs[b_row][b_col + j] = (br < n && bc < n) ? B[br * ldn + bc] : 0.0f;
            }
        }
        __syncthreads();

#pragma unroll
        for (int k = 0; k < BK; ++k) {
            const float4 a0 = *reinterpret_cast<const float4*>(&As[k][ty * 4]);
            const float4 a1 = *reinterpret_cast<const float4*>(&As[k][64 + ty * 4]);
            const float4 b0 = *reinterpret_cast<const float4*>(&Bs[k][tx * 4]);
            const float4 b1 = *reinterpret_cast<const float4*>(&Bs[k][64 + tx * 4]);
            const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            const float b[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[i][j] += a[i] * b[j];
        }
        __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int r = row0 + (i < 4 ? ty * 4 + i : 64 + ty * 4 + (i - 4));
        if (r >= n) continue;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int c = col0 + h * 64 + tx * 4;
            float* dst = &C[r * ldn + c];
            if (vec_ok && c + 3 < n) {
                *reinterpret_cast<float4*>(dst) =
                    make_float4(acc[i][h * 4 + 0], acc[i][h * 4 + 1], acc[i][h * 4 + 2], acc[i][h * 4 + 3]);
            } else {
#pragma unroll
                for (int j = 0; j < 4; ++j)
                    if (c + j < n) dst[j] = acc[i][h * 4 + j];
            }
        }
    }
}

}  // namespace

void gemm_launch(const float* A, const float* B, float* C, int n, cudaStream_t s) {
    if (n <= 0) return;
    const dim3 grid((n + BN - 1) / BN, (n + BM - 1) / BM);
    sgemm_reg8x8<<<grid, THREADS, 0, s>>>(A, B, C, n);
}
