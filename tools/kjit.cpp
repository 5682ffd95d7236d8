// kjit — the command-line tool. Subcommands live in tools/cli/, one per file.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <vector>

#include "kjit/support/error.h"
#include "tools/cli/command.h"

namespace {

int run(int argc, char** argv) {
  CLI::App app{"kjit: a JIT kernel generator and autotuner for NVIDIA GPUs", "kjit"};
  app.require_subcommand(1);
  app.set_version_flag(
      "--version", [] { return kjit::cli::version_text(); },
      "The version, git commit, generator, NVRTC and driver versions");
  kjit::cli::add_registered_commands(app);

  // Name an unknown subcommand plainly, at any level (CLI11 would only say one is
  // required): `kjit bogus`, `kjit cache list`.
  CLI::App* level = &app;
  for (int i = 1; i < argc && argv[i][0] != '-'; ++i) {
    std::vector<CLI::App*> subcommands = level->get_subcommands({});
    if (subcommands.empty()) break;
    CLI::App* named = nullptr;
    for (CLI::App* sub : subcommands)
      if (sub->check_name(argv[i])) named = sub;
    if (!named) {
      std::cerr << "kjit: unknown subcommand '" << argv[i] << "'"
                << (level == &app ? "" : " of '" + level->get_name() + "'") << "\n\n"
                << level->help();
      return 2;
    }
    level = named;
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
  } catch (const kjit::cli::NoGpu& e) {
    std::cerr << "kjit: " << e.what() << " (" << e.hint() << ")\n";
    return 1;
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

// Whatever was printed must have reached stdout: `kjit emit ... > /dev/full`
// (or a closed pipe, or a full disk) is a failure, not a success with nothing
// written. stdout is flushed here, so the error is known before exiting.
int check_stdout(int code) {
  errno = 0;
  std::cout.flush();
  const bool failed = !std::cout || std::fflush(stdout) != 0 || std::ferror(stdout);
  if (!failed) return code;
  const int error = errno;
  std::cerr << "kjit: cannot write to standard output: "
            << (error != 0 ? std::strerror(error) : "write error") << "\n";
  return code == 0 ? 1 : code;
}

}  // namespace

int main(int argc, char** argv) {
  return check_stdout(run(argc, argv));
}
