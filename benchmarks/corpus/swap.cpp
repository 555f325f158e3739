// ciqswap: an LD_PRELOAD shim that times every compiled variant of a program's kernels in place.
//
// The program is built with `nvcc -cudart shared`, so its calls into the CUDA runtime go through
// libcudart.so.13 and land here first.  When a kernel that the variant cubins define is launched,
// the shim launches that kernel from every variant instead (the baseline variant included, all
// with the launch's own grid, block, shared memory, stream and arguments) in a fresh random order,
// each bracketed by CUDA events, and appends `kernel,round,variant,ms` rows to a CSV.  The program
// runs its real workload; the variants are compared on its real data, round by round.
//
// Environment:
//   CIQ_VARIANTS         file of `<id> <path-to-cubin>` lines; the first is the baseline.  Unset:
//                        the shim passes everything through untouched.
//   CIQ_OUT              output CSV (appended; the header is written once).
//   CIQ_LAUNCHES         launch counts CSV, `kernel,launches,measured` (default CIQ_OUT.launches).
//   CIQ_KERNEL_VARIANTS  optional file of `<kernel> <id> <id> ...` lines: launch only these
//                        variants for that kernel (the baseline always; others share their code).
//   CIQ_ROUNDS           rounds per kernel and process (default 30).
//   CIQ_KERNEL_SECONDS   no new round for a kernel once its timed GPU time passes this (default 2)
//                        and it has CIQ_MIN_ROUNDS rounds (default 10), nor once it passes
//                        CIQ_KERNEL_MAX_SECONDS (default 30): slow kernels still get enough rounds.
//   CIQ_ROUNDS_PER_CALL  rounds per intercepted launch (default 1).
//   CIQ_WARMUP           untimed rounds per kernel and process before the first row (default 1).
//   CIQ_SELF_WARM        1 (default): each variant's timed launch follows an untimed launch of the
//                        same variant, so that it finds the caches its own flags leave; 0: not.
//   CIQ_SEED             seed of the launch orders (default 1).
//
// A round launches the kernel once per variant, so while a kernel is measured the program's data
// sees the kernel run several times per launch; after its rounds, the kernel's launches pass
// through to the real runtime.  Launches into a capturing stream always pass through.  Kernels
// that are not in the baseline cubin pass through.  Each variant module has its own copy of the
// source's __device__/__constant__ variables: the program's values are copied in at load and its
// cudaMemcpyToSymbol writes mirrored, but what a measured kernel writes into such a variable
// stays in the variant's copy (cudaMemcpyFromSymbol reads the program's).  Errors are printed
// with a `ciqswap:` prefix.
//
// Intercepted: kernel registration, <<<>>> launches (__cudaLaunchKernel[_ptsz]), cudaLaunchKernel,
// cudaLaunchKernelExC, cudaLaunchCooperativeKernel (each with its _ptsz form), cudaMemcpyToSymbol
// [Async] (mirrored into the variants), cudaFuncSetAttribute / cudaFuncSetCacheConfig (mirrored),
// cudaDeviceReset (rows read first; variants reloaded after).  Launch counts of every kernel go
// to CIQ_LAUNCHES at exit.
//
// Build: g++ -std=c++17 -O2 -shared -fPIC -I/usr/local/cuda/include swap.cpp -o libciqswap.so -ldl

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

extern "C" {
cudaError_t __cudaGetKernel(cudaKernel_t*, const void*);
cudaError_t __cudaLaunchKernel(cudaKernel_t, dim3, dim3, void**, size_t, cudaStream_t);
cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t, dim3, dim3, void**, size_t, cudaStream_t);
cudaError_t cudaLaunchKernel_ptsz(const void*, dim3, dim3, void**, size_t, cudaStream_t);
cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t*, const void*, void**);
cudaError_t cudaLaunchCooperativeKernel_ptsz(const void*, dim3, dim3, void**, size_t, cudaStream_t);
cudaError_t cudaMemcpyToSymbol_ptds(const void*, const void*, size_t, size_t, cudaMemcpyKind);
cudaError_t cudaMemcpyToSymbolAsync_ptsz(const void*, const void*, size_t, size_t, cudaMemcpyKind,
                                         cudaStream_t);
void __cudaRegisterFunction(void**, const char*, char*, const char*, int, uint3*, uint3*, dim3*,
                            dim3*, int*);
void __cudaRegisterVar(void**, char*, char*, const char*, int, size_t, int, int);
}

static_assert(sizeof(cudaLaunchAttribute) == sizeof(CUlaunchAttribute),
              "runtime and driver launch attributes differ in layout");

