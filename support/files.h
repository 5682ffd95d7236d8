// Reading files a user names (a .cu source, an expression, a .npy array). Only
// regular files are read: a directory, a FIFO (which would block), /dev/zero
// (which never ends) or a socket is refused with a UserError that says what the
// path is. Whole-file reads are capped, so a wrong path cannot exhaust memory.
#pragma once

#include <cstdint>
#include <string>

namespace kjit {

// An open regular file. Opening never blocks (a FIFO is refused, not waited on).
class InputFile {
 public:
  // A UserError names the path and the OS error, or what the path is instead
  // of a regular file.
  explicit InputFile(const std::string& path);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  const std::string& path() const { return path_; }
  // The size when opened.
  int64_t size() const { return size_; }
  // The next `count` bytes, fewer at the end of the file; a UserError on a read error.
  std::string read(int64_t count);
  // Reads up to `count` bytes into `out` (which holds that many); returns how many
  // it read, fewer only at the end of the file.
  int64_t read_into(char* out, int64_t count);

 private:
  std::string path_;
  int fd_ = -1;
  int64_t size_ = 0;
};

// The whole of the regular file at `path`. A UserError when it is not one, or
// when it holds more than `max_bytes`: "'big.cu' is 20.0 MiB; kjit reads at most
// 16.0 MiB of CUDA source" (`what` names the content).
std::string read_regular_file(const std::string& path, int64_t max_bytes, const std::string& what);

// "20.0 MiB", "512 bytes"
std::string byte_size_text(int64_t bytes);

}  // namespace kjit
