// The measuring worker of the tuner's fault test (tests/gpu/tune_test.cpp): serves
// jobs for the planted family (tests/gpu/planted.h) on device 0, like `kjit
// __tune-worker` does for the real families.
#include <iostream>

#include "kjit/runtime/runtime.h"
#include "kjit/tuner/worker.h"
#include "tests/gpu/planted.h"

int main() {
  kjit::Runtime runtime;
  return kjit::tuner::serve_measurements(
      [&](const nlohmann::json&) {
        return std::make_unique<kjit::testing::PlantedHarness>(runtime);
      },
      runtime.device(), std::cin, std::cout);
}
