/* kjit from C: y = x * sigmoid(x) * g over 2^20 floats, checked on the host.
 * Build: cc elementwise.c $(pkg-config --cflags --libs kjit_c) -lm
 * Exit status 0 when the result matches; without a GPU it says why and exits 1. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kjit/kjit_c.h>

#define N (1 << 20)

static int fail(const char* what) {
  fprintf(stderr, "%s: %s\n", what, kjit_last_error());
  return 1;
}

int main(void) {
  kjit_runtime* runtime = NULL;
  if (kjit_runtime_create(0, &runtime) != KJIT_OK) return fail("no GPU");

  kjit_elementwise* kernel = NULL;
  if (kjit_elementwise_create(runtime, "y = x * sigmoid(x) * g", KJIT_F32, &kernel) != KJIT_OK)
    return fail("kjit_elementwise_create");

  float* x = malloc(N * sizeof(float));
  float* g = malloc(N * sizeof(float));
  float* y = malloc(N * sizeof(float));
  for (int i = 0; i < N; ++i) x[i] = sinf(0.001f * i), g[i] = cosf(0.002f * i);

  kjit_buffer *dx = NULL, *dg = NULL, *dy = NULL;
  int status = 1;
  if (kjit_buffer_create(runtime, N * sizeof(float), &dx) != KJIT_OK ||
      kjit_buffer_create(runtime, N * sizeof(float), &dg) != KJIT_OK ||
      kjit_buffer_create(runtime, N * sizeof(float), &dy) != KJIT_OK ||
      kjit_buffer_upload(dx, x, N * sizeof(float)) != KJIT_OK ||
      kjit_buffer_upload(dg, g, N * sizeof(float)) != KJIT_OK) {
    status = fail("device memory");
    goto done;
  }

  int64_t n = N;
  kjit_tensor inputs[2] = {{kjit_buffer_pointer(dx), KJIT_F32, 1, &n, NULL},
                           {kjit_buffer_pointer(dg), KJIT_F32, 1, &n, NULL}};
  kjit_tensor output = {kjit_buffer_pointer(dy), KJIT_F32, 1, &n, NULL};
  /* Asynchronous on the default stream; the download below waits for it. */
  if (kjit_elementwise_launch(kernel, inputs, 2, &output, 1, NULL) != KJIT_OK ||
      kjit_buffer_download(dy, y, N * sizeof(float)) != KJIT_OK) {
    status = fail("launch");
    goto done;
  }

  double worst = 0;
  for (int i = 0; i < N; ++i) {
    double want = x[i] / (1 + exp(-(double)x[i])) * g[i];
    if (fabs(y[i] - want) > worst) worst = fabs(y[i] - want);
  }
  printf("kjit from C: max |error| %.2e\n", worst);
  status = worst < 1e-5 ? 0 : 1;

  /* The same kernel through the flat entry: every tensor a contiguous vector of n
   * elements, so only the addresses (inputs, then outputs) and n are passed. */
  uint64_t pointers[3] = {kjit_buffer_pointer(dx), kjit_buffer_pointer(dg),
                          kjit_buffer_pointer(dy)};
  float* again = calloc(N, sizeof(float));
  if (again == NULL || kjit_buffer_upload(dy, again, N * sizeof(float)) != KJIT_OK ||
      kjit_elementwise_launch_flat(kernel, pointers, 3, n, NULL) != KJIT_OK ||
      kjit_buffer_download(dy, again, N * sizeof(float)) != KJIT_OK) {
    status = fail("launch_flat");
  } else if (memcmp(again, y, N * sizeof(float)) != 0) {
    status = fail("launch_flat gave other values");
  }
  free(again);

done:
  kjit_buffer_destroy(dx);
  kjit_buffer_destroy(dg);
  kjit_buffer_destroy(dy);
  kjit_elementwise_destroy(kernel);
  kjit_runtime_destroy(runtime);
  free(x);
  free(g);
  free(y);
  return status;
}
