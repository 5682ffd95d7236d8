#include "kjit/runtime/cuda/tensor_map.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "kjit/runtime/cuda/driver.h"
#include "kjit/support/error.h"

namespace kjit::cuda {

std::vector<uint64_t> tensor_map_strides(int64_t element_bytes, std::span<const int64_t> counts,
                                         std::span<const int64_t> strides) {
  KJIT_CHECK(!counts.empty() && strides.size() + 1 == counts.size(),
             "a tensor map needs one stride per dimension past the first");
  std::vector<uint64_t> bytes(strides.size());
  int64_t packed = counts[0] * element_bytes;  // the span of the dimensions below
  for (size_t i = 0; i < strides.size(); ++i) {
    const int64_t count = counts[i + 1];
    int64_t stride;
    if (count == 1) {
      // Never stepped: the packed span, rounded up to the copy engine's 16 bytes (a
      // row of 17 bf16 elements spans 34), and kept below its limit.
      stride = std::min((packed + 15) / 16 * 16, kMaxStrideBytes - 16);
    } else {
      stride = strides[i] * element_bytes;
      if (stride >= kMaxStrideBytes)
        throw UserError(fmt::format("a stride of {} bytes (dimension {} of a tensor map, over "
                                    "{} elements): the copy engine (TMA) takes strides below "
                                    "2^40 bytes",
                                    stride, i + 1, count),
                        "pass a leading dimension or batch stride spanning less than 1 TiB");
    }
    bytes[i] = static_cast<uint64_t>(stride);
    packed = stride * count;
  }
  return bytes;
}

CUtensorMap tiled_map(CUtensorMapDataType type, int64_t element_bytes, CUdeviceptr base,
                      std::span<const int64_t> counts, std::span<const int64_t> strides,
                      std::span<const uint32_t> box) {
  constexpr size_t kMaxRank = 5;
  KJIT_CHECK(counts.size() <= kMaxRank && box.size() == counts.size(),
             "a tensor map has at most 5 dimensions and one box extent per dimension");
  std::array<cuuint64_t, kMaxRank> dims{};
  for (size_t i = 0; i < counts.size(); ++i) dims[i] = static_cast<cuuint64_t>(counts[i]);
  const std::vector<uint64_t> byte_strides = tensor_map_strides(element_bytes, counts, strides);
  std::array<cuuint64_t, kMaxRank> steps{};
  for (size_t i = 0; i < byte_strides.size(); ++i) steps[i] = byte_strides[i];
  std::array<cuuint32_t, kMaxRank> boxes{}, element_strides{};
  for (size_t i = 0; i < box.size(); ++i) {
    boxes[i] = box[i];
    element_strides[i] = 1;
  }
  CUtensorMap map;
  KJIT_CU(cuTensorMapEncodeTiled, &map, type, static_cast<cuuint32_t>(counts.size()),
          reinterpret_cast<void*>(base), dims.data(), steps.data(), boxes.data(),
          element_strides.data(), CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
          CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return map;
}

}  // namespace kjit::cuda
