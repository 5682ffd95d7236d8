/* kjit's C API: fused elementwise chains, tensor-core matmuls and flash attention, compiled at run
 * time, tuned per GPU, cached in the user's store; launched on the caller's
 * buffers and stream. Link with kjit::kjit_c (CMake) or `pkg-config kjit_c`.
 *
 *   kjit_runtime* rt;
 *   if (kjit_runtime_create(0, &rt) != KJIT_OK) { puts(kjit_last_error()); ... }
 *   kjit_elementwise* k;
 *   kjit_elementwise_create(rt, "y = x * sigmoid(x) * g", KJIT_BF16, &k);
 *   int64_t n = 1 << 20;
 *   kjit_tensor in[2] = {{x_ptr, KJIT_BF16, 1, &n, NULL}, {g_ptr, KJIT_BF16, 1, &n, NULL}};
 *   kjit_tensor out[1] = {{y_ptr, KJIT_BF16, 1, &n, NULL}};
 *   kjit_elementwise_launch(k, in, 2, out, 1, stream);   // asynchronous
 *   kjit_elementwise_destroy(k); kjit_runtime_destroy(rt);
 *
 * Every call returns a status; on failure kjit_last_error() (per thread) says what
 * went wrong and how to fix it; a failed kjit_*_create sets its handle to NULL
 * (which every kjit_*_destroy takes). Nothing here exits or prints: diagnostics go to
 * the callback of kjit_set_log_callback (stderr by default). Device pointers are
 * CUdeviceptr values (uint64_t); streams are CUstream (NULL: the default stream).
 */
#ifndef KJIT_KJIT_C_H
#define KJIT_KJIT_C_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kjit_status {
  KJIT_OK = 0,
  KJIT_ERROR_USER = 1,    /* invalid input: the message says what and how to fix it */
  KJIT_ERROR_COMPILE = 2, /* NVRTC rejected the source */
  KJIT_ERROR_CUDA = 3,    /* a driver call failed (or there is no GPU) */
  KJIT_ERROR_CACHE = 4,   /* the store failed where the caller asked for it */
  KJIT_ERROR_INTERNAL = 5 /* a kjit bug */
} kjit_status;

typedef enum kjit_dtype {
  KJIT_F32 = 0,
  KJIT_F16 = 1,
  KJIT_BF16 = 2,
  KJIT_I32 = 3,
  KJIT_BOOL = 4
} kjit_dtype;

/* The message of the last failed call on this thread ("" when none; a call that
 * succeeds clears it). Valid until the thread's next kjit call. */
const char* kjit_last_error(void);
/* "0.1.0 (kjit-gen-2)". */
const char* kjit_version(void);
/* Where diagnostics go: `callback(line, user)` for every line (warnings, and the
 * topics KJIT_LOG enables; a text of several lines comes one line a call); NULL
 * restores stderr. Calls come from any thread, one at a time; the callback may call
 * kjit (log, set the topics, replace itself, compile and launch).
 * Once kjit_set_log_callback returns, no call of the old callback is under way on
 * another thread, so what it used may be freed. */
typedef void (*kjit_log_callback)(const char* line, void* user);
void kjit_set_log_callback(kjit_log_callback callback, void* user);
/* What is logged: "" warnings only (the default, unless KJIT_LOG says otherwise),
 * "none" nothing, "all" everything, or topics, comma separated ("config,tune"). */
void kjit_set_log_topics(const char* topics);
/* Frees what a kjit_* call returned for the caller to own (strings). */
void kjit_free(void* pointer);

/* A device tensor: `rank` sizes and strides (in elements; NULL: contiguous). */
typedef struct kjit_tensor {
  uint64_t data;
  kjit_dtype dtype;
  int rank;
  const int64_t* shape;
  const int64_t* strides;
} kjit_tensor;

