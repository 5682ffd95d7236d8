// kjit/elementwise.cuh — vector loads and stores for generated elementwise kernels.
//
// A Vec<T, V> is V elements of storage type T moved as whole chunks of up to 16
// bytes: 4 floats, or 8 bf16 values, in one ld.global.v4.u32. The generated kernel
// loads whole Vecs, computes each element in f32 (or int/bool), and stores whole
// Vecs. The pointer must be aligned to the chunk size: the lowering only takes
// this path for the "aligned" class, which the launcher checks before launching.
#pragma once

#include "kjit/types.cuh"

namespace kjit {

// The unsigned type that moves `Bytes` bytes in one instruction.
template <int Bytes>
struct Chunk;
template <>
struct Chunk<16> {
  typedef uint4 type;
};
template <>
struct Chunk<8> {
  typedef uint2 type;
};
template <>
struct Chunk<4> {
  typedef unsigned int type;
};
template <>
struct Chunk<2> {
  typedef unsigned short type;
};
template <>
struct Chunk<1> {
  typedef unsigned char type;
};

template <typename T, int V>
struct Vec {
  static constexpr int kBytes = static_cast<int>(sizeof(T)) * V;
  static constexpr int kChunkBytes = kBytes >= 16 ? 16 : kBytes;
  static constexpr int kChunks = kBytes / kChunkBytes;
  static_assert((V & (V - 1)) == 0, "the vector width must be a power of two");
  static_assert(kBytes % kChunkBytes == 0, "a vector must be whole chunks of 16 bytes");
  typedef typename Chunk<kChunkBytes>::type chunk_type;
  union {
    chunk_type chunks[kChunks];
    T v[V];
  };
};

// V consecutive elements from p (aligned to min(16, V * sizeof(T)) bytes).
template <typename T, int V>
__device__ __forceinline__ Vec<T, V> load_vec(const T* p) {
  Vec<T, V> out;
  const typename Vec<T, V>::chunk_type* src =
      reinterpret_cast<const typename Vec<T, V>::chunk_type*>(p);
#pragma unroll
  for (int c = 0; c < Vec<T, V>::kChunks; ++c) out.chunks[c] = src[c];
  return out;
}

template <typename T, int V>
__device__ __forceinline__ void store_vec(T* p, const Vec<T, V>& in) {
  typename Vec<T, V>::chunk_type* dst = reinterpret_cast<typename Vec<T, V>::chunk_type*>(p);
#pragma unroll
  for (int c = 0; c < Vec<T, V>::kChunks; ++c) dst[c] = in.chunks[c];
}

// The same as a streaming store (st.global.cs: cache at L2 with evict-first
// priority): a large output that this kernel never reads back should not push the
// lines that are still to be read out of the L2 (config stream=1; see
// ElementwiseConfig::stream for what it measured).
template <typename T, int V>
__device__ __forceinline__ void store_vec_streaming(T* p, const Vec<T, V>& in) {
  typename Vec<T, V>::chunk_type* dst = reinterpret_cast<typename Vec<T, V>::chunk_type*>(p);
#pragma unroll
  for (int c = 0; c < Vec<T, V>::kChunks; ++c) __stcs(dst + c, in.chunks[c]);
}

}  // namespace kjit