namespace {

void say(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::fputs("ciqswap: ", stderr);
  std::vfprintf(stderr, fmt, ap);
  std::fputc('\n', stderr);
  va_end(ap);
}

// The next definition of a runtime symbol (libcudart.so.13), looked up on first use.
template <typename F>
F real(const char* name) {
  void* p = dlsym(RTLD_NEXT, name);
  if (!p) {
    if (void* h = dlopen("libcudart.so.13", RTLD_NOW | RTLD_NOLOAD)) p = dlsym(h, name);
  }
  if (!p) {
    say("cannot find the runtime's %s (%s); is the program built with -cudart shared?", name,
        dlerror());
    std::abort();
  }
  return reinterpret_cast<F>(p);
}
#define REAL(fn) ([] { static auto f = real<decltype(&fn)>(#fn); return f; }())

thread_local bool inside = false;  // a runtime call made by the shim itself is not intercepted
struct Inside {
  bool was;
  Inside() : was(inside) { inside = true; }
  ~Inside() { inside = was; }
};

struct Driver {
  decltype(&cuGetErrorName) GetErrorName = nullptr;
  decltype(&cuCtxGetCurrent) CtxGetCurrent = nullptr;
  decltype(&cuModuleLoadData) ModuleLoadData = nullptr;
  decltype(&cuModuleGetFunction) ModuleGetFunction = nullptr;
  decltype(&cuModuleGetGlobal_v2) ModuleGetGlobal = nullptr;
  decltype(&cuMemcpyDtoDAsync_v2) MemcpyDtoDAsync = nullptr;
  decltype(&cuStreamSynchronize) StreamSynchronize = nullptr;
  decltype(&cuLaunchKernel) LaunchKernel = nullptr;
  decltype(&cuLaunchKernelEx) LaunchKernelEx = nullptr;
  decltype(&cuFuncSetAttribute) FuncSetAttribute = nullptr;
  decltype(&cuFuncSetCacheConfig) FuncSetCacheConfig = nullptr;
  decltype(&cuFuncLoad) FuncLoad = nullptr;  // optional (CUDA 12.4+): load code before timing

  bool open() {
    void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
      say("cannot dlopen libcuda.so.1 (%s): no NVIDIA driver here", dlerror());
      return false;
    }
    bool ok = true;
    auto get = [&](auto& fn, const char* name, bool required = true) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
      if (!fn && required) {
        say("libcuda.so.1 lacks %s: driver too old for this shim", name);
        ok = false;
      }
    };
    get(GetErrorName, "cuGetErrorName");
    get(CtxGetCurrent, "cuCtxGetCurrent");
    get(ModuleLoadData, "cuModuleLoadData");
    get(ModuleGetFunction, "cuModuleGetFunction");
    get(ModuleGetGlobal, "cuModuleGetGlobal_v2");
    get(MemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2");
    get(StreamSynchronize, "cuStreamSynchronize");
    get(LaunchKernel, "cuLaunchKernel");
    get(LaunchKernelEx, "cuLaunchKernelEx");
    get(FuncSetAttribute, "cuFuncSetAttribute");
    get(FuncSetCacheConfig, "cuFuncSetCacheConfig");
    get(FuncLoad, "cuFuncLoad", false);
    return ok;
  }

  std::string name(CUresult r) const {
    const char* s = nullptr;
    if (GetErrorName && GetErrorName(r, &s) == CUDA_SUCCESS && s) return s;
    return "CUresult " + std::to_string(static_cast<int>(r));
  }
};

struct Pending {
  int kernel, round, variant;  // round -1: a warm-up round, not written
  long seq;                    // the round's serial number in this process
  cudaEvent_t start, stop;
  bool failed;
};

struct Kernel {
  std::string name;
  std::vector<CUfunction> funcs;  // per variant; empty until resolved
  std::vector<int> launch_set;    // variants launched per round, the baseline first
  bool resolved = false, measurable = false, started = false;
  int round_base = 0;  // rounds already in CIQ_OUT from earlier processes
  int rounds = 0, warmup_left = 0, pending_rounds = 0, resolved_rounds = 0;
  double resolved_ms = 0;
  long launches = 0, measured = 0;
  std::set<int> failed_variants;  // errors already printed
};

struct Attribute {
  const void* host_fun;
  int attr;  // a cudaFuncAttribute, or -1 for the cache config
  int value;
};

struct State {
  std::recursive_mutex mu;
  bool configured = false, enabled = false, loaded = false, load_failed = false;
  std::string variants_path, out_path, launches_path, kernel_variants_path;
  int max_rounds = 30, min_rounds = 10, rounds_per_call = 1, warmup = 1;
  bool self_warm = true;  // CIQ_SELF_WARM: each timed launch follows an untimed one of its variant
  double kernel_ms = 2000, kernel_max_ms = 30000;
  std::mt19937_64 rng{1};
  Driver drv;
  CUcontext ctx = nullptr;
  std::vector<std::string> ids, paths;
  std::vector<CUmodule> modules;
  std::map<std::string, std::vector<std::string>> kernel_variant_ids;

  // What the program registered: host stub -> device name and module handle, handles -> stubs.
  std::unordered_map<const void*, std::string> fun_names;
  std::unordered_map<const void*, void**> fun_handles;
  std::unordered_map<const void*, const void*> handle_funs;  // cudaKernel_t -> host stub
  struct Var {
    std::string name;
    void** handle;
  };
  std::unordered_map<const void*, Var> vars;
  std::set<const void*> mirrored_vars;  // host vars copied into every variant's module
  std::vector<Attribute> attributes;

  std::vector<Kernel> kernels;
  std::unordered_map<std::string, int> kernel_index;
  std::map<std::string, int> round_base;
  std::vector<Pending> pending;
  std::vector<cudaEvent_t> event_pool;
  int pending_total = 0;  // rounds not yet written
  long seq = 0;
  long rows_written = 0, rows_lost = 0;
  bool exit_registered = false, final_done = false;
  std::chrono::steady_clock::time_point last_flush = std::chrono::steady_clock::now();
};

State& st() {
  static State* s = new State;  // never destroyed: exit handlers and destructors still use it
  return *s;
}

