// Helpers for the cache tests: a scratch directory, realistic binaries, raw
// SQLite access to damage files on purpose.
#pragma once

#include <sqlite3.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kjit/cache/records.h"
#include "kjit/cache/store.h"

namespace kjit::cache::testing {

namespace fs = std::filesystem;

// A fresh directory under $TMPDIR, removed with everything in it.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = (fs::temp_directory_path() / "kjit-cache-test-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ignored;
    fs::permissions(path_, fs::perms::owner_all, fs::perm_options::add, ignored);
    fs::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const fs::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

// Bytes that look like a cubin: the ELF magic, then a deterministic pattern.
inline std::vector<char> fake_cubin(size_t size, uint64_t seed) {
  std::vector<char> bytes(size);
  std::mt19937_64 random(seed);
  for (char& b : bytes) b = static_cast<char>(random());
  const char magic[] = {0x7f, 'E', 'L', 'F'};
  for (size_t i = 0; i < 4 && i < size; ++i) bytes[i] = magic[i];
  return bytes;
}

inline BinaryRecord make_binary(const std::string& key, size_t size, uint64_t seed,
                                const std::string& arch = "sm_90") {
  BinaryRecord r;
  r.key = key;
  r.cubin = fake_cubin(size, seed);
  r.source = "extern \"C\" __global__ void k_" + key + "() {}\n";
  r.nvrtc_log = "ptxas info    : Used 16 registers\n";
  r.options = {"-arch=" + arch, "-DKJIT_TILE=64", "--std=c++17"};
  r.arch = arch;
  r.nvrtc_version = "13.0";
  r.generator_version = "kjit-gen-1";
  r.ptxas_stats = R"([{"name":"k","registers":16}])";
  return r;
}

inline TuningRecord make_tuning(const std::string& gpu, const std::string& problem,
                                const std::string& config, double median_ms, double spread,
                                int64_t runs) {
  return TuningRecord{gpu, problem, config, {median_ms, spread, runs}, "tuner-1", 0};
}

// Every file in `dir` whose name starts with `prefix`.
inline std::vector<std::string> files_starting_with(const fs::path& dir,
                                                    const std::string& prefix) {
  std::vector<std::string> out;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().filename().string().rfind(prefix, 0) == 0)
      out.push_back(entry.path().string());
  return out;
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline int mode_of(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return -1;
  return static_cast<int>(info.st_mode & 0777);
}

// Raw SQL on a file, outside the store (to build fixtures and damage rows).
class RawDb {
 public:
  explicit RawDb(const std::string& path) {
    if (sqlite3_open(path.c_str(), &db_) != SQLITE_OK) throw std::runtime_error("open failed");
    sqlite3_busy_timeout(db_, 10000);
  }
  ~RawDb() { sqlite3_close(db_); }
  RawDb(const RawDb&) = delete;
  RawDb& operator=(const RawDb&) = delete;
  void exec(const std::string& sql) {
    char* error = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &error) != SQLITE_OK) {
      std::string message = error ? error : "?";
      sqlite3_free(error);
      throw std::runtime_error(sql + ": " + message);
    }
  }
  int64_t query_int(const std::string& sql) {
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &stmt, nullptr) != SQLITE_OK)
      throw std::runtime_error(sql + ": " + sqlite3_errmsg(db_));
    int64_t value = sqlite3_step(stmt) == SQLITE_ROW ? sqlite3_column_int64(stmt, 0) : -1;
    sqlite3_finalize(stmt);
    return value;
  }
  std::string query_text(const std::string& sql) {
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &stmt, nullptr) != SQLITE_OK)
      throw std::runtime_error(sql + ": " + sqlite3_errmsg(db_));
    std::string value;
    if (sqlite3_step(stmt) == SQLITE_ROW && sqlite3_column_text(stmt, 0))
      value = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
    sqlite3_finalize(stmt);
    return value;
  }

 private:
  sqlite3* db_ = nullptr;
};

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
      ::setenv(name, value->c_str(), 1);
    else
      ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

inline bool any_contains(const std::vector<std::string>& lines, const std::string& needle) {
  for (const std::string& line : lines)
    if (line.find(needle) != std::string::npos) return true;
  return false;
}

}  // namespace kjit::cache::testing
