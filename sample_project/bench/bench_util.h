// Small helpers shared by the sample benchmarks: argument parsing,
// a deterministic random generator, median and result printing.
// Host-only C++17; also included from the .cu benchmark drivers.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <vector>

namespace bench {

struct Args {
    long n = 0;
    int reps = 0;
};

// Parses "--n <size> --reps <k>" (also "--n=<size>"). Unknown arguments
// and non-positive values are rejected with exit code 2.
inline Args parse_args(int argc, char** argv, long default_n, int default_reps) {
    Args a;
    a.n = default_n;
    a.reps = default_reps;
    auto usage = [&](const char* why) {
        std::fprintf(stderr, "%s: %s\nusage: %s [--n <size>] [--reps <count>]  (defaults: --n %ld --reps %d)\n",
                     argv[0], why, argv[0], default_n, default_reps);
        std::exit(2);
    };
    auto parse_long = [&](const char* s) {
        char* end = nullptr;
        long v = std::strtol(s, &end, 10);
        if (end == s || *end != '\0' || v <= 0) usage("expected a positive integer");
        return v;
    };
    for (int i = 1; i < argc; ++i) {
        const char* arg = argv[i];
        const char* val = nullptr;
        bool is_n = false;
        if (std::strcmp(arg, "--help") == 0 || std::strcmp(arg, "-h") == 0) {
            std::printf("usage: %s [--n <size>] [--reps <count>]  (defaults: --n %ld --reps %d)\n", argv[0],
                        default_n, default_reps);
            std::exit(0);
        } else if (std::strcmp(arg, "--n") == 0 || std::strcmp(arg, "--reps") == 0) {
            if (i + 1 >= argc) usage("missing value");
            is_n = (arg[2] == 'n');
            val = argv[++i];
        } else if (std::strncmp(arg, "--n=", 4) == 0) {
            is_n = true;
            val = arg + 4;
        } else if (std::strncmp(arg, "--reps=", 7) == 0) {
            val = arg + 7;
        } else {
            usage("unknown argument");
        }
        long v = parse_long(val);
        if (is_n) {
            a.n = v;
        } else {
            if (v > 100000) usage("--reps too large");
            a.reps = static_cast<int>(v);
        }
    }
    return a;
}

// splitmix64-based generator: fast, deterministic, platform independent.
class Rng {
public:
    explicit Rng(std::uint64_t seed) : state_(seed) {}
    std::uint64_t next() {
        std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    // Uniform float in [lo, hi).
    float uniform(float lo, float hi) {
        const float u = static_cast<float>(next() >> 40) * (1.0f / 16777216.0f);
        return lo + (hi - lo) * u;
    }
    // Uniform index in [0, n).
    long index(long n) { return static_cast<long>(next() % static_cast<std::uint64_t>(n)); }

private:
    std::uint64_t state_;
};

inline double median(std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    const std::size_t m = v.size() / 2;
    return (v.size() % 2) ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// Prints the result lines parsed by compileiq_build:
//   time_ms: <median ms>
//   <rate_name>: <rate>
inline void print_timing(double time_ms, const char* rate_name, double rate) {
    std::printf("time_ms: %.7g\n", time_ms);
    std::printf("%s: %.7g\n", rate_name, rate);
}

inline void check_ok() {
    std::printf("check: ok\n");
    std::fflush(stdout);
}

// Checks 256 sampled entries of C = A * B (row-major n x n) against a
// double-precision reference; prints the first mismatch and returns false.
inline bool check_matmul_samples(const std::vector<float>& A, const std::vector<float>& B,
                                 const std::vector<float>& C, long n, double tol) {
    Rng pick(777);
    for (int t = 0; t < 256; ++t) {
        const long i = pick.index(n), j = pick.index(n);
        double ref = 0.0;
        for (long k = 0; k < n; ++k) ref += static_cast<double>(A[i * n + k]) * B[k * n + j];
        const double got = C[i * n + j];
        if (!(std::fabs(got - ref) <= tol * std::fabs(ref))) {
            std::fprintf(stderr, "check: FAILED C[%ld][%ld] = %.9g, expected %.9g (rel. tol %g)\n", i, j, got,
                         ref, tol);
            return false;
        }
    }
    return true;
}

}  // namespace bench
