// Benchmark driver for host_matmul. Prints time_ms (median per rep),
// gflops and check: ok.
#include <cmath>
#include <cstdio>
#include <vector>

#include "../cpu/host_kernels.h"
#include "bench_util.h"
#include "host_timer.h"

int main(int argc, char** argv) {
    const bench::Args args = bench::parse_args(argc, argv, /*n=*/256, /*reps=*/7);
    if (args.n > 8192) {
        std::fprintf(stderr, "--n must be at most 8192\n");
        return 2;
    }
    const int n = static_cast<int>(args.n);
    const std::size_t elems = static_cast<std::size_t>(n) * n;

    std::vector<float> A(elems), B(elems), C(elems);
    bench::Rng rng(12345);
    for (auto& v : A) v = rng.uniform(0.1f, 1.1f);
    for (auto& v : B) v = rng.uniform(0.1f, 1.1f);

    const auto ms = bench::time_host([&] { host_matmul(A.data(), B.data(), C.data(), n); }, args.reps);

    if (!bench::check_matmul_samples(A, B, C, n, /*tol=*/1e-3)) return 1;

    const double t = bench::median(ms);
    bench::print_timing(t, "gflops", 2.0 * n * static_cast<double>(n) * n / (t * 1e6));
    bench::check_ok();
    return 0;
}