/* ---- the runtime: one GPU's context, the store, the tuner's choices ---- */
typedef struct kjit_runtime kjit_runtime;
kjit_status kjit_runtime_create(int device, kjit_runtime** out);
/* Drops the caller's hold on the runtime. Kernels and buffers made from it hold it
 * too: it goes with the last of them, so handles may be destroyed in any order. */
void kjit_runtime_destroy(kjit_runtime* runtime);

/* ---- elementwise chains: an expression fused into one kernel ---- */
typedef struct kjit_elementwise kjit_elementwise;
/* `default_dtype`: the dtype of inputs the expression does not declare. */
kjit_status kjit_elementwise_create(kjit_runtime* runtime, const char* expression,
                                    kjit_dtype default_dtype, kjit_elementwise** out);
void kjit_elementwise_destroy(kjit_elementwise* kernel);
/* Inputs and outputs in declaration order; their names and dtypes: */
int kjit_elementwise_inputs(const kjit_elementwise* kernel);
int kjit_elementwise_outputs(const kjit_elementwise* kernel);
const char* kjit_elementwise_input_name(const kjit_elementwise* kernel, int index);
const char* kjit_elementwise_output_name(const kjit_elementwise* kernel, int index);
kjit_dtype kjit_elementwise_input_dtype(const kjit_elementwise* kernel, int index);
kjit_dtype kjit_elementwise_output_dtype(const kjit_elementwise* kernel, int index);
/* Checks everything, compiles on first use, launches asynchronously on `stream`. */
kjit_status kjit_elementwise_launch(kjit_elementwise* kernel, const kjit_tensor* inputs,
                                    int input_count, const kjit_tensor* outputs, int output_count,
                                    void* stream);
/* The same for the common case with less to fill in: every input and output a
 * contiguous vector of n elements of the dtype kjit_elementwise_input_dtype /
 * output_dtype names; `pointers` holds the inputs' then the outputs' addresses
 * (`count` of them). The same checks, the same kernel. */
kjit_status kjit_elementwise_launch_flat(kjit_elementwise* kernel, const uint64_t* pointers,
                                         int count, int64_t n, void* stream);

/* ---- matmul: C = epilogue(alpha * op(A) op(B) + beta * C0, extra operands) ---- */
typedef struct kjit_matmul_problem {
  int64_t m, n, k, batch; /* batch 0 means 1 */
  const char* layout;     /* "nn", "nt", "tn", "tt"; NULL: "nn" */
  kjit_dtype input;       /* KJIT_BF16, KJIT_F16 or KJIT_F32 (exact) */
  kjit_dtype output;      /* the same, or KJIT_F32 */
  const char* epilogue;   /* elementwise IR over acc, e.g. "gelu(acc + bias)"; NULL: none */
} kjit_matmul_problem;
typedef struct kjit_matmul_args {
  uint64_t a, b, c, c0;        /* c0 read when beta != 0 */
  int64_t lda, ldb, ldc, ldc0; /* 0: packed */
  float alpha, beta;           /* alpha 0 means 1 */
  const uint64_t* extras;      /* one pointer per epilogue operand, in order */
  int extra_count;
} kjit_matmul_args;
typedef struct kjit_matmul kjit_matmul;
kjit_status kjit_matmul_create(kjit_runtime* runtime, const kjit_matmul_problem* problem,
                               kjit_matmul** out);
void kjit_matmul_destroy(kjit_matmul* matmul);
/* The epilogue's extra operands, in the order kjit_matmul_args.extras takes them. */
int kjit_matmul_operands(const kjit_matmul* matmul);
const char* kjit_matmul_operand_name(const kjit_matmul* matmul, int index);
/* "row" (length M), "column" (length N) or "tensor" (M x N, rows packed); one array
 * shared by every batch. */
const char* kjit_matmul_operand_kind(const kjit_matmul* matmul, int index);
/* Its element type (KJIT_F32, KJIT_F16 or KJIT_BF16; KJIT_F32 for a bad index). */
kjit_dtype kjit_matmul_operand_dtype(const kjit_matmul* matmul, int index);
/* Scratch (padding copies, split-K partials and their arrival counters) belongs to the
 * handle: launches on one handle are ordered by their stream; use one handle per
 * concurrent stream. */
