#include "kjit/runtime/cuda/memory.h"

#include <algorithm>
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

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept {
  swap(other);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  DeviceBuffer taken(std::move(other));  // this buffer's memory goes with `taken`
  swap(taken);
  return *this;
}

void DeviceBuffer::swap(DeviceBuffer& other) noexcept {
  std::swap(pointer_, other.pointer_);
  std::swap(bytes_, other.bytes_);
  std::swap(handle_, other.handle_);
  std::swap(mapped_, other.mapped_);
  std::swap(compressed_, other.compressed_);
}

DeviceBuffer DeviceBuffer::compressible(size_t bytes) {
  const auto& api = Driver::get().api();
  CUdevice device = 0;
  KJIT_CU(cuCtxGetDevice, &device);
  int supported = 0;
  KJIT_CU(cuDeviceGetAttribute, &supported, CU_DEVICE_ATTRIBUTE_GENERIC_COMPRESSION_SUPPORTED,
          device);
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.allocFlags.compressionType = CU_MEM_ALLOCATION_COMP_GENERIC;
  size_t granule = 0;
  if (!supported || api.cuMemGetAllocationGranularity(
                        &granule, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS)
    return DeviceBuffer(bytes);
  DeviceBuffer buffer;
  buffer.bytes_ = bytes;
  buffer.mapped_ = (std::max<size_t>(bytes, 1) + granule - 1) / granule * granule;
  // Compressible memory is a limited resource: where the driver refuses it, plain
  // memory does the same job.
  if (api.cuMemCreate(&buffer.handle_, buffer.mapped_, &prop, 0) != CUDA_SUCCESS)
    return DeviceBuffer(bytes);
  // It may also grant plain memory for a compressible request: the buffer says which.
  CUmemAllocationProp granted{};
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (api.cuMemGetAllocationPropertiesFromHandle(&granted, buffer.handle_) != CUDA_SUCCESS ||
      api.cuMemAddressReserve(&buffer.pointer_, buffer.mapped_, 0, 0, 0) != CUDA_SUCCESS ||
      api.cuMemMap(buffer.pointer_, buffer.mapped_, 0, buffer.handle_, 0) != CUDA_SUCCESS ||
      api.cuMemSetAccess(buffer.pointer_, buffer.mapped_, &access, 1) != CUDA_SUCCESS)
    return DeviceBuffer(bytes);  // (buffer's release() undoes the steps that were taken)
  buffer.compressed_ = granted.allocFlags.compressionType == CU_MEM_ALLOCATION_COMP_GENERIC;
  return buffer;
}

void DeviceBuffer::release() noexcept {
  const auto& api = Driver::get().api();
  if (handle_ != 0) {  // compressible(): unmap, give back the addresses and the memory
    if (pointer_ != 0) {
      api.cuMemUnmap(pointer_, mapped_);
      api.cuMemAddressFree(pointer_, mapped_);
    }
    api.cuMemRelease(handle_);
  } else if (pointer_ != 0) {
    api.cuMemFree(pointer_);
  }
  pointer_ = 0;
  bytes_ = 0;
  handle_ = 0;
  mapped_ = 0;
  compressed_ = false;
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
