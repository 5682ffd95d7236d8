#include "kjit/support/error.h"

#include <gtest/gtest.h>

namespace kjit {
namespace {

TEST(Error, UserErrorCarriesHint) {
  UserError e("K must be at least 1", "pass --k 1 or more");
  EXPECT_EQ(e.kind(), ErrorKind::User);
  EXPECT_STREQ(e.what(), "K must be at least 1 (hint: pass --k 1 or more)");
  EXPECT_EQ(e.hint(), "pass --k 1 or more");
}

TEST(Error, CudaErrorNamesCallAndCode) {
  CudaError e("cuMemAlloc", 2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory");
  EXPECT_EQ(e.kind(), ErrorKind::Cuda);
  EXPECT_STREQ(e.what(), "cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory");
}

TEST(Error, CheckThrowsInternalError) {
  EXPECT_THROW(KJIT_CHECK(1 == 2, "math broke"), InternalError);
  EXPECT_NO_THROW(KJIT_CHECK(1 == 1, "fine"));
}

}  // namespace
}  // namespace kjit
