// cluster_occupancy.cu — how many thread-block clusters of each size run at once
// (cudaOccupancyMaxActiveClusters), for blocks of the matmul's sizes. A cluster's
// blocks share one GPC, so a GPC holds whole clusters only; the answer depends on
// how many SMs each GPC has, which no datasheet gives. The split-K through
// clusters (templates/matmul_sm90.cuh, finish_split_in_cluster) needs every cluster
// of the grid at once to beat the workspace way; the tuner's model estimates it.
//
//   bash tools/device/experiments/run.sh cluster_occupancy
#include <cuda_runtime.h>

#include <cstdio>

__global__ void kernel_with_shared(float* out) {
  extern __shared__ float shared[];
  shared[threadIdx.x] = threadIdx.x;
  __syncthreads();
  if (out) out[blockIdx.x] = shared[(threadIdx.x + 1) % blockDim.x];
}

int main() {
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  std::printf("%s: %d SMs\n", prop.name, prop.multiProcessorCount);
  cudaFuncSetAttribute(kernel_with_shared, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       prop.sharedMemPerBlockOptin);
  const int threads[] = {256, 384, 512, 640};
  const int shared_kib[] = {64, 96, 124, 200};
  std::printf("threads  shared KiB  blocks/SM | clusters at once (blocks) for sizes 1..8\n");
  for (int t : threads)
    for (int kib : shared_kib) {
      int per_sm = 0;
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel_with_shared, t, kib * 1024);
      std::printf("%7d  %10d  %9d |", t, kib, per_sm);
      for (int size = 1; size <= 8; ++size) {
        cudaLaunchConfig_t config = {};
        config.gridDim = dim3(size, 1, 1);
        config.blockDim = dim3(t, 1, 1);
        config.dynamicSmemBytes = kib * 1024;
        cudaLaunchAttribute attribute;
        attribute.id = cudaLaunchAttributeClusterDimension;
        attribute.val.clusterDim.x = size;
        attribute.val.clusterDim.y = 1;
        attribute.val.clusterDim.z = 1;
        config.attrs = &attribute;
        config.numAttrs = 1;
        int clusters = -1;
        const cudaError_t e =
            cudaOccupancyMaxActiveClusters(&clusters, kernel_with_shared, &config);
        if (e != cudaSuccess)
          std::printf(" %s", cudaGetErrorName(e));
        else
          std::printf(" %3d (%3d)", clusters, clusters * size);
      }
      std::printf("\n");
    }
  return 0;
}
