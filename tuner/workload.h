// Workload files: the problems an application runs, to tune offline in one go
// (`kjit tune --workload FILE`). JSON, either a list of problem specs or an object
// with a "problems" list (and any other fields, e.g. a "name" and a "description"):
//
//   {"name": "llama-7b layer, 4096 tokens",
//    "problems": [
//      {"family": "matmul", "m": 4096, "n": 12288, "k": 4096},
//      {"family": "elementwise", "expr": "y = silu(g) * u", "dtype": "bf16",
//       "sizes": {"n": 45088768}}]}
//
// Every error names the file and the line of the problem (or of the JSON error).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kjit/tuner/family.h"

namespace kjit::tuner {

struct WorkloadEntry {
  int line = 0;  // where the problem's spec starts
  nlohmann::json spec;
  std::unique_ptr<TuningProblem> problem;
  // Later problems of the file that are this one (the same signature, e.g. the
  // same epilogue spelt with other spacing): tuned once, with this one.
  std::vector<int> same_at_lines;
};

// Parses `text` (from `path`, named in errors); UserError for an empty or
// malformed file, a problem that is not a valid spec, or no problems at all. A
// problem listed again is one entry (its lines in `same_at_lines`).
std::vector<WorkloadEntry> parse_workload(const std::string& text, const std::string& path);

}  // namespace kjit::tuner
