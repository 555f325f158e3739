// Separable 5-tap blur: a horizontal pass into tmp, then a vertical pass
// into out. Interior loops have no branches so they vectorize; only the two
// outermost columns/rows on each side use clamped indices.
#include "host_kernels.h"

#include <algorithm>
#include <cstddef>

namespace {

constexpr float kW0 = 6.0f / 16.0f;
constexpr float kW1 = 4.0f / 16.0f;
constexpr float kW2 = 1.0f / 16.0f;

inline int clampi(int v, int lo, int hi) { return std::min(std::max(v, lo), hi); }

void blur_row(const float* __restrict__ src, float* __restrict__ dst, int w) {
    auto at = [&](int x) { return src[clampi(x, 0, w - 1)]; };
    const int edge = std::min(2, w);
    for (int x = 0; x < edge; ++x)
        dst[x] = kW0 * at(x) + kW1 * (at(x - 1) + at(x + 1)) + kW2 * (at(x - 2) + at(x + 2));
    for (int x = 2; x < w - 2; ++x)
        dst[x] = kW0 * src[x] + kW1 * (src[x - 1] + src[x + 1]) + kW2 * (src[x - 2] + src[x + 2]);
    for (int x = std::max(edge, w - 2); x < w; ++x)
        dst[x] = kW0 * at(x) + kW1 * (at(x - 1) + at(x + 1)) + kW2 * (at(x - 2) + at(x + 2));
}

}  // namespace

void host_blur(const float* in, float* tmp, float* out, int w, int h) {
    if (w <= 0 || h <= 0) return;
    const std::size_t ld = static_cast<std::size_t>(w);

    for (int y = 0; y < h; ++y) blur_row(in + y * ld, tmp + y * ld, w);

    for (int y = 0; y < h; ++y) {
        const float* __restrict__ r_2 = tmp + clampi(y - 2, 0, h - 1) * ld;
        const float* __restrict__ r_1 = tmp + clampi(y - 1, 0, h - 1) * ld;
        const float* __restrict__ r0 = tmp + y * ld;
        const float* __restrict__ r1 = tmp + clampi(y + 1, 0, h - 1) * ld;
        const float* __restrict__ r2 = tmp + clampi(y + 2, 0, h - 1) * ld;
        float* __restrict__ o = out + y * ld;
        for (std::size_t x = 0; x < ld; ++x) o[x] = kW0 * r0[x] + kW1 * (r_1[x] + r1[x]) + kW2 * (r_2[x] + r2[x]);
    }
}
