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

    const double tol = 1e-3;
    bench::Rng pick(777);
    for (int t = 0; t < 256; ++t) {
        const long i = pick.index(n), j = pick.index(n);
        double ref = 0.0;
        for (long k = 0; k < n; ++k) ref += static_cast<double>(A[i * n + k]) * B[k * n + j];
        const double got = C[i * n + j];
        if (!(std::fabs(got - ref) <= tol * std::fabs(ref))) {
            std::fprintf(stderr, "check: FAILED C[%ld][%ld] = %.9g, expected %.9g (rel. tol %g)\n", i, j, got, ref,
                         tol);
            return 1;
        }
    }

    const double t = bench::median(ms);
    bench::print_timing(t, "gflops", 2.0 * n * static_cast<double>(n) * n / (t * 1e6));
    bench::check_ok();
    return 0;
}