long env_long(const char* name, long fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (*end) {
    say("%s=%s is not an integer; using %ld", name, v, fallback);
    return fallback;
  }
  return x;
}

double env_seconds(const char* name, double fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  double x = std::strtod(v, &end);
  if (*end || !(x > 0)) {
    say("%s=%s is not a positive number of seconds; using %g", name, v, fallback);
    return fallback;
  }
  return x;
}

void configure(State& s) {
  if (s.configured) return;
  s.configured = true;
  const char* variants = std::getenv("CIQ_VARIANTS");
  if (!variants || !*variants) return;  // pure pass-through
  const char* out = std::getenv("CIQ_OUT");
  if (!out || !*out) {
    say("CIQ_VARIANTS is set but CIQ_OUT is not: measuring nothing");
    return;
  }
  s.variants_path = variants;
  s.out_path = out;
  const char* launches = std::getenv("CIQ_LAUNCHES");
  s.launches_path = launches && *launches ? launches : s.out_path + ".launches";
  if (const char* kv = std::getenv("CIQ_KERNEL_VARIANTS")) s.kernel_variants_path = kv;
  s.max_rounds = static_cast<int>(env_long("CIQ_ROUNDS", 30));
  s.rounds_per_call = std::max(1, static_cast<int>(env_long("CIQ_ROUNDS_PER_CALL", 1)));
  s.warmup = std::max(0, static_cast<int>(env_long("CIQ_WARMUP", 1)));
  s.self_warm = env_long("CIQ_SELF_WARM", 1) != 0;
  s.rng.seed(static_cast<unsigned long>(env_long("CIQ_SEED", 1)));
  s.min_rounds = static_cast<int>(env_long("CIQ_MIN_ROUNDS", 10));
  s.kernel_ms = 1000 * env_seconds("CIQ_KERNEL_SECONDS", 2);
  s.kernel_max_ms = std::max(s.kernel_ms, 1000 * env_seconds("CIQ_KERNEL_MAX_SECONDS", 30));
  std::ifstream f(s.variants_path);
  if (!f) {
    say("cannot read CIQ_VARIANTS file %s: measuring nothing", s.variants_path.c_str());
    return;
  }
  std::string line;
  while (std::getline(f, line)) {
    std::size_t a = line.find_first_not_of(" \t\r");
    if (a == std::string::npos || line[a] == '#') continue;
    std::size_t sp = line.find_first_of(" \t", a);
    std::size_t b = sp == std::string::npos ? sp : line.find_first_not_of(" \t", sp);
    if (b == std::string::npos) {
      say("%s: line '%s' is not '<id> <path-to-cubin>'", s.variants_path.c_str(), line.c_str());
      return;
    }
    std::string path = line.substr(b);
    while (!path.empty() && (path.back() == '\r' || path.back() == ' ')) path.pop_back();
    s.ids.push_back(line.substr(a, sp - a));
    s.paths.push_back(path);
  }
  if (s.ids.empty()) {
    say("CIQ_VARIANTS file %s lists no variants: measuring nothing", s.variants_path.c_str());
    return;
  }
  if (!s.kernel_variants_path.empty()) {
    std::ifstream kv(s.kernel_variants_path);
    if (!kv) say("cannot read CIQ_KERNEL_VARIANTS file %s: launching every variant",
                 s.kernel_variants_path.c_str());
    while (std::getline(kv, line)) {
      std::istringstream in(line);
      std::string kernel, id;
      if (!(in >> kernel)) continue;
      auto& v = s.kernel_variant_ids[kernel];
      while (in >> id) v.push_back(id);
    }
  }
  // Continue the round numbers of an earlier process of the same run (a script that runs the
  // program several times): rows of one (kernel, round) are one paired round.
  std::ifstream old(s.out_path);
  while (std::getline(old, line)) {
    std::size_t c1 = line.find(','), c2 = c1 == std::string::npos ? c1 : line.find(',', c1 + 1);
    if (c2 == std::string::npos) continue;
    int r = std::atoi(line.substr(c1 + 1, c2 - c1 - 1).c_str());
    auto& base = s.round_base[line.substr(0, c1)];
    base = std::max(base, r + 1);
  }
  s.enabled = true;
}

void final_flush();

void at_exit_handler() { final_flush(); }

