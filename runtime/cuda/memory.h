// Device memory, owned (RAII) with byte-level copies. Kernels take raw
// CUdeviceptr values, so callers can pass their own allocations too.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <vector>

namespace kjit::cuda {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  // Memory the GPU may keep compressed (CU_MEM_ALLOCATION_COMP_GENERIC: lines of
  // zeros, or of a repeated value, move through DRAM in a fraction of their bytes),
  // where the current context's GPU supports it; otherwise plain memory. Mapped
  // through the virtual memory API, in whole granules (2 MiB on the H200).
  static DeviceBuffer compressible(size_t bytes);
  bool compressed() const { return compressed_; }  // granted by the driver
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  CUdeviceptr get() const { return pointer_; }
  size_t bytes() const { return bytes_; }

  // upload() and fill_bytes() have finished on the device when they return, so a
  // kernel on any stream (non-blocking ones included) sees the bytes.
  void upload(const void* host, size_t bytes, size_t offset = 0);
  void download(void* host, size_t bytes, size_t offset = 0) const;
  // Fills every byte with `value` (tests poison outputs with 0xFF: NaN in every float type).
  void fill_bytes(unsigned char value);

  template <typename T>
  static DeviceBuffer from(const std::vector<T>& host) {
    DeviceBuffer buffer(host.size() * sizeof(T));
    buffer.upload(host.data(), host.size() * sizeof(T));
    return buffer;
  }
  template <typename T>
  std::vector<T> to_host() const {
    std::vector<T> host(bytes_ / sizeof(T));
    download(host.data(), host.size() * sizeof(T));
    return host;
  }

 private:
  void release() noexcept;
  void swap(DeviceBuffer& other) noexcept;
  CUdeviceptr pointer_ = 0;
  size_t bytes_ = 0;
  // compressible(): the physical allocation and its mapping's size (0: cuMemAlloc's).
  CUmemGenericAllocationHandle handle_ = 0;
  size_t mapped_ = 0;
  bool compressed_ = false;
};

// Scratch memory ordered on a stream (cuMemAllocAsync / cuMemFreeAsync, the
// driver's pool): usable by work enqueued on `stream` after the allocation, and
// given back after that work, without synchronizing. Each launch gets its own, so
// launches on different streams never share it.
class StreamBuffer {
 public:
  StreamBuffer(size_t bytes, CUstream stream);
  ~StreamBuffer();
  StreamBuffer(StreamBuffer&& other) noexcept;
  StreamBuffer(const StreamBuffer&) = delete;
  StreamBuffer& operator=(const StreamBuffer&) = delete;
  StreamBuffer& operator=(StreamBuffer&&) = delete;

  CUdeviceptr get() const { return pointer_; }

 private:
  CUdeviceptr pointer_ = 0;
  CUstream stream_ = nullptr;
};

}  // namespace kjit::cuda
