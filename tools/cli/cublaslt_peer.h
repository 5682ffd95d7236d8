// cuBLASLt as the peer of `kjit bench matmul`, loaded with dlopen at run time: the
// kjit binary links neither cuBLAS nor the CUDA runtime, and runs without them
// (the peer is then reported as unavailable, with the reason).
//
// Row-major C[M,N] = op(A) op(B) in kjit's layouts maps to cuBLAS' column-major
// C^T = op(B)^T op(A)^T: B's storage is cuBLAS' first operand, A's the second.
#pragma once

#include <cuda.h>

#include <memory>
#include <string>

#include "kjit/compiler/lowering/matmul.h"
#include "kjit/runtime/cuda/memory.h"

namespace kjit::cli {

class CublasLtPeer {
 public:
  // nullptr (and `reason`) when libcublasLt cannot be loaded.
  static std::unique_ptr<CublasLtPeer> load(std::string* reason);
  ~CublasLtPeer();
  CublasLtPeer(const CublasLtPeer&) = delete;
  CublasLtPeer& operator=(const CublasLtPeer&) = delete;

  // Plans C = op(A) op(B) (alpha 1, beta 0, strided batch of back-to-back
  // matrices) for `problem` (its epilogue ignored; output dtype = input dtype), with rows
  // `lda`, `ldb`, `ldc` elements apart as stored (0: packed). Throws on failure.
  // With `gelu_bias` (a device vector of N values of C's type): C = gelu(op(A) op(B)
  // + bias) in cuBLASLt's fused epilogue (CUBLASLT_EPILOGUE_GELU_BIAS; its gelu is the
  // tanh form, kjit's `gelu` the erf form), the vendor's cost of the same fusion.
  void plan(const matmul::Problem& problem, int64_t lda = 0, int64_t ldb = 0, int64_t ldc = 0,
            CUdeviceptr gelu_bias = 0);
  // Asynchronous on `stream`; plan() first.
  void run(CUdeviceptr a, CUdeviceptr b, CUdeviceptr c, CUstream stream);

  struct Api;

 private:
  CublasLtPeer() = default;
  void release_plan();
  std::unique_ptr<Api> api_;
  void* handle_ = nullptr;       // cublasLtHandle_t
  void* desc_ = nullptr;         // cublasLtMatmulDesc_t
  void* first_ = nullptr;        // cublasLtMatrixLayout_t: B's storage
  void* second_ = nullptr;       // A's storage
  void* out_ = nullptr;          // C
  unsigned char algo_[64] = {};  // cublasLtMatmulAlgo_t
  std::unique_ptr<cuda::DeviceBuffer> workspace_;
};

}  // namespace kjit::cli
