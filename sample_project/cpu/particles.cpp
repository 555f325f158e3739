// Element-wise particle potential with sqrtf, expf and a division per
// element. Without -ffast-math (strictly: -fno-math-errno plus the vector
// math library), the expf/sqrtf calls keep the loop scalar; with it, GCC
// calls glibc's vector expf and vectorizes the loop.
#include "host_kernels.h"

#include <cmath>

void host_particles(const float* __restrict__ x, const float* __restrict__ y, const float* __restrict__ z,
                    const float* __restrict__ m, float* __restrict__ out, int n, float kappa, float soft) {
    for (int i = 0; i < n; ++i) {
        const float r = std::sqrt(x[i] * x[i] + y[i] * y[i] + z[i] * z[i]);
        out[i] = m[i] * std::exp(-kappa * r) / (r + soft) + std::sqrt(m[i] * r + 1.0f);
    }
}
