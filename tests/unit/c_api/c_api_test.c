/* The C API from C: what works without a GPU (version, emit, compile, errors, the
 * log callback), and the runtime's error when there is no GPU. Exit status 0 when
 * every check passes; each failed check prints a line. */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kjit/kjit_c.h"

static int failures = 0;
#define CHECK(cond)                                                   \
  do {                                                                \
    if (!(cond)) {                                                    \
      fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                     \
    }                                                                 \
  } while (0)

static int lines = 0;
static void count_lines(const char* line, void* user) {
  (void)line;
  ++*(int*)user;
}

/* A log callback that calls kjit the first time it runs. */
static int reentered = 0;
static void emit_from_callback(const char* line, void* user) {
  char* text = NULL;
  (void)line;
  ++*(int*)user;
  if (reentered++ == 0 && kjit_emit("y = x * 2", KJIT_F32, 64, "h200", &text) == KJIT_OK)
    kjit_free(text);
}

/* `kjit_c_api_test reentrant`, with KJIT_CACHE_DIR naming a file: the store's
 * warning ("disabled: ... is not a directory") reaches a callback that calls kjit,
 * which opens a store that warns again. The store held its warning lock while the
 * callback ran, and this hung (ctest's timeout fails it). */
static int reentrant(void) {
  int calls = 0;
  char* source = NULL;
  kjit_set_log_callback(emit_from_callback, &calls);
  CHECK(kjit_emit("y = x + 1", KJIT_F32, 64, "h200", &source) == KJIT_OK);
  kjit_free(source);
  CHECK(calls > 0);
  CHECK(reentered > 0);
  kjit_set_log_callback(NULL, NULL);
  if (failures == 0) printf("reentrant log callback: passed\n");
  return failures == 0 ? 0 : 1;
}

/* `kjit_c_api_test reentrant-launch` (a GPU; exit 77 without one): a log callback
 * launches another kernel while the first launch of y = x * 2 compiles (and logs).
 * kjit_elementwise_launch_flat kept its argument lists per thread, and the callback's
 * call overwrote them: the outer launch ran with the inner call's tensors. */
enum { kCount = 4096 };
static kjit_elementwise* inner_kernel = NULL;
static uint64_t inner_pointers[3];
static int inner_launches = 0;
static void launch_from_callback(const char* line, void* user) {
  (void)line;
  (void)user;
  if (inner_launches == 0 && ++inner_launches == 1)
    CHECK(kjit_elementwise_launch_flat(inner_kernel, inner_pointers, 3, kCount, NULL) == KJIT_OK);
}