// The variant modules, loaded into the context that the runtime made current.
bool ensure_loaded(State& s) {
  if (s.loaded) return true;
  if (s.load_failed) return false;
  Inside guard;
  cudaError_t e = REAL(cudaFree)(nullptr);  // makes the runtime create and bind its context
  if (e != cudaSuccess) {
    say("no CUDA context (%s: %s): passing launches through", REAL(cudaGetErrorName)(e),
        REAL(cudaGetErrorString)(e));
    s.load_failed = true;
    return false;
  }
  if (!s.drv.LaunchKernel && !s.drv.open()) {
    s.load_failed = true;
    return false;
  }
  CUresult r = s.drv.CtxGetCurrent(&s.ctx);
  if (r != CUDA_SUCCESS || !s.ctx) {
    say("cuCtxGetCurrent: %s: passing launches through", s.drv.name(r).c_str());
    s.load_failed = true;
    return false;
  }
  s.modules.assign(s.ids.size(), nullptr);
  for (std::size_t v = 0; v < s.ids.size(); ++v) {
    std::ifstream f(s.paths[v], std::ios::binary);
    std::string data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (!f && data.empty()) {
      say("cannot read cubin %s of variant %s", s.paths[v].c_str(), s.ids[v].c_str());
    } else if ((r = s.drv.ModuleLoadData(&s.modules[v], data.data())) != CUDA_SUCCESS) {
      say("cuModuleLoadData(%s) of variant %s: %s", s.paths[v].c_str(), s.ids[v].c_str(),
          s.drv.name(r).c_str());
      s.modules[v] = nullptr;
    }
    if (v == 0 && !s.modules[0]) {
      say("the baseline variant did not load: passing launches through");
      s.load_failed = true;
      return false;
    }
  }
  s.loaded = true;
  if (!s.exit_registered) {
    // Registered after the runtime's own exit handlers (its context is up by now), so it runs
    // before them: the events and modules are still alive when the last rows are read.
    std::atexit(at_exit_handler);
    s.exit_registered = true;
  }
  // The module handles that hold the variants' kernels: their __device__/__constant__ variables
  // are copied into every variant now, and their later cudaMemcpyToSymbol writes mirrored.
  std::set<void**> home;
  for (auto& [fun, name] : s.fun_names) {
    CUfunction f = nullptr;
    if (s.drv.ModuleGetFunction(&f, s.modules[0], name.c_str()) == CUDA_SUCCESS) {
      home.insert(s.fun_handles[fun]);
    }
  }
  for (auto& [host, var] : s.vars) {
    if (!home.count(var.handle)) continue;
    CUdeviceptr base = 0;
    size_t bytes = 0;
    if (s.drv.ModuleGetGlobal(&base, &bytes, s.modules[0], var.name.c_str()) != CUDA_SUCCESS) {
      continue;
    }
    void* src = nullptr;
    size_t size = 0;
    if (REAL(cudaGetSymbolAddress)(&src, host) != cudaSuccess ||
        REAL(cudaGetSymbolSize)(&size, host) != cudaSuccess) {
      say("cannot find the program's copy of variable %s: variants keep its initial value",
          var.name.c_str());
      REAL(cudaGetLastError)();
      continue;
    }
    for (std::size_t v = 0; v < s.modules.size(); ++v) {
      CUdeviceptr dst = 0;
      size_t n = 0;
      if (!s.modules[v] ||
          s.drv.ModuleGetGlobal(&dst, &n, s.modules[v], var.name.c_str()) != CUDA_SUCCESS) {
        continue;
      }
      r = s.drv.MemcpyDtoDAsync(dst, reinterpret_cast<CUdeviceptr>(src), std::min(n, size),
                                CU_STREAM_LEGACY);
      if (r != CUDA_SUCCESS) say("copying variable %s into variant %s: %s", var.name.c_str(),
                                 s.ids[v].c_str(), s.drv.name(r).c_str());
    }
    s.mirrored_vars.insert(host);
  }
  if ((r = s.drv.StreamSynchronize(CU_STREAM_LEGACY)) != CUDA_SUCCESS) {
    say("cuStreamSynchronize after copying variables: %s", s.drv.name(r).c_str());
  }
  return true;
}

void apply_attribute(State& s, Kernel& k, const Attribute& a) {
  for (std::size_t v = 0; v < k.funcs.size(); ++v) {
    if (!k.funcs[v]) continue;
    CUresult r = a.attr < 0
        ? s.drv.FuncSetCacheConfig(k.funcs[v], static_cast<CUfunc_cache>(a.value))
        : s.drv.FuncSetAttribute(k.funcs[v], static_cast<CUfunction_attribute>(a.attr), a.value);
    if (r != CUDA_SUCCESS) {
      say("setting attribute %d=%d of %s in variant %s: %s", a.attr, a.value, k.name.c_str(),
          s.ids[v].c_str(), s.drv.name(r).c_str());
    }
  }
}

// The kernel's functions in every variant, found on its first launch.
void resolve(State& s, Kernel& k) {
  if (k.resolved) return;
  k.resolved = true;
  k.funcs.assign(s.modules.size(), nullptr);
  if (s.drv.ModuleGetFunction(&k.funcs[0], s.modules[0], k.name.c_str()) != CUDA_SUCCESS) {
    k.funcs.clear();
    return;  // not a kernel of the tuned source
  }
  std::vector<int> chosen;
  auto listed = s.kernel_variant_ids.find(k.name);
  for (std::size_t v = 1; v < s.modules.size(); ++v) {
    if (!s.modules[v]) continue;  // did not load (said so then)
    if (listed != s.kernel_variant_ids.end() &&
        std::find(listed->second.begin(), listed->second.end(), s.ids[v]) == listed->second.end()) {
      continue;
    }
    chosen.push_back(static_cast<int>(v));
  }
  bool complete = true;
  for (int v : chosen) {
    CUresult r = s.drv.ModuleGetFunction(&k.funcs[v], s.modules[v], k.name.c_str());
    if (r != CUDA_SUCCESS) {
      say("variant %s (%s) lacks kernel %s (%s): that kernel is passed through",
          s.ids[v].c_str(), s.paths[v].c_str(), k.name.c_str(), s.drv.name(r).c_str());
      complete = false;
    }
  }
  if (!complete) return;
  k.launch_set = {0};
  k.launch_set.insert(k.launch_set.end(), chosen.begin(), chosen.end());
  if (s.drv.FuncLoad) {  // load the code now, not inside the first timed launch
    for (int v : k.launch_set) {
      CUresult r = s.drv.FuncLoad(k.funcs[v]);
      if (r != CUDA_SUCCESS) say("cuFuncLoad(%s) of variant %s: %s", k.name.c_str(),
                                 s.ids[v].c_str(), s.drv.name(r).c_str());
    }
  }
  for (const Attribute& a : s.attributes) {
    auto it = s.fun_names.find(a.host_fun);
    if (it != s.fun_names.end() && it->second == k.name) apply_attribute(s, k, a);
  }
  if (!k.started) {  // the first resolution in this process, not one after a reset
    k.started = true;
    auto base = s.round_base.find(k.name);
    k.round_base = base == s.round_base.end() ? 0 : base->second;
    k.warmup_left = s.warmup;
  }
  k.measurable = true;
}

