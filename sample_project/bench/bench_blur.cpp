// Benchmark driver for host_blur on an n x n image. Prints time_ms (median
// per rep), gbps (memory traffic of both passes: read in, write tmp, read
// tmp, write out = 16 bytes per pixel) and check: ok.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "../cpu/host_kernels.h"
#include "bench_util.h"
#include "host_timer.h"

int main(int argc, char** argv) {
    const bench::Args args = bench::parse_args(argc, argv, /*n=*/1024, /*reps=*/20);
    if (args.n > 32768) {
        std::fprintf(stderr, "--n must be at most 32768\n");
        return 2;
    }
    const int w = static_cast<int>(args.n), h = w;
    const std::size_t pixels = static_cast<std::size_t>(w) * h;

    std::vector<float> in(pixels), tmp(pixels), out(pixels);
    bench::Rng rng(4242);
    for (auto& v : in) v = rng.uniform(0.1f, 1.1f);

    const auto ms = bench::time_host([&] { host_blur(in.data(), tmp.data(), out.data(), w, h); }, args.reps);

    // Reference: the full 5x5 outer-product kernel with clamp-to-edge, in double.
    const double wt[5] = {1.0 / 16, 4.0 / 16, 6.0 / 16, 4.0 / 16, 1.0 / 16};
    const double tol = 1e-3;
    bench::Rng pick(31337);
    for (int t = 0; t < 512; ++t) {
        // Random pixels; every 4th sample on the left/right border, every
        // 4th (offset) on the top/bottom border, to cover the clamped paths.
        long x = pick.index(w), y = pick.index(h);
        if (t % 4 == 1) x = ((t / 4) % 2) ? 0 : w - 1;
        if (t % 4 == 2) y = ((t / 4) % 2) ? 0 : h - 1;
        double ref = 0.0;
        for (int dy = -2; dy <= 2; ++dy)
            for (int dx = -2; dx <= 2; ++dx) {
                const long yy = std::clamp<long>(y + dy, 0, h - 1), xx = std::clamp<long>(x + dx, 0, w - 1);
                ref += wt[dy + 2] * wt[dx + 2] * in[static_cast<std::size_t>(yy * w + xx)];
            }
        const double got = out[static_cast<std::size_t>(y * w + x)];
        if (!(std::fabs(got - ref) <= tol * std::fabs(ref))) {
            std::fprintf(stderr, "check: FAILED out(%ld,%ld) = %.9g, expected %.9g (rel. tol %g)\n", x, y, got, ref,
                         tol);
            return 1;
        }
    }

    const double t = bench::median(ms);
    bench::print_timing(t, "gbps", 16.0 * static_cast<double>(pixels) / (t * 1e6));
    bench::check_ok();
    return 0;
}
