// libFuzzer target for the text form, as written and as a matmul epilogue reads
// it (`acc` predeclared): any input either parses or gives a UserError; a parsed
// graph verifies, optimizes, and prints to text that parses back to the same
// print (the round trip). Anything else (a crash, a sanitizer report, another
// exception type, a broken round trip) is a bug.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "kjit/compiler/ir/parser.h"
#include "kjit/compiler/ir/printer.h"
#include "kjit/compiler/ir/verifier.h"
#include "kjit/compiler/passes/pipeline.h"
#include "kjit/support/error.h"

namespace {

// Parses, verifies, round-trips through the printer and optimizes one text.
void check(const std::string& text, const kjit::ir::ParseOptions& options) {
  kjit::ir::Graph graph;
  try {
    graph = kjit::ir::parse(text, options);
  } catch (const kjit::UserError&) {
    return;
  }
  kjit::ir::verify(graph);
  std::string printed = kjit::ir::print(graph);
  if (kjit::ir::print(kjit::ir::parse(printed)) != printed) std::abort();
  try {
    kjit::ir::optimize(graph);
  } catch (const kjit::UserError&) {
    // e.g. outputs that do not broadcast together
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  check(text, {});
  // As a matmul epilogue reads it: `acc` predeclared, bf16 operands.
  kjit::ir::ParseOptions epilogue;
  epilogue.default_dtype = kjit::ir::DType::BF16;
  epilogue.inputs = {
      {"acc", kjit::ir::DType::F32, {kjit::ir::Dim::named("m"), kjit::ir::Dim::named("n")}}};
  check(text, epilogue);
  return 0;
}