kjit_status kjit_matmul_launch(kjit_matmul* matmul, const kjit_matmul_args* args, void* stream);

/* ---- attention, forward: O = softmax(scale * Q K^T + mask) V and the log-sum-exp ---- */
typedef struct kjit_attention_problem {
  int64_t batch, heads, kv_heads; /* 0 means 1, 1, heads; kv_heads divides heads (GQA) */
  int64_t seq_q, seq_k;           /* seq_k 0 means seq_q */
  int head_dim;                   /* 64, 96, 128 or 256 */
  kjit_dtype dtype;               /* KJIT_BF16 or KJIT_F16 */
  int causal;                     /* nonzero: causal, bottom-right aligned when seq_q != seq_k */
  int windowed;                   /* nonzero: a sliding window of these keys around the diagonal */
  int64_t window_left, window_right; /* (when windowed) each >= 0, or -1 for unbounded */
  double scale;                      /* 0 means 1 / sqrt(head_dim) */
  /* Packed variable-length batches: `sequences` query and key lengths (seqlens_k NULL:
   * the same); then batch, seq_q and seq_k are ignored and Q, K, V, O are
   * [tokens, heads, head_dim]. */
  const int64_t* seqlens_q;
  const int64_t* seqlens_k;
  int sequences;
  /* Score and mask modifiers in kjit's IR (NULL or "": none), fused into every kernel:
   * score_mod maps s = scale * q.k to the score the softmax sees ("tanh(s / 50) * 50"),
   * mask_mod keeps the scores where it is nonzero ("kv_idx <= q_idx"). Both read q_idx,
   * kv_idx, head and operands ("slope:f32[heads]; s - slope * abs(q_idx - kv_idx)"). */
  const char* score_mod;
  const char* mask_mod;
  /* Backward: nonzero asks for the same bits every run (dQ in a kernel of its own);
   * zero lets the tuner pick a config that sums dQ with atomics (its last bits vary). */
  int deterministic;
} kjit_attention_problem;
typedef struct kjit_attention_strides {
  int64_t batch, seq, head; /* in elements; 0: packed BSHD ([batch, seq, heads, head_dim]) */
} kjit_attention_strides;
typedef struct kjit_attention_args {
  uint64_t q, k, v, o; /* 16-byte aligned; the head dim contiguous */
  uint64_t lse;        /* f32 [batch, heads, seq_q] ([heads, tokens] packed); 0: not written */
  kjit_attention_strides q_strides, k_strides, v_strides, o_strides;
  /* The modifiers' operands, the score modifier's first, in the order they name them:
   * device arrays of their dtype, [heads], [seq_q] or [seq_k]. */
  const uint64_t* modifier_operands;
  int modifier_operand_count;
} kjit_attention_args;
typedef struct kjit_attention kjit_attention;
/* The config comes from the tuner (the store's tuning, else the model); compiles now. */
kjit_status kjit_attention_create(kjit_runtime* runtime, const kjit_attention_problem* problem,
                                  kjit_attention** out);
void kjit_attention_destroy(kjit_attention* attention);
kjit_status kjit_attention_launch(kjit_attention* attention, const kjit_attention_args* args,
                                  void* stream);
/* The modifiers' operands, in the order modifier_operands takes them: the name, the
 * kind ("heads": `heads` values, one per query head; "q": `seq_q` values, one per query
 * position within a sequence; "kv": `seq_k`, per key position; for a packed batch
 * seq_q and seq_k are its longest sequence's) and the element type (NULL and KJIT_F32
 * for a bad index). */
int kjit_attention_operands(const kjit_attention* attention);
const char* kjit_attention_operand_name(const kjit_attention* attention, int index);
const char* kjit_attention_operand_kind(const kjit_attention* attention, int index);
kjit_dtype kjit_attention_operand_dtype(const kjit_attention* attention, int index);

