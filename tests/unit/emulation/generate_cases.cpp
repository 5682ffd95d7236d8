// Build step of the host emulation test: lowers every case of cases.h and writes
//   OUT/cases.inc  each kernel's source in its own namespace (extern "C" removed)
//   OUT/calls.inc  a switch case per kernel calling it with typed arguments
#include <fstream>
#include <iostream>
#include <regex>

#include "kjit/compiler/ir/parser.h"
#include "kjit/runtime/elementwise.h"
#include "tests/unit/emulation/cases.h"

using namespace kjit;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: generate_cases OUT_DIR\n";
    return 2;
  }
  std::string dir = argv[1];
  std::ofstream cases(dir + "/cases.inc"), calls(dir + "/calls.inc");
  std::vector<EmuCase> all = emu_cases();
  for (size_t c = 0; c < all.size(); ++c) {
    const EmuCase& e = all[c];
    ElementwiseKernel kernel(ir::parse(e.text), ir::ElementwiseConfig::parse(e.config));
    std::vector<int> ids = kernel.graph().inputs();
    // Fake addresses with the cases' offsets: plan() only looks at their alignment.
    std::vector<TensorArg> in, out;
    CUdeviceptr address = 0x100000;
    for (size_t i = 0; i < e.inputs.size(); ++i) {
      DType d = kernel.graph().node(ids[i]).dtype;
      address += 0x100000;
      in.push_back({address + static_cast<CUdeviceptr>(e.inputs[i].offset * ir::size_bytes(d)), d,
                    std::vector<int64_t>(e.inputs[i].shape.begin(), e.inputs[i].shape.end()),
                    std::vector<int64_t>(e.inputs[i].strides.begin(), e.inputs[i].strides.end())});
    }
    for (const auto& [name, id] : kernel.graph().outputs())
      out.push_back({address += 0x100000,
                     kernel.graph().node(id).dtype,
                     std::vector<int64_t>(e.out_shape.begin(), e.out_shape.end()),
                     {}});
    Alignment alignment = e.alignment == 0   ? Alignment::Auto
                          : e.alignment == 1 ? Alignment::Aligned
                                             : Alignment::Unaligned;
    ElementwisePlan plan = kernel.plan(in, out, alignment);
    KernelSource source = kernel.source(plan);
    std::string text = std::regex_replace(source.source, std::regex("extern \"C\" "), "");
    cases << "namespace case_" << c << " {\n" << text << "}  // namespace case_" << c << "\n";
    calls << "    case " << c << ":  // " << plan.problem.text() << "\n      case_" << c
          << "::" << source.name << "(";
    int arg = 0;
    for (int id : ids)
      calls << "(const " << ir::storage_type(kernel.graph().node(id).dtype) << "*)p[" << arg++
            << "], ";
    for (const auto& [name, id] : kernel.graph().outputs())
      calls << "(" << ir::storage_type(kernel.graph().node(id).dtype) << "*)p[" << arg++ << "], ";
    calls << "n, cols";
    for (size_t i = 0; i < ids.size(); ++i) {
      if (plan.problem.access[i] == ir::Access::Strided)
        calls << ", " << plan.strides[i].first << ", " << plan.strides[i].second;
    }
    calls << ");\n      return \"" << plan.problem.text() << "\";\n";
  }
  return 0;
}
