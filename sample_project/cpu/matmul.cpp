// Float matrix multiply in i-k-j order: the inner loop over j is a
// unit-stride "C_row += a * B_row" that the compiler can vectorize (at -O3,
// or -O2 with vectorization enabled) and widen with -march=native.
#include "host_kernels.h"

#include <cstddef>

void host_matmul(const float* A, const float* B, float* C, int n) {
    const std::size_t ld = static_cast<std::size_t>(n);
    for (std::size_t i = 0; i < ld; ++i) {
        float* __restrict__ c = C + i * ld;
        for (std::size_t j = 0; j < ld; ++j) c[j] = 0.0f;
        for (std::size_t k = 0; k < ld; ++k) {
            const float a = A[i * ld + k];
            const float* __restrict__ b = B + k * ld;
            for (std::size_t j = 0; j < ld; ++j) c[j] += a * b[j];
        }
    }
}
