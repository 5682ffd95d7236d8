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
  if (!bytes) return;
  KJIT_CU(cuMemcpyHtoD, pointer_ + offset, host, bytes);
  // From pageable memory cuMemcpyHtoD returns once the bytes are staged, with the
  // DMA still queued on the legacy stream, which a kernel on a non-blocking stream
  // does not wait for: finish it, so the data is there for any stream.
  KJIT_CU(cuStreamSynchronize, CU_STREAM_LEGACY);
}

void DeviceBuffer::download(void* host, size_t bytes, size_t offset) const {
  check_range(offset, bytes, bytes_);
  if (bytes) KJIT_CU(cuMemcpyDtoH, host, pointer_ + offset, bytes);
}

void DeviceBuffer::fill_bytes(unsigned char value) {
  if (!bytes_) return;
  // cuMemsetD8 returns before the device has written (it is queued on the legacy
  // stream); finish it, or a kernel on a non-blocking stream may run first and have
  // its results overwritten (compute-sanitizer's slow-down showed it).
  KJIT_CU(cuMemsetD8, pointer_, value, bytes_);
  KJIT_CU(cuStreamSynchronize, CU_STREAM_LEGACY);
}

StreamBuffer::StreamBuffer(size_t bytes, CUstream stream) : stream_(stream) {
  KJIT_CU(cuMemAllocAsync, &pointer_, bytes == 0 ? 1 : bytes, stream);
}

StreamBuffer::~StreamBuffer() {
  if (pointer_ != 0) Driver::get().api().cuMemFreeAsync(pointer_, stream_);
}

StreamBuffer::StreamBuffer(StreamBuffer&& other) noexcept
    : pointer_(std::exchange(other.pointer_, 0)), stream_(other.stream_) {}

}  // namespace kjit::cuda
