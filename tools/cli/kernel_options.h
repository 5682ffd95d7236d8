// The option set shared by `kjit emit|compile|run|bench WHAT`, and the dispatch:
// WHAT names a registered family (family.h) or is an elementwise expression.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "tools/cli/family.h"

namespace kjit::cli {

// Adds WHAT and every KernelCommandOptions flag to `command`.
void add_kernel_options(CLI::App* command, KernelCommandOptions& options);

// Calls the family's handler, or the elementwise one.
void run_kernel_command(const KernelCommandOptions& options);

// The options with WHAT read from -f FILE where given, checked against the family
// and the verb (an option that does not apply is a UserError).
KernelCommandOptions resolved(const KernelCommandOptions& options);

// The tuning spec of an attention command's problem (tools/cli/attention.cpp).
nlohmann::json attention_spec(const KernelCommandOptions& options);

// The tuner's description of the problem the options name (tuner::make_problem):
// matmul (--m, --n, --k required) or an elementwise expression (sizes from --n,
// --m, --k: 2^20, 1024 and 1 by default, as for the other verbs).
nlohmann::json problem_spec(const KernelCommandOptions& options);

// The elementwise handler (tools/cli/elementwise.cpp).
void run_elementwise_command(const KernelCommandOptions& options);

}  // namespace kjit::cli
