// cache_fixture PATH — writes a small kjit cache at PATH (two GPUs, three
// binaries, tunings, trials) for the CLI tests.
#include <iostream>

#include "kjit/cache/key.h"
#include "kjit/cache/store.h"
#include "tests/unit/cache/test_util.h"

int main(int argc, char** argv) {
  using namespace kjit::cache;
  if (argc != 2) {
    std::cerr << "usage: cache_fixture PATH\n";
    return 2;
  }
  StoreOptions options;
  options.recover = false;
  std::unique_ptr<Store> store = Store::open(argv[1], options);
  const std::string h200 = gpu_model("NVIDIA H200", 9, 0, 132);
  const std::string a100 = gpu_model("NVIDIA A100", 8, 0, 108);
  store->record_device({h200, "NVIDIA H200", 9, 0, 132, "13.0", int64_t{141} << 30});
  store->record_device({a100, "NVIDIA A100", 8, 0, 108, "13.0", int64_t{80} << 30});
  store->put_binary(kjit::cache::testing::make_binary("feed0001", 40000, 1, "sm_90"));
  store->put_binary(kjit::cache::testing::make_binary("feed0002", 20000, 2, "sm_90a"));
  store->put_binary(kjit::cache::testing::make_binary("beef0003", 10000, 3, "sm_80"));
  store->put_tuning(kjit::cache::testing::make_tuning(h200, "matmul 4096x4096x4096 bf16",
                                                      "tile=128x256", 0.9, 0.02, 50));
  store->put_tuning(kjit::cache::testing::make_tuning(a100, "matmul 4096x4096x4096 bf16",
                                                      "tile=128x128", 1.8, 0.02, 50));
  store->put_trial(
      {h200, "matmul 4096x4096x4096 bf16", "tile=128x256", {0.9, 0.02, 50}, "", "tuner-1", 0});
  store->vacuum();  // one self-contained file, as one would ship it
  return store->warnings().empty() ? 0 : 1;
}
