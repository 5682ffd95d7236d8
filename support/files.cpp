#include "kjit/support/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "kjit/support/error.h"

namespace kjit {

namespace {

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

std::string byte_size_text(int64_t bytes) {
  if (bytes < 1024) return fmt::format("{} bytes", bytes);
  if (bytes < (int64_t{1} << 20))
    return fmt::format("{:.1f} KiB", static_cast<double>(bytes) / 1024);
  return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
}

InputFile::InputFile(const std::string& path) : path_(path) {
  // O_NONBLOCK: opening a FIFO would otherwise wait for a writer. Regular files
  // ignore the flag.
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd_ < 0) throw UserError(fmt::format("cannot read '{}': {}", path, std::strerror(errno)));
  struct stat info {};
  if (::fstat(fd_, &info) != 0) {
    int error = errno;
    ::close(fd_);
    throw UserError(fmt::format("cannot read '{}': {}", path, std::strerror(error)));
  }
  if (!S_ISREG(info.st_mode)) {
    ::close(fd_);
    throw UserError(fmt::format("'{}' is {}, not a regular file", path, kind_of(info.st_mode)),
                    "give the path of a file");
  }
  size_ = static_cast<int64_t>(info.st_size);
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

int64_t InputFile::read_into(char* out, int64_t count) {
  int64_t done = 0;
  while (done < count) {
    ssize_t got =
        ::read(fd_, out + done, static_cast<size_t>(std::min<int64_t>(count - done, 1 << 30)));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw UserError(fmt::format("cannot read '{}': {}", path_, std::strerror(errno)));
    if (got == 0) break;
    done += got;
  }
  return done;
}

std::string InputFile::read(int64_t count) {
  std::string bytes;
  // Grown as data arrives: a huge `count` from a bad header never allocates
  // more than the file holds.
  constexpr int64_t kChunk = int64_t{1} << 20;
  while (static_cast<int64_t>(bytes.size()) < count) {
    const size_t have = bytes.size();
    const int64_t want = std::min(kChunk, count - static_cast<int64_t>(have));
    bytes.resize(have + static_cast<size_t>(want));
    const int64_t got = read_into(bytes.data() + have, want);
    bytes.resize(have + static_cast<size_t>(got));
    if (got < want) break;
  }
  return bytes;
}

std::string read_regular_file(const std::string& path, int64_t max_bytes, const std::string& what) {
  InputFile file(path);
  auto too_big = [&](int64_t size) {
    return UserError(fmt::format("'{}' is {}; kjit reads at most {} of {}", path,
                                 byte_size_text(size), byte_size_text(max_bytes), what));
  };
  if (file.size() > max_bytes) throw too_big(file.size());
  // One byte more than allowed shows a file that grew since it was opened.
  std::string bytes = file.read(max_bytes + 1);
  if (static_cast<int64_t>(bytes.size()) > max_bytes)
    throw too_big(static_cast<int64_t>(bytes.size()));
  return bytes;
}

}  // namespace kjit
