// SASS checks for compile tests: a cubin's listing through cuobjdump, and what the
// listing says about the wgmma kernels' descriptors.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace kjit::testing {

// cuobjdump --dump-sass of a cubin (the toolkit's, else one on PATH, as
// tools/quickstart.sh provides), or "" when the tool is not installed or fails.
// `tag` names the temporary file (tests compile on several threads).
inline std::string dump_sass(const std::vector<char>& cubin, const std::string& tag) {
  std::string tool = "/usr/local/cuda/bin/cuobjdump";
  if (!std::filesystem::exists(tool)) {
    if (std::system("command -v cuobjdump > /dev/null 2>&1") != 0) return "";
    tool = "cuobjdump";
  }
  const std::filesystem::path dir = std::filesystem::temp_directory_path();
  const std::string path = (dir / ("kjit_" + tag + ".cubin")).string();
  {
    std::ofstream file(path, std::ios::binary);
    file.write(cubin.data(), static_cast<std::streamsize>(cubin.size()));
  }
  std::string out;
  FILE* pipe = popen((tool + " --dump-sass " + path + " 2>&1").c_str(), "r");
  if (!pipe) return "";
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) out.append(buffer, n);
  pclose(pipe);
  std::filesystem::remove(path);
  // A cuobjdump without its nvdisasm prints only an error: not a listing to check.
  if (out.find("Function : ") == std::string::npos) {
    size_t start = out.find("fatal");
    if (start == std::string::npos) start = 0;
    std::printf("  (%s gave no listing: %s)\n", tool.c_str(),
                out.substr(start, out.find('\n', start) - start).c_str());
    return "";
  }
  return out;
}

// How many HGMMA instructions of a listing there are, and how many of them read a
// descriptor that was moved into its uniform register from the thread's registers
// (R2UR) rather than computed there. wgmma reads its shared-memory descriptors from
// uniform registers; one built from a value ptxas cannot prove warp-uniform (such as
// threadIdx.x / 128) is computed per thread and moved over, a dozen instructions per
// wgmma (templates/sm90.cuh: warpgroup_index, advance).
//
// Read in program order: each uniform register's last writer is remembered, and an
// HGMMA's descriptors are gdesc[URn]'s registers n .. n + 3 (A, then B), or n + 2 and
// n + 3 where A comes from registers (HGMMA R_acc, R_a, gdesc[URn]).
struct DescriptorSources {
  int hgmma = 0;
  int from_thread_registers = 0;
};
inline DescriptorSources hgmma_descriptor_sources(const std::string& sass) {
  static const std::regex instruction(
      R"(/\*[0-9a-f]{4,}\*/\s+(@!?U?P\w+\s+)?([A-Z0-9_.]+)\s*([^;]*);)");
  static const std::regex descriptor(R"(gdesc\[UR(\d+)\])");
  static const std::regex register_a(R"(^R\d+, R\d+, gdesc)");
  static const std::regex destination(R"(^UR(\d+))");
  DescriptorSources out;
  std::map<int, std::string> last_writer;
  std::istringstream lines(sass);
  std::string line;
  std::smatch m;
  while (std::getline(lines, line)) {
    if (line.find("Function : ") != std::string::npos) last_writer.clear();
    if (!std::regex_search(line, m, instruction)) continue;
    const std::string op = m[2].str(), operands = m[3].str();
    if (op.rfind("HGMMA", 0) == 0) {
      std::smatch d;
      if (!std::regex_search(operands, d, descriptor)) continue;
      const int n = std::stoi(d[1].str());
      const int first = std::regex_search(operands, register_a) ? n + 2 : n;
      bool moved = false;
      for (int r = first; r < n + 4; ++r) moved |= last_writer[r] == "R2UR";
      ++out.hgmma;
      if (moved) ++out.from_thread_registers;
      continue;
    }
    std::smatch d;
    if (!std::regex_search(operands, d, destination)) continue;
    const int n = std::stoi(d[1].str());
    const std::string base = op.substr(0, op.find('.'));
    last_writer[n] = base;
    if (op.find(".64") != std::string::npos || op.find("WIDE") != std::string::npos)
      last_writer[n + 1] = base;
  }
  return out;
}

}  // namespace kjit::testing
