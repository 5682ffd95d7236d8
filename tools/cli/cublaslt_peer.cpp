#include "tools/cli/cublaslt_peer.h"

#include <cublasLt.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <cstring>

#include "kjit/support/error.h"

namespace kjit::cli {

// The cuBLASLt entry points kjit uses, resolved with dlsym.
struct CublasLtPeer::Api {
  void* library = nullptr;
  decltype(&cublasLtCreate) create = nullptr;
  decltype(&cublasLtDestroy) destroy = nullptr;
  decltype(&cublasLtMatmulDescCreate) desc_create = nullptr;
  decltype(&cublasLtMatmulDescDestroy) desc_destroy = nullptr;
  decltype(&cublasLtMatmulDescSetAttribute) desc_set = nullptr;
  decltype(&cublasLtMatrixLayoutCreate) layout_create = nullptr;
  decltype(&cublasLtMatrixLayoutDestroy) layout_destroy = nullptr;
  decltype(&cublasLtMatrixLayoutSetAttribute) layout_set = nullptr;
  decltype(&cublasLtMatmulPreferenceCreate) pref_create = nullptr;
  decltype(&cublasLtMatmulPreferenceDestroy) pref_destroy = nullptr;
  decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set = nullptr;
  decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic = nullptr;
  decltype(&cublasLtMatmul) matmul = nullptr;
};

namespace {

void check(cublasStatus_t status, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(
        fmt::format("{} failed with cuBLAS status {}", call, static_cast<int>(status)));
}

template <typename F>
bool resolve(void* library, const char* name, F& out, std::string* reason) {
  out = reinterpret_cast<F>(dlsym(library, name));
  if (!out && reason) *reason = std::string("libcublasLt has no ") + name;
  return out != nullptr;
}

cudaDataType_t data_type(matmul::DType dtype) {
  switch (dtype) {
    case matmul::DType::F32:
    case matmul::DType::TF32:
      return CUDA_R_32F;
    case matmul::DType::F16:
      return CUDA_R_16F;
    case matmul::DType::BF16:
      return CUDA_R_16BF;
  }
  return CUDA_R_32F;
}

}  // namespace

std::unique_ptr<CublasLtPeer> CublasLtPeer::load(std::string* reason) {
  auto api = std::make_unique<Api>();
  const std::vector<std::string> names = {
#ifdef KJIT_CUDA_LIBRARY_DIR
      std::string(KJIT_CUDA_LIBRARY_DIR) + "/libcublasLt.so",
#endif
      "libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"};
  for (const std::string& name : names)
    if ((api->library = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL))) break;
  if (!api->library) {
    if (reason) *reason = std::string("cannot load libcublasLt: ") + dlerror();
    return nullptr;
  }
  void* l = api->library;
  if (!resolve(l, "cublasLtCreate", api->create, reason) ||
      !resolve(l, "cublasLtDestroy", api->destroy, reason) ||
      !resolve(l, "cublasLtMatmulDescCreate", api->desc_create, reason) ||
      !resolve(l, "cublasLtMatmulDescDestroy", api->desc_destroy, reason) ||
      !resolve(l, "cublasLtMatmulDescSetAttribute", api->desc_set, reason) ||
      !resolve(l, "cublasLtMatrixLayoutCreate", api->layout_create, reason) ||
      !resolve(l, "cublasLtMatrixLayoutDestroy", api->layout_destroy, reason) ||
      !resolve(l, "cublasLtMatrixLayoutSetAttribute", api->layout_set, reason) ||
      !resolve(l, "cublasLtMatmulPreferenceCreate", api->pref_create, reason) ||
      !resolve(l, "cublasLtMatmulPreferenceDestroy", api->pref_destroy, reason) ||
      !resolve(l, "cublasLtMatmulPreferenceSetAttribute", api->pref_set, reason) ||
      !resolve(l, "cublasLtMatmulAlgoGetHeuristic", api->heuristic, reason) ||
      !resolve(l, "cublasLtMatmul", api->matmul, reason))
    return nullptr;
  std::unique_ptr<CublasLtPeer> peer(new CublasLtPeer());
  cublasLtHandle_t handle = nullptr;
  if (api->create(&handle) != CUBLAS_STATUS_SUCCESS) {
    if (reason) *reason = "cublasLtCreate failed";
    return nullptr;
  }
  peer->handle_ = handle;
  peer->api_ = std::move(api);
  return peer;
}

void CublasLtPeer::release_plan() {
  if (first_) api_->layout_destroy(static_cast<cublasLtMatrixLayout_t>(first_));
  if (second_) api_->layout_destroy(static_cast<cublasLtMatrixLayout_t>(second_));
  if (out_) api_->layout_destroy(static_cast<cublasLtMatrixLayout_t>(out_));
  if (desc_) api_->desc_destroy(static_cast<cublasLtMatmulDesc_t>(desc_));
  first_ = second_ = out_ = desc_ = nullptr;
}

CublasLtPeer::~CublasLtPeer() {
  if (!api_) return;
  release_plan();
  if (handle_) api_->destroy(static_cast<cublasLtHandle_t>(handle_));
  // The library stays loaded: cuBLAS keeps state until process exit.
}

