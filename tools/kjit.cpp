// kjit — the command-line tool. Subcommands live in tools/cli/, one per file.
#include <cstdio>
#include <iostream>

#include "support/error.h"
#include "tools/cli/command.h"

int main(int argc, char** argv) {
  CLI::App app{"kjit: a JIT kernel generator and autotuner for NVIDIA GPUs", "kjit"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(KJIT_VERSION));
  kjit::cli::add_registered_commands(app);

  // Name an unknown subcommand plainly (CLI11 would only say one is required).
  auto is_subcommand = [&app](const std::string& name) {
    for (const CLI::App* sub : app.get_subcommands({})) {
      if (sub->check_name(name)) return true;
    }
    return false;
  };
  if (argc > 1 && argv[1][0] != '-' && !is_subcommand(argv[1])) {
    std::cerr << "kjit: unknown subcommand '" << argv[1] << "'\n\n" << app.help();
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // Unknown subcommand or flag, missing argument: say what, show usage, exit 2.
    std::cerr << "kjit: " << e.what() << "\n\n";
    const CLI::App* context = &app;
    for (const CLI::App* sub : app.get_subcommands()) context = sub;
    std::cerr << context->help();
    return 2;
  } catch (const kjit::UserError& e) {
    std::cerr << "kjit: " << e.what() << "\n";
    return 2;
  } catch (const kjit::InternalError& e) {
    std::cerr << "kjit: " << e.what() << "\n";
    return 3;
  } catch (const kjit::Error& e) {
    std::cerr << "kjit: " << to_string(e.kind()) << ": " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "kjit: internal error: " << e.what() << "\n";
    return 3;
  }
  return kjit::cli::exit_code;
}
