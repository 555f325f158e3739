// Host (CPU) kernels of the sample project, one static library each:
// host_matmul, host_blur, host_particles. They are plain loops meant to be
// tuned with host compiler flags (-O level, -funroll-loops, -march=native,
// -ffast-math); the benchmark drivers live in bench/.
#pragma once

// C = A * B for square row-major n x n matrices (i-k-j loop order, so the
// innermost loop is a unit-stride axpy that vectorizes).
void host_matmul(const float* A, const float* B, float* C, int n);

// Separable 5-tap Gaussian blur (weights 1 4 6 4 1 / 16 per axis) of a
// w x h image with clamp-to-edge borders. tmp and out are w*h floats.
void host_blur(const float* in, float* tmp, float* out, int w, int h);

// Per particle i, with r = sqrt(x^2 + y^2 + z^2):
//   out[i] = m[i] * exp(-kappa r) / (r + soft) + sqrt(m[i] * r + 1)
void host_particles(const float* x, const float* y, const float* z, const float* m, float* out, int n, float kappa,
                    float soft);
