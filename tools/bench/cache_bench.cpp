// cache_bench — what a cached kernel costs to find (docs/perf/cache.md).
//
//   in-process hit   binary_key() over the source + the runtime's map lookup
//   store hit        Store::find_binary on an open store (100 KB cubin)
//   open + hit       Store::open of an existing file + find_binary, per iteration
//   new process      a fresh process (this binary, re-executed) timing its own
//                    open + find_binary: the warm-start path of a second run,
//                    less the module load the runtime adds on a GPU
//
// Usage: cache_bench [--benchmark_filter=...]; the store lives in a temporary
// directory. `cache_bench --child PATH KEY` is the re-executed half.
#include <benchmark/benchmark.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <memory>
#include <random>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "kjit/cache/key.h"
#include "kjit/cache/store.h"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using kjit::cache::BinaryRecord;
using kjit::cache::Store;

constexpr size_t kCubinBytes = 100 * 1024;
constexpr size_t kSourceBytes = 20 * 1024;

std::string self_path;

std::string make_source(size_t bytes) {
  std::string source = "// generated kernel\nextern \"C\" __global__ void k(float* y) {\n";
  while (source.size() < bytes) source += "  y[threadIdx.x] = y[threadIdx.x] * 1.0001f + 2.0f;\n";
  return source + "}\n";
}

const std::vector<std::string> kOptions = {"-DKJIT_TILE_M=128", "-DKJIT_TILE_N=256", "--std=c++17",
                                           "-default-device"};

std::string key_for(const std::string& source) {
  return kjit::cache::binary_key(source, kOptions, "sm_90a", "13.0", "kjit-gen-1", {});
}

// A store with one 100 KB binary (plus 200 others, so the lookup is not in a
// one-row table), made once per run.
struct Fixture {
  fs::path dir;
  std::string path;
  std::string source = make_source(kSourceBytes);
  std::string key = key_for(source);

  Fixture() {
    std::string pattern = (fs::temp_directory_path() / "kjit-cache-bench-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) std::abort();
    dir = pattern;
    path = (dir / "kjit.db").string();
    std::unique_ptr<Store> store = Store::open(path);
    std::mt19937_64 random(1);
    for (int i = 0; i <= 200; ++i) {
      BinaryRecord r;
      r.key = i == 200 ? key : key_for(source + std::to_string(i));
      r.cubin.resize(kCubinBytes);
      for (char& c : r.cubin) c = static_cast<char>(random());
      r.source = source;
      r.options = kOptions;
      r.arch = "sm_90a";
      r.nvrtc_version = "13.0";
      r.generator_version = "kjit-gen-1";
      r.ptxas_stats = R"([{"name":"k","registers":64}])";
      store->put_binary(r);
    }
  }
  ~Fixture() {
    std::error_code ignored;
    fs::remove_all(dir, ignored);
  }
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

// The runtime's first level: key the source, look it up under a shared lock.
void BM_InProcessHit(benchmark::State& state) {
  std::string source = make_source(static_cast<size_t>(state.range(0)));
  std::unordered_map<std::string, std::shared_ptr<int>> modules;
  for (int i = 0; i < 1000; ++i) modules[key_for(source + std::to_string(i))] = nullptr;
  modules[key_for(source)] = std::make_shared<int>(1);
  std::shared_mutex mutex;
  for (auto _ : state) {
    std::string key = key_for(source);
    std::shared_lock lock(mutex);
    auto it = modules.find(key);
    benchmark::DoNotOptimize(it->second.get());
  }
  state.SetLabel(std::to_string(state.range(0) / 1024) + " KiB source");
}
BENCHMARK(BM_InProcessHit)->Arg(4 * 1024)->Arg(20 * 1024)->Arg(100 * 1024);

void BM_StoreHit(benchmark::State& state) {
  Fixture& f = fixture();
  std::unique_ptr<Store> store = Store::open(f.path);
  for (auto _ : state) {
    std::optional<BinaryRecord> hit = store->find_binary(f.key);
    if (!hit) state.SkipWithError("miss");
    benchmark::DoNotOptimize(hit->cubin.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kCubinBytes));
}
BENCHMARK(BM_StoreHit)->Unit(benchmark::kMicrosecond);

void BM_OpenAndHit(benchmark::State& state) {
  Fixture& f = fixture();
  for (auto _ : state) {
    std::unique_ptr<Store> store = Store::open(f.path);
    std::optional<BinaryRecord> hit = store->find_binary(f.key);
    if (!hit) state.SkipWithError("miss");
    benchmark::DoNotOptimize(hit->cubin.data());
  }
}
BENCHMARK(BM_OpenAndHit)->Unit(benchmark::kMicrosecond);

// Re-executes this binary; the child times its own open + lookup and writes
// the microseconds on stdout.
void BM_NewProcessWarmHit(benchmark::State& state) {
  Fixture& f = fixture();
  double cpu_total = 0, open_total = 0;
  for (auto _ : state) {
    int out[2];
    if (::pipe(out) != 0) return state.SkipWithError("pipe");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    posix_spawn_file_actions_addclose(&actions, out[0]);
    std::vector<std::string> args = {self_path, "--child", f.path, f.key};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t child = 0;
    int rc = posix_spawn(&child, self_path.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(out[1]);
    if (rc != 0) return state.SkipWithError("posix_spawn");
    char text[128] = {};
    ssize_t n = ::read(out[0], text, sizeof text - 1);
    ::close(out[0]);
    int status = 0;
    ::waitpid(child, &status, 0);
    if (n <= 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
      return state.SkipWithError("the child missed");
    char* rest = nullptr;
    double wall_us = std::strtod(text, &rest);
    double cpu_us = std::strtod(rest, &rest);
    double open_us = std::strtod(rest, nullptr);
    state.SetIterationTime(wall_us * 1e-6);
    cpu_total += cpu_us;
    open_total += open_us;
  }
  // What the child spent: CPU (independent of other load on the machine) and
  // the open's share of the wall time.
  state.counters["child_cpu_us"] =
      benchmark::Counter(cpu_total, benchmark::Counter::kAvgIterations);
  state.counters["child_open_us"] =
      benchmark::Counter(open_total, benchmark::Counter::kAvgIterations);
}
BENCHMARK(BM_NewProcessWarmHit)->UseManualTime()->Unit(benchmark::kMicrosecond)->Iterations(50);

double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// The re-executed half: times open + find_binary, wall and CPU, in a process
// that has never touched SQLite.
int child(const char* path, const char* key) {
  double cpu_start = cpu_seconds();
  auto start = std::chrono::steady_clock::now();
  std::unique_ptr<Store> store = Store::open(path);
  auto opened = std::chrono::steady_clock::now();
  std::optional<BinaryRecord> hit = store->find_binary(key);
  auto end = std::chrono::steady_clock::now();
  double cpu = cpu_seconds() - cpu_start;
  if (!hit) return 1;
  using micro = std::chrono::duration<double, std::micro>;
  std::printf("%.3f %.3f %.3f\n", micro(end - start).count(), cpu * 1e6,
              micro(opened - start).count());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::strcmp(argv[1], "--child") == 0) return child(argv[2], argv[3]);
  self_path = fs::canonical("/proc/self/exe").string();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
