#include "kjit/compiler/passes/pipeline.h"

#include <sstream>

#include "kjit/compiler/ir/printer.h"
#include "kjit/compiler/ir/verifier.h"
#include "kjit/compiler/passes/constant_fold.h"
#include "kjit/compiler/passes/cse.h"
#include "kjit/compiler/passes/dce.h"
#include "kjit/support/log.h"
#include "kjit/support/options.h"

namespace kjit::ir {

bool dump_passes_requested() {
  std::optional<std::string> dump = env("KJIT_DUMP");
  if (!dump) return false;
  std::string list = "," + *dump + ",";
  return list.find(",passes,") != std::string::npos || list.find(",all,") != std::string::npos;
}

Graph optimize(const Graph& input, std::ostream* log) {
  // KJIT_DUMP=passes: the dump goes to the log sink (stderr unless replaced).
  std::ostringstream dump;
  if (!log && dump_passes_requested()) log = &dump;
  struct Flush {
    std::ostringstream& text;
    ~Flush() {
      if (!text.str().empty()) log_text(text.str());
    }
  } flush{dump};
  Graph graph = input;
  std::string previous = print(graph);
  auto step = [&](const char* name, auto&& pass) {
    graph = pass(graph);
    if (!log) return;
    std::string now = print(graph);
    *log << "=== after " << name << " ===\n" << (now == previous ? "(unchanged)\n" : now);
    previous = now;
  };
  if (log) *log << "=== input ===\n" << previous;
  step("verify", [](const Graph& g) {
    verify(g);
    return g;
  });
  step("constant_fold", constant_fold);
  step("cse", cse);
  step("dce", dce);
  verify(graph);
  return graph;
}

}  // namespace kjit::ir
