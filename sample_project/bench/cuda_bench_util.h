// CUDA helpers for the sample benchmarks: error checking (exit code 2 on
// any CUDA error, including "no GPU present") and cudaEvent-based timing.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#define CUDA_CHECK(call) ::bench::cuda_check((call), #call, __FILE__, __LINE__)

namespace bench {

inline void cuda_check(cudaError_t err, const char* what, const char* file, int line) {
    if (err != cudaSuccess) {
        std::fprintf(stderr, "CUDA error: %s failed at %s:%d: %s (%s)\n", what, file, line, cudaGetErrorName(err),
                     cudaGetErrorString(err));
        std::exit(2);
    }
}

// Exits with code 2 and a clear message when no usable GPU is present.
inline void require_gpu() {
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
        std::fprintf(stderr, "error: no usable CUDA device: %s. This benchmark needs an NVIDIA GPU.\n",
                     err != cudaSuccess ? cudaGetErrorString(err) : "device count is 0");
        std::exit(2);
    }
    CUDA_CHECK(cudaSetDevice(0));
}

// Runs `warmup` untimed launches, then times each of `reps` launches with a
// pair of CUDA events on stream s. Returns per-launch milliseconds.
template <class Launch>
std::vector<double> time_launches(Launch&& launch, int warmup, int reps, cudaStream_t s) {
    for (int i = 0; i < warmup; ++i) {
        launch();
        CUDA_CHECK(cudaGetLastError());
    }
    CUDA_CHECK(cudaStreamSynchronize(s));

    cudaEvent_t start = nullptr, stop = nullptr;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    std::vector<double> ms;
    ms.reserve(static_cast<std::size_t>(reps));
    for (int r = 0; r < reps; ++r) {
        CUDA_CHECK(cudaEventRecord(start, s));
        launch();
        CUDA_CHECK(cudaGetLastError());
        CUDA_CHECK(cudaEventRecord(stop, s));
        CUDA_CHECK(cudaEventSynchronize(stop));
        float t = 0.0f;
        CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
        ms.push_back(static_cast<double>(t));
    }
    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
    return ms;
}

}  // namespace bench
