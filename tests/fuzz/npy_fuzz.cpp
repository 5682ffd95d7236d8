// libFuzzer target for .npy reading (support/npy.cpp), the format of `kjit run
// --input NAME=FILE`: any bytes either read or give a UserError. A file that
// reads holds exactly the bytes its shape and dtype say, its values convert, and
// it writes back and reads again to the same array. Anything else (a crash, a
// sanitizer report, another exception type) is a bug.
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "kjit/support/checked_math.h"
#include "kjit/support/error.h"
#include "kjit/support/npy.h"

namespace {

// One scratch file per process, rewritten for every input (read_npy reads paths).
const std::string& scratch_path() {
  static const std::string path = "/tmp/kjit-npy-fuzz-" + std::to_string(::getpid()) + ".npy";
  return path;
}

void write_file(const std::string& path, const uint8_t* data, size_t size) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) std::abort();
  if (size > 0 && ::write(fd, data, size) != static_cast<ssize_t>(size)) std::abort();
  ::close(fd);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  write_file(scratch_path(), data, size);
  kjit::NpyArray array;
  try {
    array = kjit::read_npy(scratch_path());
  } catch (const kjit::UserError&) {
    return 0;
  }
  const int item = kjit::npy_item_size(array.descr);
  std::optional<int64_t> count = kjit::checked_product(array.shape);
  if (item == 0 || !count || *count < 0) std::abort();
  if (static_cast<int64_t>(array.data.size()) != *count * item) std::abort();
  if (static_cast<int64_t>(kjit::npy_values(array).size()) != *count) std::abort();
  const std::string again_path = scratch_path() + ".again";
  kjit::write_npy(again_path, array);
  kjit::NpyArray again = kjit::read_npy(again_path);
  ::unlink(again_path.c_str());
  if (again.descr != array.descr || again.shape != array.shape || again.data != array.data)
    std::abort();
  return 0;
}
