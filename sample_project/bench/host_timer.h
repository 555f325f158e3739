// Wall-clock timing of host kernels with std::chrono::steady_clock.
#pragma once

#include <chrono>
#include <cstddef>
#include <vector>

namespace bench {

// One untimed warm-up call, then `reps` timed calls. Returns milliseconds per call.
template <class Fn>
std::vector<double> time_host(Fn&& fn, int reps) {
    fn();
    std::vector<double> ms;
    ms.reserve(static_cast<std::size_t>(reps));
    for (int r = 0; r < reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        fn();
        const auto t1 = std::chrono::steady_clock::now();
        ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    return ms;
}

}  // namespace bench
