"""An NVBench program (PyPI cuda-bench with CuPy, on a GPU).

The parser tests read JSON it wrote on the H200 (tests/data/nvbench_*.json); a GPU
test runs it as a real benchmark process.  Capture again with:
  python nvbench_program.py --json nvbench_states.json
  python nvbench_program.py -b single --json nvbench_single.json
"""

import sys

import cuda.bench as bench
import cupy as cp

_SAXPY = cp.RawKernel(r"""
extern "C" __global__ void saxpy(float a, const float* x, float* y, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}""", "saxpy")


def _stream(launch):
    return cp.cuda.ExternalStream(launch.get_stream().__cuda_stream__()[1])


def _saxpy(state, n):
    x = cp.ones(n, dtype=cp.float32)
    y = cp.ones(n, dtype=cp.float32)
    state.add_global_memory_reads(2 * 4 * n)
    state.add_global_memory_writes(4 * n)

    def launch(launch_state):
        with _stream(launch_state):
            _SAXPY(((n + 255) // 256,), (256,), (cp.float32(2.0), x, y, cp.int64(n)))

    state.exec(launch)


@bench.register()
@bench.axis.int64_power_of_two("Elements", [20, 24])
def saxpy(state):
    _saxpy(state, state.get_int64("Elements"))


@bench.register()
def single(state):
    _saxpy(state, 1 << 22)


if __name__ == "__main__":
    bench.run_all_benchmarks(sys.argv)