/* ---- attention, backward: dQ, dK, dV from dO, P recomputed from the forward's LSE ----
 * The same bits every run when the problem says `deterministic`; otherwise dQ may be
 * summed with atomics (the tuner's choice), its last bits varying from run to run. dK
 * and dV are always the same bits. The handle owns a workspace: launches on one
 * handle are ordered by their stream; use one handle per concurrent stream. */
typedef struct kjit_attention_backward_args {
  uint64_t q, k, v, o; /* the forward's inputs and output */
  uint64_t lse;        /* the forward's LSE (f32), required */
  uint64_t d_o;        /* the gradient of O */
  uint64_t dq, dk, dv; /* outputs, the problem's dtype, laid out like q, k, v */
  kjit_attention_strides q_strides, k_strides, v_strides, o_strides;
  kjit_attention_strides do_strides, dq_strides, dk_strides, dv_strides;
  const uint64_t* modifier_operands; /* as in kjit_attention_args */
  int modifier_operand_count;
} kjit_attention_backward_args;
typedef struct kjit_attention_backward kjit_attention_backward;
/* The problem as for kjit_attention_create; the config is the tuner's for its backward pass. */
kjit_status kjit_attention_backward_create(kjit_runtime* runtime,
                                           const kjit_attention_problem* problem,
                                           kjit_attention_backward** out);
void kjit_attention_backward_destroy(kjit_attention_backward* backward);
kjit_status kjit_attention_backward_launch(kjit_attention_backward* backward,
                                           const kjit_attention_backward_args* args, void* stream);
/* Its modifiers' operands, as kjit_attention_operands describes them. */
int kjit_attention_backward_operands(const kjit_attention_backward* backward);
const char* kjit_attention_backward_operand_name(const kjit_attention_backward* backward,
                                                 int index);
const char* kjit_attention_backward_operand_kind(const kjit_attention_backward* backward,
                                                 int index);
kjit_dtype kjit_attention_backward_operand_dtype(const kjit_attention_backward* backward,
                                                 int index);

/* ---- device memory, for programs without a CUDA setup of their own ---- */
/* Buffers on the runtime's device. Uploads and downloads are synchronous and
 * ordered after work launched on the default stream (stream NULL). */
typedef struct kjit_buffer kjit_buffer;
kjit_status kjit_buffer_create(kjit_runtime* runtime, size_t bytes, kjit_buffer** out);
void kjit_buffer_destroy(kjit_buffer* buffer);
uint64_t kjit_buffer_pointer(const kjit_buffer* buffer); /* for kjit_tensor.data */
kjit_status kjit_buffer_upload(kjit_buffer* buffer, const void* host, size_t bytes);
kjit_status kjit_buffer_download(const kjit_buffer* buffer, void* host, size_t bytes);

/* ---- without a GPU ---- */
/* The CUDA source of the attention kernel kjit would run for `problem` on `gpu`
 * ("h200", "h100", "a100"; NULL: GPU 0, else an H200). Free it with kjit_free. */
kjit_status kjit_attention_emit(const kjit_attention_problem* problem, const char* gpu,
                                char** source);
/* The CUDA source kjit generates for an expression over `n` elements (a 1-D
 * problem; fresh 16-byte-aligned buffers), with the tuner's config for `gpu`
 * ("h200", "h100", "a100"; NULL: GPU 0, else an H200). *source: kjit_free() it. */
kjit_status kjit_emit(const char* expression, kjit_dtype default_dtype, int64_t n, const char* gpu,
                      char** source);
/* NVRTC-compiles the same for `arch` ("sm_90"): the kernel's registers and spill
 * bytes. */
kjit_status kjit_compile(const char* expression, kjit_dtype default_dtype, int64_t n,
                         const char* arch, int* registers, int* spill_bytes);

#ifdef __cplusplus
}
#endif

#endif /* KJIT_KJIT_C_H */