void CublasLtPeer::plan(const matmul::Problem& p, int64_t lda, int64_t ldb, int64_t ldc,
                        CUdeviceptr gelu_bias) {
  release_plan();
  // Stored row lengths (cuBLAS' column lengths) and the given leading dimensions.
  const int64_t a_row = p.a_transposed ? p.m : p.k, b_row = p.b_transposed ? p.k : p.n;
  lda = lda ? lda : a_row, ldb = ldb ? ldb : b_row, ldc = ldc ? ldc : p.n;
  const cudaDataType_t type = data_type(p.input);
  cublasLtMatmulDesc_t desc;
  // tf32: f32 data on the tensor cores, cuBLAS's "fast TF32" compute type.
  const cublasComputeType_t compute =
      p.input == matmul::DType::TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  check(api_->desc_create(&desc, compute, CUDA_R_32F), "cublasLtMatmulDescCreate");
  desc_ = desc;
  // First operand: B's storage. Row-major K x N is column-major N x K (op N);
  // row-major N x K ("t") is column-major K x N (op T).
  const cublasOperation_t op_first = p.b_transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second = p.a_transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  check(api_->desc_set(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof op_first), "TRANSA");
  check(api_->desc_set(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof op_second), "TRANSB");
  if (gelu_bias != 0) {
    // cuBLAS' output is C^T: its rows are C's columns, so its per-row bias is kjit's
    // per-column one (bias:col), in the output's type by default.
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_GELU_BIAS;
    const void* bias = reinterpret_cast<const void*>(gelu_bias);
    check(api_->desc_set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue),
          "EPILOGUE");
    check(api_->desc_set(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias),
          "BIAS_POINTER");
  }
  cublasLtMatrixLayout_t first, second, out;
  if (p.b_transposed)
    check(api_->layout_create(&first, type, p.k, p.n, ldb), "layout B");
  else
    check(api_->layout_create(&first, type, p.n, p.k, ldb), "layout B");
  first_ = first;
  if (p.a_transposed)
    check(api_->layout_create(&second, type, p.m, p.k, lda), "layout A");
  else
    check(api_->layout_create(&second, type, p.k, p.m, lda), "layout A");
  second_ = second;
  check(api_->layout_create(&out, type, p.n, p.m, ldc), "layout C");
  out_ = out;
  if (p.batch > 1) {
    const int32_t batch = static_cast<int32_t>(p.batch);
    const int64_t a_rows = p.a_transposed ? p.k : p.m, b_rows = p.b_transposed ? p.n : p.k;
    const int64_t strides[3] = {b_rows * ldb, a_rows * lda, p.m * ldc};
    cublasLtMatrixLayout_t layouts[3] = {first, second, out};
    for (int i = 0; i < 3; ++i) {
      check(api_->layout_set(layouts[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch),
            "batch count");
      check(api_->layout_set(layouts[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &strides[i],
                             sizeof strides[i]),
            "batch stride");
    }
  }
  const size_t workspace_bytes = 64 << 20;
  if (!workspace_) workspace_ = std::make_unique<cuda::DeviceBuffer>(workspace_bytes);
  cublasLtMatmulPreference_t preference;
  check(api_->pref_create(&preference), "cublasLtMatmulPreferenceCreate");
  check(api_->pref_set(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                       sizeof workspace_bytes),
        "workspace preference");
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status = api_->heuristic(static_cast<cublasLtHandle_t>(handle_), desc, first,
                                                second, out, out, preference, 1, &result, &found);
  api_->pref_destroy(preference);
  check(status, "cublasLtMatmulAlgoGetHeuristic");
  if (found == 0) throw std::runtime_error("cuBLASLt has no algorithm for this problem");
  static_assert(sizeof(result.algo) == sizeof(algo_), "cublasLtMatmulAlgo_t is 64 bytes");
  std::memcpy(algo_, &result.algo, sizeof algo_);
}

void CublasLtPeer::run(CUdeviceptr a, CUdeviceptr b, CUdeviceptr c, CUstream stream) {
  const float alpha = 1.0f, beta = 0.0f;
  cublasLtMatmulAlgo_t algo;
  std::memcpy(&algo, algo_, sizeof algo);
  check(api_->matmul(
            static_cast<cublasLtHandle_t>(handle_), static_cast<cublasLtMatmulDesc_t>(desc_),
            &alpha, reinterpret_cast<const void*>(b), static_cast<cublasLtMatrixLayout_t>(first_),
            reinterpret_cast<const void*>(a), static_cast<cublasLtMatrixLayout_t>(second_), &beta,
            reinterpret_cast<const void*>(c), static_cast<cublasLtMatrixLayout_t>(out_),
            reinterpret_cast<void*>(c), static_cast<cublasLtMatrixLayout_t>(out_), &algo,
            reinterpret_cast<void*>(workspace_->get()), workspace_->bytes(),
            reinterpret_cast<cudaStream_t>(stream)),
        "cublasLtMatmul");
}

}  // namespace kjit::cli
