// libFuzzer target for --config parsing: the same text as an elementwise config
// (ElementwiseConfig::parse) and as a matmul config (matmul::Config::parse), the
// two grammars over support/key_values. Any text either parses or gives a
// UserError; an elementwise config (validated as it parses) and a matmul config
// that validates print to canonical text that parses back to the same config,
// and the matmul one lowers to source.
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>

#include "kjit/compiler/lowering/elementwise.h"
#include "kjit/compiler/lowering/matmul.h"
#include "kjit/support/error.h"

namespace {

// What `parse(text)` gives, or nothing for a UserError.
template <class Config>
std::optional<Config> parsed(const std::string& text) {
  try {
    return Config::parse(text);
  } catch (const kjit::UserError&) {
    return std::nullopt;
  }
}

void elementwise(const std::string& text) {
  std::optional<kjit::ir::ElementwiseConfig> config = parsed<kjit::ir::ElementwiseConfig>(text);
  if (!config) return;
  const std::string canonical = config->text();
  if (kjit::ir::ElementwiseConfig::parse(canonical).text() != canonical) std::abort();
}

void matmul(const std::string& text) {
  std::optional<kjit::matmul::Config> maybe = parsed<kjit::matmul::Config>(text);
  if (!maybe) return;
  const kjit::matmul::Config& config = *maybe;
  // Parsing leaves consistency to validate() (mma=wgmma,bm=12 parses, with wm = 0);
  // a config that validates round-trips through its canonical text (what tunings
  // store) and lowers: each dtype of a small problem.
  for (kjit::matmul::DType dtype : {kjit::matmul::DType::BF16, kjit::matmul::DType::F32}) {
    kjit::matmul::Problem problem;
    problem.m = 64;
    problem.n = 64;
    problem.k = 64;
    problem.input = dtype;
    problem.output = dtype;
    try {
      kjit::matmul::validate(problem, config);
    } catch (const kjit::UserError&) {
      continue;
    }
    if (!(kjit::matmul::Config::parse(config.to_string()) == config)) std::abort();
    if (kjit::matmul::lower(problem, config).source.empty()) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  elementwise(text);
  matmul(text);
  return 0;
}
