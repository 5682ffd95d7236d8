// Options read once from the environment, never inside hot paths. Every option
// that changes generated code is listed in `codegen_environment()` and so enters
// every cache key.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace kjit {

// The value of an environment variable, or nullopt when unset or empty.
std::optional<std::string> env(const char* name);

// True when the variable is set to 1, true, yes or on (any case).
bool env_flag(const char* name);

// "NAME=value" for every set environment variable that changes generated code,
// sorted; part of every binary cache key.
std::vector<std::string> codegen_environment();

}  // namespace kjit
