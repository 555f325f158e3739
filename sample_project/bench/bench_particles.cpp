// Benchmark driver for host_particles. Prints time_ms (median per rep),
// gflops (counting kFlopsPerElem per particle, special functions as 1) and
// check: ok.
#include <cmath>
#include <cstdio>
#include <vector>

#include "../cpu/host_kernels.h"
#include "bench_util.h"
#include "host_timer.h"

namespace {
constexpr double kFlopsPerElem = 15.0;
constexpr float kKappa = 0.75f;
constexpr float kSoft = 0.05f;
}  // namespace

int main(int argc, char** argv) {
    const bench::Args args = bench::parse_args(argc, argv, /*n=*/1 << 19, /*reps=*/16);
    if (args.n > (1L << 28)) {
        std::fprintf(stderr, "--n must be at most %ld\n", 1L << 28);
        return 2;
    }
    const int n = static_cast<int>(args.n);
    const std::size_t count = static_cast<std::size_t>(n);

    std::vector<float> x(count), y(count), z(count), m(count), out(count);
    bench::Rng rng(2024);
    for (std::size_t i = 0; i < count; ++i) {
        x[i] = rng.uniform(-2.0f, 2.0f);
        y[i] = rng.uniform(-2.0f, 2.0f);
        z[i] = rng.uniform(-2.0f, 2.0f);
        m[i] = rng.uniform(0.5f, 1.5f);
    }

    const auto ms = bench::time_host(
        [&] { host_particles(x.data(), y.data(), z.data(), m.data(), out.data(), n, kKappa, kSoft); }, args.reps);

    const double tol = 1e-3;
    bench::Rng pick(99);
    for (int t = 0; t < 1024; ++t) {
        const std::size_t i = static_cast<std::size_t>(pick.index(n));
        const double r = std::sqrt(static_cast<double>(x[i]) * x[i] + static_cast<double>(y[i]) * y[i] +
                                   static_cast<double>(z[i]) * z[i]);
        const double ref = m[i] * std::exp(-static_cast<double>(kKappa) * r) / (r + kSoft) + std::sqrt(m[i] * r + 1.0);
        if (!(std::fabs(out[i] - ref) <= tol * std::fabs(ref))) {
            std::fprintf(stderr, "check: FAILED out[%zu] = %.9g, expected %.9g (rel. tol %g)\n", i, out[i], ref, tol);
            return 1;
        }
    }

    const double t = bench::median(ms);
    bench::print_timing(t, "gflops", kFlopsPerElem * static_cast<double>(n) / (t * 1e6));
    bench::check_ok();
    return 0;
}
