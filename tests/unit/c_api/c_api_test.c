/* The C API from C: what works without a GPU (version, emit, compile, errors, the
 * log callback), and the runtime's error when there is no GPU. Exit status 0 when
 * every check passes; each failed check prints a line. */
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

int main(void) {
  CHECK(strstr(kjit_version(), "kjit-gen-") != NULL);

  char* source = NULL;
  CHECK(kjit_emit("y = x * sigmoid(x) * g", KJIT_BF16, 1 << 20, "h200", &source) == KJIT_OK);
  CHECK(source != NULL && strstr(source, "__global__") != NULL);
  CHECK(strcmp(kjit_last_error(), "") == 0);
  kjit_free(source);

  int registers = 0, spills = -1;
  CHECK(kjit_compile("y = sin(x)^2 + cos(x)^2", KJIT_F32, 1 << 20, "sm_90", &registers, &spills) ==
        KJIT_OK);
  CHECK(registers > 0);
  CHECK(spills == 0);

  /* Bad input: a status and a message that says what is wrong. */
  source = NULL;
  CHECK(kjit_emit("y = sinn(x)", KJIT_F32, 1024, NULL, &source) == KJIT_ERROR_USER);
  CHECK(strstr(kjit_last_error(), "sin") != NULL);
  CHECK(source == NULL);
  CHECK(kjit_compile("y = x", KJIT_F32, 1024, "sm_42", NULL, NULL) == KJIT_ERROR_USER);
  CHECK(kjit_emit(NULL, KJIT_F32, 1024, NULL, &source) == KJIT_ERROR_USER);

  /* Handles that were never created: errors or neutral answers, never crashes. */
  kjit_buffer* buffer = NULL;
  CHECK(kjit_buffer_create(NULL, 16, &buffer) == KJIT_ERROR_USER);
  CHECK(strstr(kjit_last_error(), "kjit_buffer_create") != NULL);
  CHECK(buffer == NULL && kjit_buffer_pointer(NULL) == 0);
  CHECK(kjit_buffer_upload(NULL, "x", 1) == KJIT_ERROR_USER);
  kjit_buffer_destroy(NULL);
  CHECK(kjit_matmul_operands(NULL) == 0);
  CHECK(kjit_matmul_operand_name(NULL, 0) == NULL);
  CHECK(kjit_matmul_operand_kind(NULL, 0) == NULL);

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
  kjit_runtime* runtime = NULL;
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
