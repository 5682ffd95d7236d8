// Runs generated kernels on the CPU: each kernel of cases.h, compiled as plain C++
// over a host stand-in for kjit/types.cuh, is executed thread by thread on a small
// grid (3 blocks x 32 threads, so the grid-stride loop and the U-vector unrolling
// both wrap) and compared with the fp64 interpreter. This checks the lowering's
// index math (vector path, row/column/scalar broadcasting, strides, offsets, mixed
// dtypes) on every machine; the GPU tests check the same on the hardware.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

// Order matters: the host stand-in for kjit/types.cuh, then the real template, then
// the generated kernels (each in its own namespace).
#include "kjit/types.cuh"  // tests/unit/emulation/host

#include "kjit/elementwise.cuh"
#include "kjit/math.cuh"

#include "cases.inc"

#include "kjit/compiler/interpreter/interpreter.h"
#include "kjit/compiler/ir/parser.h"
#include "kjit/compiler/passes/pipeline.h"
#include "kjit/support/npy.h"
#include "tests/support/numeric.h"
#include "tests/unit/emulation/cases.h"

using namespace kjit;

namespace {

const char* run_case(int c, void** p, long long n, long long cols) {
  switch (c) {
#include "calls.inc"
  }
  return "?";
}

char* aligned_in(std::vector<char>& storage) {
  char* base = storage.data();
  return base + (16 - reinterpret_cast<uintptr_t>(base) % 16) % 16;
}

}  // namespace

int main() {
  std::vector<EmuCase> all = emu_cases();
  int failures = 0;
  for (size_t c = 0; c < all.size(); ++c) {
    const EmuCase& e = all[c];
    Graph g = ir::optimize(ir::parse(e.text));
    std::vector<int> ids = g.inputs();
    std::mt19937_64 rng(c + 1);
    std::map<std::string, ir::HostTensor> reference;
    std::vector<std::vector<char>> storage;
    std::vector<void*> pointers;
    for (size_t i = 0; i < ids.size(); ++i) {
      const ir::Node& node = g.node(ids[i]);
      std::vector<int64_t> shape(e.inputs[i].shape.begin(), e.inputs[i].shape.end());
      int64_t count = ir::element_count(shape);
      auto [lo, hi] = ir::input_domain(g, ids[i]);
      std::vector<double> values =
          testing::random_values(node.dtype, static_cast<size_t>(count), lo, hi, rng);
      NpyArray array = npy_from_values(ir::npy_descr(node.dtype), shape, values);
      reference[node.name] = ir::HostTensor{shape, npy_values(array)};
      const long long size = ir::size_bytes(node.dtype);
      const std::vector<long long>& strides = e.inputs[i].strides;
      long long extent = count;
      if (!strides.empty()) {
        extent = 1;
        for (size_t d = 0; d < shape.size(); ++d) extent += (shape[d] - 1) * strides[d];
      }
      storage.emplace_back(static_cast<size_t>((extent + e.inputs[i].offset + 64) * size + 64),
                           static_cast<char>(0x7f));
      char* base = aligned_in(storage.back()) + e.inputs[i].offset * size;
      for (int64_t k = 0; k < count; ++k) {
        long long at = k;
        if (!strides.empty()) {
          at = 0;
          long long rest = k;
          for (size_t d = shape.size(); d-- > 0;) {
            at += (rest % shape[d]) * strides[d];
            rest /= shape[d];
          }
        }
        std::memcpy(base + at * size, array.data.data() + k * size, static_cast<size_t>(size));
      }
      pointers.push_back(base);
    }
    std::vector<int64_t> out_shape(e.out_shape.begin(), e.out_shape.end());
    const long long n = ir::element_count(out_shape);
    for (const auto& [name, id] : g.outputs()) {
      storage.emplace_back(static_cast<size_t>(n * ir::size_bytes(g.node(id).dtype) + 32),
                           static_cast<char>(0xff));  // poison
      pointers.push_back(aligned_in(storage.back()));
    }
    const long long cols = out_shape.empty() ? 1 : out_shape.back();
    const char* problem = "";
    gridDim.x = 3;
    blockDim.x = 32;
    for (unsigned b = 0; b < gridDim.x; ++b) {
      for (unsigned t = 0; t < blockDim.x; ++t) {
        blockIdx.x = b;
        threadIdx.x = t;
        problem = run_case(static_cast<int>(c), pointers.data(), n, cols);
      }
    }
    std::map<std::string, ir::HostTensor> expected = ir::interpret(g, reference);
    size_t k = ids.size();
    for (const auto& [name, id] : g.outputs()) {
      DType d = g.node(id).dtype;
      const char* data = static_cast<const char*>(pointers[k++]);
      NpyArray got{ir::npy_descr(d), out_shape,
                   std::vector<char>(data, data + n * ir::size_bytes(d))};
      std::vector<double> values = npy_values(got), want = expected[name].data;
      double diff = 0, norm = 0;
      bool finite = true;
      for (long long j = 0; j < n; ++j) {
        double w = ir::round_to(d, want[static_cast<size_t>(j)]);
        double v = values[static_cast<size_t>(j)];
        finite = finite && std::isfinite(v);
        diff += (v - w) * (v - w);
        norm += w * w;
      }
      double error = norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
      double tolerance = d == DType::F16 || d == DType::BF16 ? 1e-2 : 1e-5;
      bool ok = finite && error <= tolerance;
      failures += !ok;
      std::printf("%s case %zu %s -> %s:%s relative L2 %.3g\n  %s\n", ok ? "ok  " : "FAIL", c,
                  e.text.c_str(), name.c_str(), ir::to_string(d), error, problem);
    }
  }
  std::printf("%d failure(s)\n", failures);
  return failures != 0;
}