cudaEvent_t take_event(State& s) {
  if (!s.event_pool.empty()) {
    cudaEvent_t e = s.event_pool.back();
    s.event_pool.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  cudaError_t r = REAL(cudaEventCreate)(&e);
  if (r != cudaSuccess) {
    say("cudaEventCreate: %s", REAL(cudaGetErrorName)(r));
    return nullptr;
  }
  return e;
}

void write_rows(State& s, const std::string& text) {
  if (text.empty()) return;
  int fd = ::open(s.out_path.c_str(), O_WRONLY | O_APPEND | O_CREAT, 0644);
  if (fd < 0) {
    say("cannot open %s for appending: %s", s.out_path.c_str(), std::strerror(errno));
    return;
  }
  struct stat info {};
  std::string all = (::fstat(fd, &info) == 0 && info.st_size == 0) ? "kernel,round,variant,ms\n" + text
                                                                   : text;
  const char* p = all.data();
  std::size_t left = all.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n <= 0) {
      say("writing %s: %s", s.out_path.c_str(), std::strerror(errno));
      break;
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  ::close(fd);
}

// Waits for the pending rounds and appends their rows.  `cuda_ok` is false when the runtime may
// be torn down already (a library destructor): then only events that are complete are read.
void flush(State& s, bool cuda_ok = true) {
  if (s.pending.empty()) return;
  Inside guard;
  std::string text;
  std::vector<Pending> keep;
  std::map<long, std::pair<int, double>> round_ms;  // seq -> kernel, GPU ms of all variants
  bool warned = false;
  for (Pending& p : s.pending) {
    Kernel& k = s.kernels[p.kernel];
    float ms = NAN;
    if (!p.failed) {
      cudaError_t e = cuda_ok ? REAL(cudaEventSynchronize)(p.stop) : REAL(cudaEventQuery)(p.stop);
      if (e == cudaSuccess) e = REAL(cudaEventElapsedTime)(&ms, p.start, p.stop);
      if (e != cudaSuccess) {
        if (!warned) say("reading the timing events of %s: %s", k.name.c_str(), REAL(cudaGetErrorName)(e));
        warned = true;
        ++s.rows_lost;
        continue;
      }
    }
    if (p.start) s.event_pool.push_back(p.start);
    if (p.stop) s.event_pool.push_back(p.stop);
    if (p.round >= 0) {
      char row[64];
      std::snprintf(row, sizeof row, ",%d,%s,%.6g\n", k.round_base + p.round,
                    s.ids[p.variant].c_str(), std::isnan(ms) ? NAN : static_cast<double>(ms));
      text += k.name + row;
      ++s.rows_written;
    }
    auto& [kernel, total] = round_ms[p.seq];
    kernel = p.kernel;
    if (!std::isnan(ms)) total += ms;
  }
  for (auto& [seq, kernel_ms] : round_ms) {
    Kernel& k = s.kernels[kernel_ms.first];
    k.resolved_ms += kernel_ms.second;
    k.resolved_rounds += 1;
    k.pending_rounds -= 1;
  }
  s.pending.clear();
  s.pending_total = 0;
  s.last_flush = std::chrono::steady_clock::now();
  write_rows(s, text);
}

void final_flush() {
  State& s = st();
  std::lock_guard<std::recursive_mutex> lock(s.mu);
  if (!s.enabled || s.final_done) return;
  s.final_done = true;
  flush(s, s.exit_registered);
  std::string text;
  long measured = 0;
  for (Kernel& k : s.kernels) {
    if (k.launches == 0) continue;
    text += k.name + "," + std::to_string(k.launches) + "," + std::to_string(k.measured) + "\n";
    measured += k.measurable && k.rounds > 0;
  }
  int fd = ::open(s.launches_path.c_str(), O_WRONLY | O_APPEND | O_CREAT, 0644);
  if (fd >= 0) {
    struct stat info {};
    if (::fstat(fd, &info) == 0 && info.st_size == 0) text = "kernel,launches,measured\n" + text;
    if (::write(fd, text.data(), text.size()) < 0) say("writing %s failed", s.launches_path.c_str());
    ::close(fd);
  } else {
    say("cannot open %s: %s", s.launches_path.c_str(), std::strerror(errno));
  }
  say("%ld kernels measured over %zu variants; %ld rows written to %s%s", measured, s.ids.size(),
      s.rows_written, s.out_path.c_str(),
      s.rows_lost ? (", " + std::to_string(s.rows_lost) + " rows lost").c_str() : "");
}

struct ExitGuard {
  ~ExitGuard() { final_flush(); }  // the rows of a program whose exit handlers did not run
} exit_guard;

Kernel* kernel_of(State& s, const void* func) {
  auto it = s.fun_names.find(func);
  if (it == s.fun_names.end()) {
    auto h = s.handle_funs.find(func);
    if (h == s.handle_funs.end()) return nullptr;
    it = s.fun_names.find(h->second);
    if (it == s.fun_names.end()) return nullptr;
  }
  auto [k, added] = s.kernel_index.emplace(it->second, static_cast<int>(s.kernels.size()));
  if (added) {
    s.kernels.emplace_back();
    s.kernels.back().name = it->second;
  }
  return &s.kernels[k->second];
}

// Launches `func` through the variants when it is measured now; otherwise calls `pass`.
template <typename Pass>
cudaError_t launch(const void* func, dim3 grid, dim3 block, void** args, size_t smem,
                   cudaStream_t stream, bool per_thread, const cudaLaunchAttribute* attrs,
                   unsigned int num_attrs, Pass pass) {
  if (inside) return pass();
  State& s = st();
  std::unique_lock<std::recursive_mutex> lock(s.mu);
  configure(s);
  if (!s.enabled) {
    lock.unlock();
    return pass();
  }
  Kernel* k = kernel_of(s, func);
  auto through = [&] {
    lock.unlock();
    Inside guard;
    return pass();
  };
  if (!k) return through();
  ++k->launches;
  if (!ensure_loaded(s)) return through();
  resolve(s, *k);
  if (!k->measurable || k->rounds >= s.max_rounds) return through();
  Inside guard;
  CUcontext now = nullptr;
  if (s.drv.CtxGetCurrent(&now) != CUDA_SUCCESS || now != s.ctx) return through();
  if (per_thread && stream == nullptr) stream = cudaStreamPerThread;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (REAL(cudaStreamIsCapturing)(stream, &capture) != cudaSuccess ||
      capture != cudaStreamCaptureStatusNone) {
    return through();
  }
  const int index = static_cast<int>(k - s.kernels.data());
  int done = 0;
  for (int r = 0; r < s.rounds_per_call && k->rounds < s.max_rounds; ++r) {
    int started = k->resolved_rounds + k->pending_rounds;
    double estimate = k->resolved_rounds
        ? k->resolved_ms * started / k->resolved_rounds : 0.0;
    if ((estimate >= s.kernel_ms && k->rounds >= s.min_rounds) || estimate >= s.kernel_max_ms) {
      k->rounds = s.max_rounds;
      break;
    }
    bool warm = k->warmup_left > 0;
    int round = warm ? -1 : k->rounds;
    std::vector<int> order = k->launch_set;
    std::shuffle(order.begin(), order.end(), s.rng);
    bool baseline_failed = false;
    auto launch = [&](int v) {
      if (num_attrs == 0) {
        return s.drv.LaunchKernel(k->funcs[v], grid.x, grid.y, grid.z, block.x, block.y, block.z,
                                  static_cast<unsigned int>(smem), stream, args, nullptr);
      }
      CUlaunchConfig config{grid.x, grid.y, grid.z, block.x, block.y, block.z,
                            static_cast<unsigned int>(smem), stream,
                            reinterpret_cast<CUlaunchAttribute*>(const_cast<cudaLaunchAttribute*>(attrs)),
                            num_attrs};
      return s.drv.LaunchKernelEx(&config, k->funcs[v], args, nullptr);
    };
    for (int v : order) {
      Pending p{index, round, v, s.seq, take_event(s), take_event(s), false};
      CUresult e = CUDA_ERROR_UNKNOWN;
      // An untimed launch of the same variant first: the timed one finds the caches as this
      // variant's own previous launch leaves them, as in a program built with its flags (cache
      // operators move their cost to the launch that follows).
      if (s.self_warm && launch(v) != CUDA_SUCCESS) p.start = nullptr;
      if (p.start && p.stop && REAL(cudaEventRecord)(p.start, stream) == cudaSuccess) {
        e = launch(v);
        if (e == CUDA_SUCCESS && REAL(cudaEventRecord)(p.stop, stream) != cudaSuccess) {
          e = CUDA_ERROR_UNKNOWN;
        }
      }
      if (e != CUDA_SUCCESS) {
        p.failed = true;
        baseline_failed |= v == 0;
        if (k->failed_variants.insert(v).second) {
          say("launching %s of variant %s (grid %u,%u,%u block %u,%u,%u smem %zu): %s",
              k->name.c_str(), s.ids[v].c_str(), grid.x, grid.y, grid.z, block.x, block.y,
              block.z, smem, s.drv.name(e).c_str());
        }
      }
      s.pending.push_back(p);
    }
    k->pending_rounds += 1;
    ++s.seq;
    if (warm) k->warmup_left -= 1;
    else k->rounds += 1, s.pending_total += 1;
    ++done;
    if (k->resolved_rounds == 0) flush(s);  // the first round's time bounds the rounds that follow
    if (baseline_failed) {
      // Let the runtime launch it and report its own error: the program sees what it would.
      flush(s);
      k->rounds = s.max_rounds;
      return through();
    }
  }
  if (done == 0) return through();
  ++k->measured;
  auto age = std::chrono::steady_clock::now() - s.last_flush;
  if (s.pending_total >= 16 || age > std::chrono::seconds(1)) flush(s);
  return cudaSuccess;
}

}  // namespace

