// The option set shared by `kjit emit|compile|run|bench WHAT`, and the dispatch:
// WHAT names a registered family (family.h) or is an elementwise expression.
#pragma once

#include <CLI/CLI.hpp>

#include "tools/cli/family.h"

namespace kjit::cli {

// Adds WHAT and every KernelCommandOptions flag to `command`.
void add_kernel_options(CLI::App* command, KernelCommandOptions& options);

// Calls the family's handler, or the elementwise one.
void run_kernel_command(const KernelCommandOptions& options);

// The elementwise handler (tools/cli/elementwise.cpp).
void run_elementwise_command(const KernelCommandOptions& options);

}  // namespace kjit::cli