static int reentrant_launch(void) {
  kjit_runtime* runtime = NULL;
  if (kjit_runtime_create(0, &runtime) != KJIT_OK) {
    printf("skipped: no GPU (%s)\n", kjit_last_error());
    return 77;
  }
  static float x[kCount], y[kCount], a[kCount], c[kCount];
  for (int i = 0; i < kCount; ++i) {
    x[i] = (float)i;
    a[i] = 1.0f;
  }
  kjit_buffer *bx = NULL, *by = NULL, *ba = NULL, *bb = NULL, *bc = NULL;
  CHECK(kjit_buffer_create(runtime, sizeof x, &bx) == KJIT_OK);
  CHECK(kjit_buffer_create(runtime, sizeof y, &by) == KJIT_OK);
  CHECK(kjit_buffer_create(runtime, sizeof a, &ba) == KJIT_OK);
  CHECK(kjit_buffer_create(runtime, sizeof a, &bb) == KJIT_OK);
  CHECK(kjit_buffer_create(runtime, sizeof c, &bc) == KJIT_OK);
  CHECK(kjit_buffer_upload(bx, x, sizeof x) == KJIT_OK);
  CHECK(kjit_buffer_upload(ba, a, sizeof a) == KJIT_OK);
  CHECK(kjit_buffer_upload(bb, a, sizeof a) == KJIT_OK);
  inner_pointers[0] = kjit_buffer_pointer(ba);
  inner_pointers[1] = kjit_buffer_pointer(bb);
  inner_pointers[2] = kjit_buffer_pointer(bc);
  kjit_elementwise* outer = NULL;
  CHECK(kjit_elementwise_create(runtime, "y = x * 2", KJIT_F32, &outer) == KJIT_OK);
  CHECK(kjit_elementwise_create(runtime, "z = a + b", KJIT_F32, &inner_kernel) == KJIT_OK);
  kjit_set_log_topics("config");
  kjit_set_log_callback(launch_from_callback, NULL);
  const uint64_t outer_pointers[2] = {kjit_buffer_pointer(bx), kjit_buffer_pointer(by)};
  CHECK(kjit_elementwise_launch_flat(outer, outer_pointers, 2, kCount, NULL) == KJIT_OK);
  kjit_set_log_callback(NULL, NULL);
  kjit_set_log_topics(NULL);
  CHECK(inner_launches == 1);
  CHECK(kjit_buffer_download(by, y, sizeof y) == KJIT_OK);
  CHECK(kjit_buffer_download(bc, c, sizeof c) == KJIT_OK);
  int wrong = 0;
  for (int i = 0; i < kCount; ++i) wrong += y[i] != 2.0f * x[i] || c[i] != 2.0f;
  CHECK(wrong == 0);
  kjit_elementwise_destroy(outer);
  kjit_elementwise_destroy(inner_kernel);
  kjit_buffer_destroy(bx);
  kjit_buffer_destroy(by);
  kjit_buffer_destroy(ba);
  kjit_buffer_destroy(bb);
  kjit_buffer_destroy(bc);
  kjit_runtime_destroy(runtime);
  if (failures == 0) printf("a launch from the log callback inside a launch: passed\n");
  return failures == 0 ? 0 : 1;
}

/* Causal grouped-query attention (8 query heads over 2 K/V heads), 2 x 1000, d 128. */
static kjit_attention_problem causal_gqa_problem(void) {
  kjit_attention_problem attention;
  memset(&attention, 0, sizeof attention);
  attention.batch = 2;
  attention.heads = 8;
  attention.kv_heads = 2;
  attention.seq_q = 1000;
  attention.head_dim = 128;
  attention.dtype = KJIT_BF16;
  attention.causal = 1;
  return attention;
}

/* kjit_attention_emit gives the kernel kjit would run: the store's tuning where
 * there is one (it gave the model's default whatever the store held). The
 * chooser's log line names the problem's signature and the GPU model; a tuning
 * of them is written into the store (KJIT_CACHE_DIR) with SQLite, and the next
 * emit must use its config. */
