# A Google Benchmark program (PyPI google-benchmark) used by the tests as a real benchmark process.
import google_benchmark as benchmark


@benchmark.register
@benchmark.option.range(1 << 10, 1 << 14)
@benchmark.option.range_multiplier(4)
def sum_list(state):
    n = state.range(0)
    data = list(range(n))
    while state:
        sum(data)

@benchmark.register
def sort_small(state):
    data = [5, 3, 9, 1] * 64
    while state:
        sorted(data)

if __name__ == "__main__":
    benchmark.main()
