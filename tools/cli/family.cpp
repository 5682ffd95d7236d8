#include "tools/cli/family.h"

#include <map>

namespace kjit::cli {

const char* to_string(Verb verb) {
  switch (verb) {
    case Verb::Emit:
      return "emit";
    case Verb::Compile:
      return "compile";
    case Verb::Run:
      return "run";
    case Verb::Bench:
      return "bench";
    case Verb::Explain:
      return "explain";
    case Verb::Tune:
      return "tune";
  }
  return "?";
}

namespace {
std::map<std::string, FamilyHandler>& families() {
  static std::map<std::string, FamilyHandler> registry;
  return registry;
}
}  // namespace

bool register_family(const char* name, FamilyHandler handler) {
  families()[name] = handler;
  return true;
}

FamilyHandler find_family(const std::string& name) {
  auto it = families().find(name);
  return it == families().end() ? nullptr : it->second;
}

}  // namespace kjit::cli
