// libFuzzer target for the text form: any input either parses or gives a
// UserError; a parsed graph verifies, optimizes, and prints to text that parses
// back to the same print (the round trip). Anything else (a crash, a sanitizer
// report, another exception type, a broken round trip) is a bug.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "compiler/ir/parser.h"
#include "compiler/ir/printer.h"
#include "compiler/ir/verifier.h"
#include "compiler/passes/pipeline.h"
#include "support/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  kjit::ir::Graph graph;
  try {
    graph = kjit::ir::parse(text);
  } catch (const kjit::UserError&) {
    return 0;
  }
  kjit::ir::verify(graph);
  std::string printed = kjit::ir::print(graph);
  if (kjit::ir::print(kjit::ir::parse(printed)) != printed) std::abort();
  try {
    kjit::ir::optimize(graph);
  } catch (const kjit::UserError&) {
    // e.g. outputs that do not broadcast together
  }
  return 0;
}
