#include "kjit/runtime/cuda/memory.h"

#include <string>
#include <utility>

#include "kjit/runtime/cuda/driver.h"
#include "kjit/support/error.h"

namespace kjit::cuda {

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  // cuMemAlloc rejects 0 bytes; keep one so every buffer has a valid address.
  KJIT_CU(cuMemAlloc, &pointer_, bytes == 0 ? 1 : bytes);
}

DeviceBuffer::~DeviceBuffer() {
  release();
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : pointer_(std::exchange(other.pointer_, 0)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    release();
    pointer_ = std::exchange(other.pointer_, 0);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::release() noexcept {
  if (pointer_ != 0) Driver::get().api().cuMemFree(pointer_);
  pointer_ = 0;
  bytes_ = 0;
}

static void check_range(size_t offset, size_t bytes, size_t size) {
  if (offset > size || bytes > size - offset)
    throw UserError("copy of " + std::to_string(bytes) + " bytes at offset " +
                    std::to_string(offset) + " overruns a device buffer of " +
                    std::to_string(size) + " bytes");
}

void DeviceBuffer::upload(const void* host, size_t bytes, size_t offset) {
  check_range(offset, bytes, bytes_);
  if (bytes) KJIT_CU(cuMemcpyHtoD, pointer_ + offset, host, bytes);
}

void DeviceBuffer::download(void* host, size_t bytes, size_t offset) const {
  check_range(offset, bytes, bytes_);
  if (bytes) KJIT_CU(cuMemcpyDtoH, host, pointer_ + offset, bytes);
}

void DeviceBuffer::fill_bytes(unsigned char value) {
  if (bytes_) KJIT_CU(cuMemsetD8, pointer_, value, bytes_);
}

}  // namespace kjit::cuda
