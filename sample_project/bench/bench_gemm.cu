// Benchmark driver for gemm_kernels: C = A * B, square float matrices.
// Prints time_ms (median per launch), gflops and check: ok.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "../cuda/kernels.h"
#include "bench_util.h"
#include "cuda_bench_util.h"

int main(int argc, char** argv) {
    const bench::Args args = bench::parse_args(argc, argv, /*n=*/4096, /*reps=*/20);
    if (args.n > 16384) {
        std::fprintf(stderr, "--n must be at most 16384\n");
        return 2;
    }
    const int n = static_cast<int>(args.n);
    const std::size_t elems = static_cast<std::size_t>(n) * n;
    const std::size_t bytes = elems * sizeof(float);

    bench::require_gpu();

    // Positive, non-zero inputs: no cancellation, so |C| is a good scale.
    std::vector<float> A(elems), B(elems), C(elems);
    bench::Rng rng(12345);
    for (auto& v : A) v = rng.uniform(0.1f, 1.1f);
    for (auto& v : B) v = rng.uniform(0.1f, 1.1f);

    float *dA = nullptr, *dB = nullptr, *dC = nullptr;
    CUDA_CHECK(cudaMalloc(&dA, bytes));
    CUDA_CHECK(cudaMalloc(&dB, bytes));
    CUDA_CHECK(cudaMalloc(&dC, bytes));
    CUDA_CHECK(cudaMemcpy(dA, A.data(), bytes, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dB, B.data(), bytes, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(dC, 0, bytes));
    cudaStream_t s = nullptr;
    CUDA_CHECK(cudaStreamCreate(&s));

    const auto ms = bench::time_launches([&] { gemm_launch(dA, dB, dC, n, s); }, /*warmup=*/3, args.reps, s);
    CUDA_CHECK(cudaMemcpy(C.data(), dC, bytes, cudaMemcpyDeviceToHost));

    if (!bench::check_matmul_samples(A, B, C, n, /*tol=*/1e-3)) return 1;

    const double t = bench::median(ms);
    const double flops = 2.0 * n * static_cast<double>(n) * n;
    bench::print_timing(t, "gflops", flops / (t * 1e6));
    bench::check_ok();

    CUDA_CHECK(cudaStreamDestroy(s));
    CUDA_CHECK(cudaFree(dA));
    CUDA_CHECK(cudaFree(dB));
    CUDA_CHECK(cudaFree(dC));
    return 0;
}
