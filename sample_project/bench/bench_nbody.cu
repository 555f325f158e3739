// Benchmark driver for nbody_kernels: one all-pairs acceleration step.
// Prints time_ms (median per launch), gflops (counting kFlopsPerPair per
// body pair) and check: ok.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "../cuda/kernels.h"
#include "bench_util.h"
#include "cuda_bench_util.h"

namespace {
// Nominal operation count of one pair interaction: 3 (d) + 6 (r^2 + eps2)
// + 1 (sqrt) + 1 (exp) + 1 (div) + 5 (other mul/add) + 6 (3 fma) = 23.
constexpr double kFlopsPerPair = 23.0;
constexpr float kEps2 = 1e-2f;
constexpr float kKappa = 0.5f;
}  // namespace

int main(int argc, char** argv) {
    const bench::Args args = bench::parse_args(argc, argv, /*n=*/65536, /*reps=*/20);
    if (args.n > (1L << 24)) {
        std::fprintf(stderr, "--n must be at most %ld\n", 1L << 24);
        return 2;
    }
    const int n = static_cast<int>(args.n);
    const std::size_t bytes = static_cast<std::size_t>(n) * sizeof(float4);

    bench::require_gpu();

    std::vector<float4> pos(static_cast<std::size_t>(n)), acc(static_cast<std::size_t>(n));
    bench::Rng rng(2024);
    for (auto& p : pos) {
        p.x = rng.uniform(-1.0f, 1.0f);
        p.y = rng.uniform(-1.0f, 1.0f);
        p.z = rng.uniform(-1.0f, 1.0f);
        p.w = rng.uniform(0.5f, 1.5f);  // mass
    }

    float4 *dPos = nullptr, *dAcc = nullptr;
    CUDA_CHECK(cudaMalloc(&dPos, bytes));
    CUDA_CHECK(cudaMalloc(&dAcc, bytes));
    CUDA_CHECK(cudaMemcpy(dPos, pos.data(), bytes, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(dAcc, 0, bytes));
    cudaStream_t s = nullptr;
    CUDA_CHECK(cudaStreamCreate(&s));

    const auto ms =
        bench::time_launches([&] { nbody_launch(dPos, dAcc, n, kEps2, kKappa, s); }, /*warmup=*/2, args.reps, s);
    CUDA_CHECK(cudaMemcpy(acc.data(), dAcc, bytes, cudaMemcpyDeviceToHost));

    // Verify 128 sampled bodies against a double-precision reference. The
    // tolerance (1e-2 relative) is loose enough for --use_fast_math; where
    // the forces nearly cancel, the error is measured against 1% of the sum
    // of the contribution magnitudes instead.
    const double tol = 1e-2;
    bench::Rng pick(99);
    for (int t = 0; t < 128; ++t) {
        const long i = pick.index(n);
        const float4 pi = pos[static_cast<std::size_t>(i)];
        double ax = 0.0, ay = 0.0, az = 0.0, mag = 0.0;
        for (const float4& pj : pos) {
            const double dx = static_cast<double>(pj.x) - pi.x;
            const double dy = static_cast<double>(pj.y) - pi.y;
            const double dz = static_cast<double>(pj.z) - pi.z;
            const double r2 = dx * dx + dy * dy + dz * dz + kEps2;
            const double r = std::sqrt(r2);
            const double kr = static_cast<double>(kKappa) * r;
            const double f = pj.w * std::exp(-kr) * (1.0 + kr) / (r2 * r);
            ax += f * dx;
            ay += f * dy;
            az += f * dz;
            mag += f * std::sqrt(dx * dx + dy * dy + dz * dz);
        }
        const float4 g = acc[static_cast<std::size_t>(i)];
        const double ex = g.x - ax, ey = g.y - ay, ez = g.z - az;
        const double err = std::sqrt(ex * ex + ey * ey + ez * ez);
        const double ref = std::sqrt(ax * ax + ay * ay + az * az);
        const double scale = std::max(ref, 1e-2 * mag);
        if (!(err <= tol * scale)) {
            std::fprintf(stderr,
                         "check: FAILED body %ld: acc = (%.7g, %.7g, %.7g), expected (%.7g, %.7g, %.7g), "
                         "error %.3g > %g * %.3g\n",
                         i, g.x, g.y, g.z, ax, ay, az, err, tol, scale);
            return 1;
        }
    }

    const double t = bench::median(ms);
    const double flops = kFlopsPerPair * n * static_cast<double>(n);
    bench::print_timing(t, "gflops", flops / (t * 1e6));
    bench::check_ok();

    CUDA_CHECK(cudaStreamDestroy(s));
    CUDA_CHECK(cudaFree(dPos));
    CUDA_CHECK(cudaFree(dAcc));
    return 0;
}
