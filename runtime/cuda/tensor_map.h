// Tensor maps for the copy engine (TMA, sm_90): how a kernel's bulk loads and
// stores see a strided tensor in global memory.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <span>
#include <vector>

namespace kjit::cuda {

// The byte strides of dimensions 1..rank-1 (dimension 0 is contiguous) of a tensor
// of `counts` elements per dimension, innermost first, `strides` elements apart
// (strides[i] steps dimension i + 1). A dimension of one element is only ever read
// at coordinate 0, so its stride is free: the caller's may be anything (PyTorch
// leaves any value there), but the copy engine takes only multiples of 16 below
// 2^40 bytes; such a dimension gets the packed stride (the span of the dimensions
// below it, rounded up to 16 bytes) instead.
// UserError where a stride of a dimension of more than one element reaches
// kMaxStrideBytes.
inline constexpr int64_t kMaxStrideBytes = int64_t{1} << 40;
std::vector<uint64_t> tensor_map_strides(int64_t element_bytes, std::span<const int64_t> counts,
                                         std::span<const int64_t> strides);

// A tiled tensor map (cuTensorMapEncodeTiled) over `counts` elements (innermost
// first) `strides` elements apart, in boxes of `box` elements: 128-byte swizzle,
// 256-byte L2 promotion, zeros read past the tensor's edges.
CUtensorMap tiled_map(CUtensorMapDataType type, int64_t element_bytes, CUdeviceptr base,
                      std::span<const int64_t> counts, std::span<const int64_t> strides,
                      std::span<const uint32_t> box);

}  // namespace kjit::cuda