// ---- Interposed runtime entry points -------------------------------------------------------

extern "C" {

void __cudaRegisterFunction(void** handle, const char* host_fun, char* device_fun,
                            const char* device_name, int thread_limit, uint3* tid, uint3* bid,
                            dim3* bdim, dim3* gdim, int* wsize) {
  {
    State& s = st();
    std::lock_guard<std::recursive_mutex> lock(s.mu);
    s.fun_names[host_fun] = device_name;
    s.fun_handles[host_fun] = handle;
  }
  REAL(__cudaRegisterFunction)(handle, host_fun, device_fun, device_name, thread_limit, tid, bid,
                               bdim, gdim, wsize);
}

void __cudaRegisterVar(void** handle, char* host_var, char* device_address,
                       const char* device_name, int ext, size_t size, int constant, int global) {
  {
    State& s = st();
    std::lock_guard<std::recursive_mutex> lock(s.mu);
    s.vars[host_var] = State::Var{device_name, handle};
  }
  REAL(__cudaRegisterVar)(handle, host_var, device_address, device_name, ext, size, constant,
                          global);
}

static void remember_kernel(cudaKernel_t* kernel, const void* fun) {
  State& s = st();
  std::lock_guard<std::recursive_mutex> lock(s.mu);
  s.handle_funs[*kernel] = fun;
}

cudaError_t __cudaGetKernel(cudaKernel_t* kernel, const void* fun) {
  cudaError_t e = REAL(__cudaGetKernel)(kernel, fun);
  if (e == cudaSuccess && kernel && *kernel) remember_kernel(kernel, fun);
  return e;
}

cudaError_t cudaGetKernel(cudaKernel_t* kernel, const void* fun) {
  cudaError_t e = REAL(cudaGetKernel)(kernel, fun);
  if (e == cudaSuccess && kernel && *kernel) remember_kernel(kernel, fun);
  return e;
}

cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 grid, dim3 block, void** args,
                               size_t smem, cudaStream_t stream) {
  return launch(kernel, grid, block, args, smem, stream, false, nullptr, 0, [&] {
    return REAL(__cudaLaunchKernel)(kernel, grid, block, args, smem, stream);
  });
}

cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 grid, dim3 block, void** args,
                                    size_t smem, cudaStream_t stream) {
  return launch(kernel, grid, block, args, smem, stream, true, nullptr, 0, [&] {
    return REAL(__cudaLaunchKernel_ptsz)(kernel, grid, block, args, smem, stream);
  });
}

cudaError_t cudaLaunchKernel(const void* func, dim3 grid, dim3 block, void** args, size_t smem,
                             cudaStream_t stream) {
  return launch(func, grid, block, args, smem, stream, false, nullptr, 0, [&] {
    return REAL(cudaLaunchKernel)(func, grid, block, args, smem, stream);
  });
}

cudaError_t cudaLaunchKernel_ptsz(const void* func, dim3 grid, dim3 block, void** args,
                                  size_t smem, cudaStream_t stream) {
  return launch(func, grid, block, args, smem, stream, true, nullptr, 0, [&] {
    return REAL(cudaLaunchKernel_ptsz)(func, grid, block, args, smem, stream);
  });
}

cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t* config, const void* func, void** args) {
  if (!config) return REAL(cudaLaunchKernelExC)(config, func, args);
  return launch(func, config->gridDim, config->blockDim, args, config->dynamicSmemBytes,
                config->stream, false, config->attrs, config->numAttrs,
                [&] { return REAL(cudaLaunchKernelExC)(config, func, args); });
}

cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t* config, const void* func,
                                     void** args) {
  if (!config) return REAL(cudaLaunchKernelExC_ptsz)(config, func, args);
  return launch(func, config->gridDim, config->blockDim, args, config->dynamicSmemBytes,
                config->stream, true, config->attrs, config->numAttrs,
                [&] { return REAL(cudaLaunchKernelExC_ptsz)(config, func, args); });
}

static cudaLaunchAttribute cooperative() {
  cudaLaunchAttribute a{};
  a.id = cudaLaunchAttributeCooperative;
  a.val.cooperative = 1;
  return a;
}

cudaError_t cudaLaunchCooperativeKernel(const void* func, dim3 grid, dim3 block, void** args,
                                        size_t smem, cudaStream_t stream) {
  cudaLaunchAttribute attr = cooperative();
  return launch(func, grid, block, args, smem, stream, false, &attr, 1, [&] {
    return REAL(cudaLaunchCooperativeKernel)(func, grid, block, args, smem, stream);
  });
}

cudaError_t cudaLaunchCooperativeKernel_ptsz(const void* func, dim3 grid, dim3 block, void** args,
                                             size_t smem, cudaStream_t stream) {
  cudaLaunchAttribute attr = cooperative();
  return launch(func, grid, block, args, smem, stream, true, &attr, 1, [&] {
    return REAL(cudaLaunchCooperativeKernel_ptsz)(func, grid, block, args, smem, stream);
  });
}

}  // extern "C"

