// The strides a tensor map gets (runtime/cuda/tensor_map.h): a dimension of one
// element is only read at coordinate 0, so whatever stride the caller left there
// (PyTorch leaves any value on a size-1 dimension) is replaced by the packed one,
// which the copy engine accepts (a multiple of 16 below 2^40 bytes); a far stride of
// a longer dimension is a user error.
#include "kjit/runtime/cuda/tensor_map.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kjit/support/error.h"

namespace kjit::cuda {
namespace {

constexpr int64_t kFar = int64_t{1} << 41;  // elements: past the copy engine's 2^40 bytes

TEST(TensorMapStrides, KeepsTheStridesOfDimensionsOfSeveralElements) {
  // A BHSD bf16 tensor: (D 128, seq 300, heads 4, batch 2), strides in elements.
  const int64_t counts[] = {128, 300, 4, 2};
  const int64_t strides[] = {128, 300 * 128, 4 * 300 * 128};
  EXPECT_EQ(tensor_map_strides(2, counts, strides),
            (std::vector<uint64_t>{256, 300 * 256, 4 * 300 * 256}));
}

TEST(TensorMapStrides, DimensionsOfOneElementTakeThePackedStride) {
  // One batch and one head with far strides: the batch stride covers the heads and
  // positions below it, the head stride the positions.
  const int64_t counts[] = {64, 500, 1, 1};
  const int64_t strides[] = {192, kFar, kFar};
  EXPECT_EQ(tensor_map_strides(2, counts, strides),
            (std::vector<uint64_t>{384, 500 * 384, 500 * 384}));
}

TEST(TensorMapStrides, EveryOuterDimensionOfOneElement) {
  // A decode matmul operand: one row of K f32 elements, one batch.
  const int64_t counts[] = {4096, 1, 1};
  const int64_t strides[] = {kFar, kFar};
  EXPECT_EQ(tensor_map_strides(4, counts, strides), (std::vector<uint64_t>{16384, 16384}));
}

TEST(TensorMapStrides, PackedStridesAreWhole16ByteUnits) {
  // A transposed A at K = 1: one stored row of M = 17 bf16 elements (34 bytes). The
  // copy engine takes only multiples of 16 (the GPU run refused 34 bytes).
  const int64_t counts[] = {17, 1, 1};
  const int64_t strides[] = {kFar, kFar};
  EXPECT_EQ(tensor_map_strides(2, counts, strides), (std::vector<uint64_t>{48, 48}));
  const int64_t one[] = {1, 1, 1};
  EXPECT_EQ(tensor_map_strides(2, one, strides), (std::vector<uint64_t>{16, 16}));
}

TEST(TensorMapStrides, AFarStrideOfALongDimensionIsAUserError) {
  // Only dimensions of one element are rewritten. A stride of 2^40 bytes or more of a
  // dimension read at other coordinates was handed to cuTensorMapEncodeTiled, whose
  // CUDA_ERROR_INVALID_VALUE named no stride: now a user error names it and the limit.
  const int64_t counts[] = {64, 3, 1};
  const int64_t strides[] = {kFar, 7};
  try {
    tensor_map_strides(2, counts, strides);
    ADD_FAILURE() << "a stride of 2^42 bytes was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(kFar * 2)), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("2^40"), std::string::npos) << e.what();
  }
  // 16 bytes below the limit is kept as given; the dimension of one element above it
  // (whose packed span, three such rows, passes the limit) stays below the limit.
  const int64_t near[] = {kMaxStrideBytes / 2 - 8, 7};
  EXPECT_EQ(tensor_map_strides(2, counts, near),
            (std::vector<uint64_t>{kMaxStrideBytes - 16, kMaxStrideBytes - 16}));
}

TEST(TensorMapStrides, RefusesAMismatchedRank) {
  const int64_t counts[] = {64, 3};
  const int64_t strides[] = {64, 192};
  EXPECT_ANY_THROW(tensor_map_strides(2, counts, strides));
}

}  // namespace
}  // namespace kjit::cuda