static char choice_line[4096];
static void keep_choice(const char* line, void* user) {
  (void)user;
  if (strstr(line, "attention batch=") != NULL)
    snprintf(choice_line, sizeof choice_line, "%s", line);
}
static int emit_uses_the_store(void) {
  const char* dir = getenv("KJIT_CACHE_DIR");
  CHECK(dir != NULL);
  if (dir == NULL) return 1;
  kjit_attention_problem attention = causal_gqa_problem();
  kjit_set_log_topics("config");
  kjit_set_log_callback(keep_choice, NULL);
  char* source = NULL;
  CHECK(kjit_attention_emit(&attention, "h200", &source) == KJIT_OK);
  kjit_free(source);
  kjit_set_log_callback(NULL, NULL);
  /* "... attention SIGNATURE on GPU MODEL: CONFIG (model; ...)" */
  const char* problem = strstr(choice_line, "attention batch=");
  CHECK(problem != NULL);
  if (problem == NULL) return 1;
  problem += strlen("attention ");
  const char* on = strstr(problem, " on ");
  const char* colon = on ? strstr(on, ": ") : NULL;
  CHECK(on != NULL && colon != NULL);
  if (on == NULL || colon == NULL) return 1;
  char signature[1024], model[256], path[4096];
  snprintf(signature, sizeof signature, "%.*s", (int)(on - problem), problem);
  snprintf(model, sizeof model, "%.*s", (int)(colon - on - 4), on + 4);
  snprintf(path, sizeof path, "%s/kjit.db", dir);
  const char* tuned = "mma=wgmma,bm=128,bn=64,stages=2";
  sqlite3* db = NULL;
  sqlite3_stmt* insert = NULL;
  CHECK(sqlite3_open(path, &db) == SQLITE_OK);
  CHECK(sqlite3_prepare_v2(db,
                           "INSERT INTO tunings (gpu_model, problem, config, median_ms, spread, "
                           "runs, tuner_version, created) VALUES (?1, ?2, ?3, 0.5, 0.01, 25, "
                           "'test', strftime('%s', 'now'))",
                           -1, &insert, NULL) == SQLITE_OK);
  sqlite3_bind_text(insert, 1, model, -1, SQLITE_STATIC);
  sqlite3_bind_text(insert, 2, signature, -1, SQLITE_STATIC);
  sqlite3_bind_text(insert, 3, tuned, -1, SQLITE_STATIC);
  CHECK(sqlite3_step(insert) == SQLITE_DONE);
  sqlite3_finalize(insert);
  sqlite3_close(db);
  CHECK(kjit_attention_emit(&attention, "h200", &source) == KJIT_OK);
  CHECK(source != NULL &&
        strstr(source, "// config:    mma=wgmma,bm=128,bn=64,stages=2\n") != NULL);
  if (failures) fprintf(stderr, "chose: %s\n", choice_line);
  kjit_free(source);
  return failures ? 1 : 0;
}

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "reentrant") == 0) return reentrant();
  if (argc > 1 && strcmp(argv[1], "reentrant-launch") == 0) return reentrant_launch();
  if (argc > 1 && strcmp(argv[1], "emit-uses-the-store") == 0) return emit_uses_the_store();
  CHECK(strstr(kjit_version(), "kjit-gen-") != NULL);

  char* source = NULL;
  CHECK(kjit_emit("y = x * sigmoid(x) * g", KJIT_BF16, 1 << 20, "h200", &source) == KJIT_OK);
  CHECK(source != NULL && strstr(source, "__global__") != NULL);
  CHECK(strcmp(kjit_last_error(), "") == 0);
  kjit_free(source);

  /* An expression of fixed shapes: n sizes nothing (it was refused as a size that
   * names no dim of the expression, which a C caller cannot leave out). */
  CHECK(kjit_emit("x:f32[1024]; y = x * 2", KJIT_F32, 1024, "h200", &source) == KJIT_OK);
  kjit_free(source);

  int registers = 0, spills = -1;
  CHECK(kjit_compile("y = sin(x)^2 + cos(x)^2", KJIT_F32, 1 << 20, "sm_90", &registers, &spills) ==
        KJIT_OK);
  CHECK(registers > 0);
  CHECK(spills == 0);

  /* Bad input: a status and a message that says what is wrong. */
  source = (char*)&registers; /* a failed call sets it to NULL (left as it was before) */
  CHECK(kjit_emit("y = sinn(x)", KJIT_F32, 1024, NULL, &source) == KJIT_ERROR_USER);
  CHECK(strstr(kjit_last_error(), "sin") != NULL);
  CHECK(source == NULL);
  CHECK(kjit_compile("y = x", KJIT_F32, 1024, "sm_42", NULL, NULL) == KJIT_ERROR_USER);
  registers = spills = 7; /* a failed compile reports 0 and 0 (left as they were before) */
  CHECK(kjit_compile("y = sinn(x)", KJIT_F32, 1024, "sm_90", &registers, &spills) ==
        KJIT_ERROR_USER);
  CHECK(registers == 0 && spills == 0);
  CHECK(kjit_emit(NULL, KJIT_F32, 1024, NULL, &source) == KJIT_ERROR_USER);

  /* Handles that were never created: errors or neutral answers, never crashes. */
  kjit_buffer* buffer = NULL;
  CHECK(kjit_buffer_create(NULL, 16, &buffer) == KJIT_ERROR_USER);
  CHECK(strstr(kjit_last_error(), "kjit_buffer_create") != NULL);
  CHECK(buffer == NULL && kjit_buffer_pointer(NULL) == 0);
  CHECK(kjit_buffer_upload(NULL, "x", 1) == KJIT_ERROR_USER);
  kjit_buffer_destroy(NULL);
  uint64_t pointers[2] = {0, 0};
  CHECK(kjit_elementwise_launch_flat(NULL, pointers, 2, 16, NULL) == KJIT_ERROR_USER);
  CHECK(strstr(kjit_last_error(), "kjit_elementwise_launch_flat") != NULL);
  CHECK(kjit_matmul_operands(NULL) == 0);
  CHECK(kjit_matmul_operand_name(NULL, 0) == NULL);
  CHECK(kjit_matmul_operand_kind(NULL, 0) == NULL);
  CHECK(kjit_matmul_operand_dtype(NULL, 0) == KJIT_F32);
  CHECK(kjit_attention_operands(NULL) == 0 && kjit_attention_operand_name(NULL, 0) == NULL);
  CHECK(kjit_attention_operand_kind(NULL, 0) == NULL);
  CHECK(kjit_attention_operand_dtype(NULL, 0) == KJIT_F32);
  CHECK(kjit_attention_backward_operands(NULL) == 0);
  CHECK(kjit_attention_backward_operand_name(NULL, 0) == NULL);
  CHECK(kjit_attention_backward_operand_kind(NULL, 0) == NULL);
  CHECK(kjit_attention_backward_operand_dtype(NULL, 0) == KJIT_F32);

  /* Attention: the kernel for a problem, without a GPU; bad problems are user errors. */
  kjit_attention_problem attention = causal_gqa_problem();
  CHECK(kjit_attention_emit(&attention, "h200", &source) == KJIT_OK);
  CHECK(source != NULL && strstr(source, "FlashForwardSm90") != NULL);
  kjit_free(source);
  CHECK(kjit_attention_emit(&attention, "a100", &source) == KJIT_OK);
  CHECK(source != NULL && strstr(source, "FlashForward<") != NULL);
  kjit_free(source);
  /* Score and mask modifiers in the IR: fused, with the skip of masked tiles. */
  attention.score_mod = "slope:f32[heads]; s - slope * abs(q_idx - kv_idx)";
  attention.mask_mod = "(kv_idx <= q_idx) * (q_idx - kv_idx < 256)";
  CHECK(kjit_attention_emit(&attention, "h200", &source) == KJIT_OK);
  CHECK(source != NULL && strstr(source, "kjit_modifiers>") != NULL);
  CHECK(strstr(source, "int kjit_mask_tile(") != NULL);
  kjit_free(source);
  attention.mask_mod = "kv_idx <= s";
  CHECK(kjit_attention_emit(&attention, "h200", &source) == KJIT_ERROR_USER);
  CHECK(strstr(kjit_last_error(), "reads s") != NULL);
  attention.score_mod = NULL;
  attention.mask_mod = NULL;
  int64_t lengths[3] = {1, 7, 300};
  attention.seqlens_q = lengths;
  attention.sequences = 3;
  attention.windowed = 1;
  attention.window_left = 64;
  attention.window_right = 0;
  CHECK(kjit_attention_emit(&attention, "h200", &source) == KJIT_OK);
  kjit_free(source);
  /* With seqlens_q, batch, seq_q and seq_k are ignored (kjit_c.h): even negative. */
  attention.batch = -1;
  attention.seq_q = -3;
  CHECK(kjit_attention_emit(&attention, "h200", &source) == KJIT_OK);
  kjit_free(source);
  attention.batch = 2;
  attention.seq_q = 1000;
  attention.dtype = (kjit_dtype)9;
  CHECK(kjit_attention_emit(&attention, "h200", &source) == KJIT_ERROR_USER);
  CHECK(strstr(kjit_last_error(), "attention dtype is 9") != NULL);
  attention.dtype = KJIT_BF16;
  attention.head_dim = 80;
  CHECK(kjit_attention_emit(&attention, "h200", &source) == KJIT_ERROR_USER);
  CHECK(strstr(kjit_last_error(), "head dim 80") != NULL);
  CHECK(source == NULL);
  attention.head_dim = 64;
  attention.kv_heads = 3;
  CHECK(kjit_attention_emit(&attention, "h200", &source) == KJIT_ERROR_USER);
  CHECK(strstr(kjit_last_error(), "does not divide") != NULL);
  attention.kv_heads = 2;
  lengths[1] = 0;
  CHECK(kjit_attention_emit(&attention, "h200", &source) == KJIT_ERROR_USER);
  CHECK(kjit_attention_emit(NULL, "h200", &source) == KJIT_ERROR_USER);
  /* A negative size is an error, not the default that 0 stands for. */
  lengths[1] = 7;
  attention.seqlens_q = NULL;
  attention.sequences = 0;
  attention.seq_q = 128;
  CHECK(kjit_attention_emit(&attention, "h200", &source) == KJIT_OK);
  kjit_free(source);
  attention.batch = -2;
  CHECK(kjit_attention_emit(&attention, "h200", &source) == KJIT_ERROR_USER);
  CHECK(strstr(kjit_last_error(), "batch is -2") != NULL);
  attention.batch = 0;
  attention.seq_k = -1;
  CHECK(kjit_attention_emit(&attention, "h200", &source) == KJIT_ERROR_USER);
  CHECK(strstr(kjit_last_error(), "seq_k is -1") != NULL);
  attention.seq_k = 0;
  /* Lengths without seqlens_q: an error, not a padded batch. */
  attention.sequences = 3;
  CHECK(kjit_attention_emit(&attention, "h200", &source) == KJIT_ERROR_USER);
  CHECK(strstr(kjit_last_error(), "seqlens_q is NULL") != NULL);
  attention.sequences = 0;
  attention.seqlens_k = lengths;
  CHECK(kjit_attention_emit(&attention, "h200", &source) == KJIT_ERROR_USER);
  attention.seqlens_k = NULL;
  /* An expression over no elements. */
  CHECK(kjit_emit("y = x", KJIT_F32, 0, "h200", &source) == KJIT_ERROR_USER);
  CHECK(strstr(kjit_last_error(), "n is 0") != NULL);
  kjit_attention* attention_kernel = NULL;
  CHECK(kjit_attention_create(NULL, &attention, &attention_kernel) == KJIT_ERROR_USER);
  /* A failed create sets its handle to NULL (it was left as it was: a cleanup path
   * that destroyed it freed garbage). */
  kjit_attention_backward* backward_kernel = (kjit_attention_backward*)&failures;
  CHECK(kjit_attention_backward_create(NULL, &attention, &backward_kernel) == KJIT_ERROR_USER);
  CHECK(backward_kernel == NULL);
  CHECK(kjit_attention_backward_launch(NULL, NULL, NULL) == KJIT_ERROR_USER);
  kjit_attention_backward_destroy(NULL); /* like free(NULL) */
  CHECK(attention_kernel == NULL);
  CHECK(kjit_attention_launch(NULL, NULL, NULL) == KJIT_ERROR_USER);
  kjit_attention_destroy(NULL);

  /* The log callback receives the enabled topics' lines; "none" silences them. */
  kjit_set_log_callback(count_lines, &lines);
  kjit_set_log_topics("config");
  CHECK(kjit_emit("y = x + 1", KJIT_F32, 4096, "h200", &source) == KJIT_OK);
  kjit_free(source);
  CHECK(lines > 0);
  int seen = lines;
  kjit_set_log_topics("none");
  CHECK(kjit_emit("y = x + 2", KJIT_F32, 4096, "h200", &source) == KJIT_OK);
  kjit_free(source);
  CHECK(lines == seen);
  kjit_set_log_topics(NULL);
  kjit_set_log_callback(NULL, NULL);

  /* Without a GPU the runtime reports why instead of crashing. */
  kjit_runtime* runtime = (kjit_runtime*)&failures;
  kjit_status status = kjit_runtime_create(0, &runtime);
  if (getenv("KJIT_LIBCUDA") != NULL) { /* ctest points it at a missing driver */
    CHECK(status == KJIT_ERROR_CUDA || status == KJIT_ERROR_USER);
    CHECK(strlen(kjit_last_error()) > 0);
    CHECK(runtime == NULL);
  }
  kjit_runtime_destroy(runtime);
  if (failures == 0) printf("all C API checks passed\n");
  return failures == 0 ? 0 : 1;
}
