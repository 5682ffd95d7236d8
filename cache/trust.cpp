#include "kjit/cache/trust.h"

#include <pwd.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace kjit::cache::detail {

namespace {

// "uid 1001 (alice)"
std::string owner_text(uid_t uid) {
  struct passwd entry {};
  struct passwd* found = nullptr;
  char buffer[1024];
  if (::getpwuid_r(uid, &entry, buffer, sizeof buffer, &found) == 0 && found != nullptr)
    return fmt::format("uid {} ({})", uid, found->pw_name);
  return fmt::format("uid {}", uid);
}

std::string mode_text(mode_t mode) {
  return fmt::format("{:04o}", static_cast<unsigned>(mode & 07777));
}

std::string not_yours(const std::string& path, uid_t owner) {
  return fmt::format(
      "{} belongs to {}, not to you ({}); another user could put code there. Fix: use a cache "
      "directory of your own (KJIT_CACHE_DIR=...)",
      path, owner_text(owner), owner_text(::geteuid()));
}

std::string writable_by_others(const std::string& path, mode_t mode, const char* what) {
  return fmt::format(
      "{} is writable by group or others (mode {}); another user could put code there. Fix: chmod "
      "go-w '{}'{}",
      path, mode_text(mode), path, what);
}

}  // namespace

std::string directory_distrust(const std::string& directory) {
  const uid_t me = ::geteuid();
  namespace fs = std::filesystem;
  fs::path dir(directory);
  bool top = true;  // the store's own directory; then each one above it
  for (fs::path at = dir;; at = at.parent_path()) {
    struct stat info {};
    if (::lstat(at.c_str(), &info) != 0)
      return fmt::format("cannot check {}: {}", at.string(), std::strerror(errno));
    if (!S_ISDIR(info.st_mode)) return fmt::format("{} is not a directory", at.string());
    if (top) {
      if (info.st_uid != me) return not_yours(at.string(), info.st_uid);
      if (info.st_mode & (S_IWGRP | S_IWOTH))
        return writable_by_others(at.string(), info.st_mode,
                                  ", or set KJIT_CACHE_DIR to a private directory");
    } else {
      if (info.st_uid != me && info.st_uid != 0) return not_yours(at.string(), info.st_uid);
      if ((info.st_mode & (S_IWGRP | S_IWOTH)) && !(info.st_mode & S_ISVTX))
        return fmt::format(
            "{} (above the cache directory) is writable by group or others (mode {}), so another "
            "user could replace the cache directory. Fix: chmod go-w '{}', or set KJIT_CACHE_DIR "
            "to "
            "a directory under a private one",
            at.string(), mode_text(info.st_mode), at.string());
    }
    top = false;
    if (!at.has_relative_path()) break;  // reached "/"
  }
  return "";
}

std::string file_distrust(const std::string& path, const struct stat& info, bool private_file) {
  if (S_ISLNK(info.st_mode))
    return fmt::format(
        "{} is a symbolic link; kjit never follows links in its cache. Fix: remove it", path);
  if (!S_ISREG(info.st_mode)) return fmt::format("{} is not a regular file", path);
  if (info.st_uid != ::geteuid()) return not_yours(path, info.st_uid);
  if (private_file && (info.st_mode & (S_IRWXG | S_IRWXO)))
    return fmt::format(
        "{} is the cache's secret key, but others may read or write it (mode {}). Fix: remove it "
        "(kjit makes a new one; stored binaries are then recompiled)",
        path, mode_text(info.st_mode));
  if (info.st_mode & (S_IWGRP | S_IWOTH)) return writable_by_others(path, info.st_mode, "");
  return "";
}

}  // namespace kjit::cache::detail