namespace {

// After the program wrote `count` bytes at `offset` of a variable, the same bytes go into every
// variant's copy of it, copied on the device in stream order.
void mirror_symbol(const void* symbol, size_t count, size_t offset, cudaStream_t stream,
                   bool wait) {
  State& s = st();
  std::lock_guard<std::recursive_mutex> lock(s.mu);
  if (!s.loaded || !s.mirrored_vars.count(symbol)) return;
  Inside guard;
  const std::string& name = s.vars[symbol].name;
  void* src = nullptr;
  if (REAL(cudaGetSymbolAddress)(&src, symbol) != cudaSuccess) {
    REAL(cudaGetLastError)();
    return;
  }
  CUstream cu = stream;
  for (std::size_t v = 0; v < s.modules.size(); ++v) {
    CUdeviceptr dst = 0;
    size_t bytes = 0;
    if (!s.modules[v] ||
        s.drv.ModuleGetGlobal(&dst, &bytes, s.modules[v], name.c_str()) != CUDA_SUCCESS ||
        offset >= bytes) {
      continue;
    }
    CUresult r = s.drv.MemcpyDtoDAsync(dst + offset,
                                       reinterpret_cast<CUdeviceptr>(src) + offset,
                                       std::min(count, bytes - offset), cu);
    if (r != CUDA_SUCCESS) say("mirroring a write of %s into variant %s: %s", name.c_str(),
                               s.ids[v].c_str(), s.drv.name(r).c_str());
  }
  if (wait) {
    CUresult r = s.drv.StreamSynchronize(cu);
    if (r != CUDA_SUCCESS) say("cuStreamSynchronize after mirroring %s: %s", name.c_str(),
                               s.drv.name(r).c_str());
  }
}

void mirror_attribute(const void* func, int attr, int value) {
  State& s = st();
  std::lock_guard<std::recursive_mutex> lock(s.mu);
  auto h = s.handle_funs.find(func);
  const void* host = h == s.handle_funs.end() ? func : h->second;
  Attribute a{host, attr, value};
  s.attributes.push_back(a);
  auto it = s.fun_names.find(host);
  if (!s.loaded || it == s.fun_names.end()) return;
  auto k = s.kernel_index.find(it->second);
  if (k != s.kernel_index.end() && s.kernels[k->second].measurable) {
    apply_attribute(s, s.kernels[k->second], a);
  }
}

}  // namespace

extern "C" {

cudaError_t cudaMemcpyToSymbol(const void* symbol, const void* src, size_t count, size_t offset,
                               cudaMemcpyKind kind) {
  cudaError_t e = REAL(cudaMemcpyToSymbol)(symbol, src, count, offset, kind);
  if (e == cudaSuccess && !inside) mirror_symbol(symbol, count, offset, cudaStreamLegacy, true);
  return e;
}

cudaError_t cudaMemcpyToSymbol_ptds(const void* symbol, const void* src, size_t count,
                                    size_t offset, cudaMemcpyKind kind) {
  cudaError_t e = REAL(cudaMemcpyToSymbol_ptds)(symbol, src, count, offset, kind);
  if (e == cudaSuccess && !inside) mirror_symbol(symbol, count, offset, cudaStreamPerThread, true);
  return e;
}

cudaError_t cudaMemcpyToSymbolAsync(const void* symbol, const void* src, size_t count,
                                    size_t offset, cudaMemcpyKind kind, cudaStream_t stream) {
  cudaError_t e = REAL(cudaMemcpyToSymbolAsync)(symbol, src, count, offset, kind, stream);
  if (e == cudaSuccess && !inside) mirror_symbol(symbol, count, offset, stream, false);
  return e;
}

cudaError_t cudaMemcpyToSymbolAsync_ptsz(const void* symbol, const void* src, size_t count,
                                         size_t offset, cudaMemcpyKind kind, cudaStream_t stream) {
  cudaError_t e = REAL(cudaMemcpyToSymbolAsync_ptsz)(symbol, src, count, offset, kind, stream);
  if (e == cudaSuccess && !inside) {
    mirror_symbol(symbol, count, offset, stream ? stream : cudaStreamPerThread, false);
  }
  return e;
}

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  cudaError_t e = REAL(cudaFuncSetAttribute)(func, attr, value);
  // Runtime attributes 8..15 are the driver's CU_FUNC_ATTRIBUTE_* of the same number.
  if (e == cudaSuccess && !inside && attr >= cudaFuncAttributeMaxDynamicSharedMemorySize &&
      attr <= cudaFuncAttributeClusterSchedulingPolicyPreference) {
    mirror_attribute(func, static_cast<int>(attr), value);
  }
  return e;
}

cudaError_t cudaFuncSetCacheConfig(const void* func, cudaFuncCache config) {
  cudaError_t e = REAL(cudaFuncSetCacheConfig)(func, config);
  if (e == cudaSuccess && !inside) mirror_attribute(func, -1, static_cast<int>(config));
  return e;
}

// A reset destroys the context and with it the variants' modules and events: the rows are read
// first, and the next launch loads the variants again into the new context.
cudaError_t cudaDeviceReset() {
  if (!inside) {
    State& s = st();
    std::lock_guard<std::recursive_mutex> lock(s.mu);
    if (s.loaded) {
      flush(s);
      s.loaded = false;
      s.modules.clear();
      s.event_pool.clear();
      s.mirrored_vars.clear();
      for (Kernel& k : s.kernels) {  // rounds and time spent carry over
        k.resolved = k.measurable = false;
        k.funcs.clear();
        k.launch_set.clear();
      }
    }
  }
  return REAL(cudaDeviceReset)();
}

}  // extern "C"
