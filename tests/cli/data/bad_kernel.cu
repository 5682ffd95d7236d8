// Line 3 uses a name that does not exist.
extern "C" __global__ void broken(float* x) {
  x[0] = undefined_name;
}
