// kjit/matmul_sm90.cuh — the Hopper matmul: TMA copies, wgmma tensor cores.
//
// Same problem, arguments and epilogue as kjit/matmul.cuh; a different engine
// (needs sm_90a: compiled for "sm_90a", which the lowering asks for):
//
//   TMA         cp.async.bulk.tensor: one thread asks the copy engine for a whole
//               tile (up to 256 rows x 128 bytes); it lands in shared memory
//               already swizzled, zero-filled outside the matrix (so edge tiles
//               need no masks in the main loop), and signals an mbarrier with the
//               number of bytes it wrote.
//   wgmma       wgmma.mma_async: a warpgroup (4 warps) multiplies a 64 x BN x 16
//               step with both operands read straight from shared memory through
//               64-bit "matrix descriptors" (no ldmatrix, no fragment registers);
//               the accumulators stay in registers, BN / 2 floats per thread.
//   mbarrier    full[s]: the copy engine has filled stage s (tx-count of bytes);
//               empty[s]: every consumer warp is done reading stage s.
//
// Warp specialization. Warpgroup 0 is the producer: one thread walks the k-tiles
// and issues the copies of k-tile kt into stage kt % STAGES once empty[] says the
// stage is free. Warpgroups 1..BM/64 are consumers: each owns 64 rows of the tile,
// waits on full[], issues 4 wgmma (a k-tile is one 128-byte line of K per row: BK =
// 64 = 4 x k16 of bf16/f16, or 32 = 4 x k8 of tf32) and releases the stage of
// the previous k-tile once that k-tile's wgmma group has completed
// (wgmma.wait_group 1: one group stays in flight while the next k-tile starts).
//
// Shared memory of a stage: A then B, each in the canonical 128-byte-swizzle layout
// (PTX ISA "Shared Memory Matrix Layout"), 1024-byte aligned:
//   K-major operand (A "n", B "t"): [rows][BK] — 128-byte rows, 8-row atoms of
//     1024 bytes (SBO = 1024); a k step (k16, or k8 of tf32) starts 32 bytes
//     further along the row.
//   MN-major operand (A "t", B "n"): chunks of 64 rows (M or N), each [64 k][64]
//     — one 128-byte line per k (SBO = 1024 between 8-k groups, LBO = 64 * 128
//     bytes between chunks); a k16 step starts 16 lines = 2048 bytes further, and
//     wgmma reads it transposed (its tnsp flag, 16-bit types only).
// The swizzle (16-byte unit u of line r lands at u ^ (r % 8)) is applied by the
// copy engine on the way in and undone by wgmma on the way out: no bank conflicts.
//
// Three schedules. run(): one output tile per block (grid = tiles x splits x batch);
// the epilogue stages the fp32 accumulators through the (then idle) stages, and
// every warpgroup, the producer too, writes 16-byte chunks of C with
// kjit::matmul::write_chunk, like the mma.sync path. run_persistent(): a block per
// SM walks many tiles through one pipeline that never drains (see there).
// run_pingpong(): the same walk, with the two consumer warpgroups taking turns over
// whole tiles, one writing out while the other's wgmma run.
#pragma once

#include "kjit/matmul.cuh"
#include "kjit/sm90.cuh"

namespace kjit {

namespace sm90 {

// T: bf16, f16, or float (read as tf32); TC: output type; BM = 64 x consumer
// warpgroups; BN <= 256; A_K_MAJOR: A stored M x K (layout "n?"); B_K_MAJOR: B
// stored N x K ("?t"); tf32 operands must both be K-major (wgmma has no transpose
// for 32-bit types). Wgmma: the generated instruction wrapper for one 32-byte k
// step (m64nBNk16 of 16-bit types, m64nBNk8 of tf32),
//   static void run(float (&acc)[BN / 2], u64 desc_a, u64 desc_b).
// C_ALIGNED: C's rows are 16-byte aligned (the operands' alignment class, and for
// 16-bit outputs rows of N outputs a whole number of 16-byte chunks); it picks the
// persistent and ping-pong schedules' write-out (write_out).
//
// SWAP (config swap=ab, run() only): the kernel computes the product transposed,
// Cᵀ = Bᵀ Aᵀ. Its "A" is the caller's B (the runtime's map_a describes B), its "B"
// the caller's A (map_b, K-major), so the tile's BM rows walk the caller's N and its
// BN columns the caller's M. For a decode-like product (M = 16) that puts the 16 rows
// of A on wgmma's N side (m64n16: no tensor-core work on rows of zeros, and the
// stages hold B almost entirely) and the long N on its M side. The fp32 tile is
// staged transposed, so the write-out, split-K and the epilogue see the caller's
// rows and columns (OUT_ROWS x OUT_COLS below) and do not know about the swap.
template <typename T, typename TC, int BM, int BN, int STAGES, bool A_K_MAJOR, bool B_K_MAJOR,
          typename Wgmma, bool C_ALIGNED = true, bool SWAP = false>
struct WgmmaMatmul {
  static constexpr int BK = 128 / sizeof(T);  // one 128-byte swizzle line per row
  static constexpr int K_STEPS = 4;           // wgmma k steps of 32 bytes per k-tile
  static constexpr int CONSUMERS = BM / 64;
  static constexpr int THREADS = 128 * (CONSUMERS + 1);
  static constexpr int CONSUMER_THREADS = 128 * CONSUMERS;
  static constexpr int ACC = BN / 2;  // 64 x BN floats over 128 threads
  static constexpr int A_BYTES = BM * 128;
  static constexpr int B_BYTES = BN * 128;
  static constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
  // Registers per thread of the persistent schedule: the launch gives every thread
  // the same share (65536 / THREADS, in steps of 8); the producer warpgroup keeps 40
  // and hands the rest to the consumers, whose accumulators and write-out need them
  // (setmaxnreg; 128 x 40 + 256 x 232 <= 65536 with two consumers). With one
  // consumer the share is already 255.
  static constexpr int LAUNCH_REGISTERS = (65536 / THREADS) / 8 * 8 > 255
                                              ? 255
                                              : (65536 / THREADS) / 8 * 8;
  static constexpr int PRODUCER_REGISTERS = 40;
  static constexpr int CONSUMER_REGISTERS =
      (LAUNCH_REGISTERS + 128 * (LAUNCH_REGISTERS - PRODUCER_REGISTERS) / CONSUMER_THREADS) / 8 * 8;
  static constexpr int CHUNK_BYTES = 64 * 128;  // one 64-row chunk of an MN-major operand
  // How wgmma's descriptors move over an operand's stage: a k step is 32 bytes along
  // a K-major line (16 bf16/f16 or 8 tf32 values) or 16 lines (16 k) of an MN-major
  // chunk; 64 rows are 64 K-major lines or one MN-major chunk, 8 KiB either way.
  static constexpr int A_STEP_BYTES = A_K_MAJOR ? 32 : 2048;
  static constexpr int B_STEP_BYTES = B_K_MAJOR ? 32 : 2048;
  static constexpr int GROUP_BYTES = 64 * 128;
  static constexpr int STAGED_STRIDE = BN + 8;  // floats per staged row (bank spread)
  static constexpr int VEC = matmul::Chunk<TC>::VEC;
  static constexpr int CHUNKS_PER_ROW = BN / VEC;
  // The staged fp32 tile of run(), in the caller's orientation: BM x BN, or BN x BM
  // with SWAP (rows BM + 4 floats apart: the transposed staging's stores of a warp
  // then fall in 32 different banks, stage_accumulators).
  static constexpr int OUT_ROWS = SWAP ? BN : BM;
  static constexpr int OUT_COLS = SWAP ? BM : BN;
  static constexpr int OUT_STRIDE = SWAP ? BM + 4 : STAGED_STRIDE;
  static constexpr int OUT_CHUNKS = OUT_COLS / VEC;
  static_assert(sizeof(T) == 2 || (A_K_MAJOR && B_K_MAJOR),
                "wgmma reads 32-bit (tf32) operands K-major only");
  static_assert(BM % 64 == 0 && BM >= 64 && BM <= 256, "BM is 64 x consumer warpgroups");
  static_assert(SWAP || (BN % 64 == 0 && BN >= 64 && BN <= 256), "BN is 64, 128, 192 or 256");
  static_assert(!SWAP || (BN % 16 == 0 && BN >= 16 && BN <= 256 && B_K_MAJOR && sizeof(T) == 2),
                "swapped, BN (the caller's M side) is 16 to 256 in steps of 16, read K-major");

  // Dynamic shared memory: 1 KiB of alignment slack, the stages, then 2 x STAGES
  // mbarriers (8 bytes each).
  static constexpr int SHARED_BYTES = 1024 + STAGES * STAGE_BYTES + 2 * STAGES * 8;
  // The persistent schedule's write-out slabs, one per consumer warp: 16 rows of one
  // 128-byte line each (64 bf16/f16 or 32 f32 outputs, or 32 fp32 accumulators where
  // C is misaligned: write_out), chunks swizzled (slab_offset) so that the 8 rows a
  // warp's pair stores touch fall in different banks.
  static constexpr int SLAB_COLUMNS = 128 / static_cast<int>(sizeof(TC));
  static constexpr int SLAB_F32_COLUMNS = 32;
  static constexpr int SLAB_ROW_BYTES = 128;
  static constexpr int SLAB_BYTES = 16 * SLAB_ROW_BYTES;
  static constexpr int PERSISTENT_SHARED_BYTES = SHARED_BYTES + 4 * CONSUMERS * SLAB_BYTES;
  // Whole tiles of a misaligned problem's 16-bit C go out through plain bulk stores
  // from shifted rows where C's rows are off 16 bytes (write_out_shifted).
  static constexpr bool SHIFTED_WRITE_OUT = !C_ALIGNED && sizeof(TC) == 2;
  // The ping-pong schedule (run_pingpong): two consumer warpgroups, each owning whole
  // BM x BN tiles, ROWS row groups of 64 (ROWS x BN / 2 accumulators per thread);
  // two more mbarriers (whose turn it is) before the eight warps' slabs.
  static constexpr int ROWS = BM / 64;
  static constexpr int PINGPONG_THREADS = 384;
  static constexpr int PINGPONG_SHARED_BYTES = SHARED_BYTES + 2 * 8 + 8 * SLAB_BYTES;
  static constexpr int PINGPONG_LAUNCH_REGISTERS = (65536 / PINGPONG_THREADS) / 8 * 8;  // 168
  static constexpr int PINGPONG_CONSUMER_REGISTERS =  // 232: 128 x 40 + 256 x 232 <= 65536
      (PINGPONG_LAUNCH_REGISTERS +
       128 * (PINGPONG_LAUNCH_REGISTERS - PRODUCER_REGISTERS) / (PINGPONG_THREADS - 128)) /
      8 * 8;

  // The producer: one thread issues every copy of this tile's k-tiles. `first` counts
  // the k-tiles this block has loaded before (a persistent block walks several tiles
  // through one pipeline): k-tile kt of this tile uses stage (first + kt) % STAGES,
  // in round (first + kt) / STAGES, whose parity the barriers track.
  __device__ __forceinline__ static void produce(const TensorMap& map_a, const TensorMap& map_b,
                                                 u32 stages, u32 full, u32 empty, int m0, int n0,
                                                 int batch, int k_begin, int k_tiles,
                                                 int first = 0) {
    for (int kt = 0; kt < k_tiles; ++kt) {
      const int s = (first + kt) % STAGES;
      const u32 a = stages + s * STAGE_BYTES;
      const u32 b = a + A_BYTES;
      const int k0 = k_begin + kt * BK;
      barrier_wait(empty + 8 * s, (((first + kt) / STAGES) & 1) ^ 1);
      barrier_arrive_expect_bytes(full + 8 * s, STAGE_BYTES);
      if (A_K_MAJOR) {
        tma_load(a, map_a, full + 8 * s, k0, m0, batch);  // box: BK k x BM rows
      } else {
#pragma unroll
        for (int c = 0; c < BM / 64; ++c)  // box: 64 m x 64 k, per 64-row chunk
          tma_load(a + c * CHUNK_BYTES, map_a, full + 8 * s, m0 + 64 * c, k0, batch);
      }
      if (B_K_MAJOR) {
        tma_load(b, map_b, full + 8 * s, k0, n0, batch);  // box: BK k x BN rows
      } else {
#pragma unroll
        for (int c = 0; c < BN / 64; ++c)
          tma_load(b + c * CHUNK_BYTES, map_b, full + 8 * s, n0 + 64 * c, k0, batch);
      }
    }
  }

  // The descriptor of an operand's stage at `address` (K-major: 128-byte lines;
  // MN-major: 64-row chunks), built once a k-tile and moved by sm90::advance.
  template <bool K_MAJOR>
  __device__ __forceinline__ static unsigned long long stage_descriptor(u32 address) {
    return K_MAJOR ? descriptor(address, 16, 1024) : descriptor(address, CHUNK_BYTES, 1024);
  }

  // A consumer warpgroup: acc += its 64 rows of A times B over all k-tiles, from
  // stage (first + kt) % STAGES as the producer filled them. Every stage is released
  // once the wgmma group that read it has completed, the last one too (a persistent
  // block's producer is already filling stages for the next tile).
  __device__ __forceinline__ static void consume(float (&acc)[ACC], u32 stages, u32 full, u32 empty,
                                                 int k_tiles, int first = 0) {
    const bool warp_leader = threadIdx.x % 32 == 0;
    // This warpgroup's rows. With one or two consumers, read through a shuffle
    // (sm90::warpgroup_index), so that ptxas keeps the descriptors built from it in
    // uniform registers, where wgmma reads them (the 128x256 persistent main loop: 82
    // SASS instructions a k-tile, 8 of them R2UR, before; 57 and none after). Four
    // consumers have 96 registers a thread, and there the shuffled value spilled (8
    // bytes, the IR's gelu into a misaligned C): they keep threadIdx.x / 128.
    const int group =
        CONSUMERS > 2 ? static_cast<int>(threadIdx.x) / 128 - 1 : warpgroup_index() - 1;
    for (int kt = 0; kt < k_tiles; ++kt) {
      const int s = (first + kt) % STAGES;
      const u32 a = stages + s * STAGE_BYTES;
      const u32 b = a + A_BYTES;
      barrier_wait(full + 8 * s, ((first + kt) / STAGES) & 1);
      fence_accumulators(acc);
      wgmma_fence();
      // This warpgroup's 64 rows of A; each descriptor moved by one add a k step.
      const unsigned long long a_tile = stage_descriptor<A_K_MAJOR>(a + group * GROUP_BYTES);
      const unsigned long long b_tile = stage_descriptor<B_K_MAJOR>(b);
#pragma unroll
      for (int kk = 0; kk < K_STEPS; ++kk)
        Wgmma::run(acc, advance(a_tile, kk * A_STEP_BYTES), advance(b_tile, kk * B_STEP_BYTES));
      wgmma_commit();
      fence_accumulators(acc);
      // k-tile kt - 1's group is complete: its stage may be refilled.
      wgmma_wait<1>();
      if (kt > 0 && warp_leader) barrier_arrive(empty + 8 * ((first + kt - 1) % STAGES));
    }
    wgmma_wait<0>();
    fence_accumulators(acc);
    if (k_tiles > 0 && warp_leader) barrier_arrive(empty + 8 * ((first + k_tiles - 1) % STAGES));
  }

  // The tile goes out in two steps. The consumers stage their accumulators as fp32
  // rows (the wgmma accumulator layout: warp w of a group holds rows 16w + lane/4
  // and + 8, columns 8j + 2(lane%4) and + 1 in acc[4j .. 4j+3]) in the idle stages;
  // then all THREADS, the producer warpgroup too, walk the staged rows and write
  // 16-byte chunks of C (alpha, beta * C0 and the epilogue function per output).
  // With SWAP the tile's row r is the caller's column: output (r, c) is staged at
  // [c][r], one float at a time (a warp's 32 stores of one register then cover rows
  // r .. r + 7 of columns 2(lane%4): 8 floats in each of 4 staged rows whose starts
  // are 2 (BM + 4) floats, 8 banks, apart: 32 different banks).
  __device__ __forceinline__ static void stage_accumulators(float* staged, const float (&acc)[ACC],
                                                            int group) {
    const int warp = (static_cast<int>(threadIdx.x) / 32) % 4;
    const int lane = static_cast<int>(threadIdx.x) % 32;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = group * 64 + warp * 16 + lane / 4 + 8 * half;
        const int col = j * 8 + 2 * (lane % 4);
        if constexpr (SWAP) {
          staged[col * OUT_STRIDE + row] = acc[4 * j + 2 * half];
          staged[(col + 1) * OUT_STRIDE + row] = acc[4 * j + 2 * half + 1];
        } else {
          matmul::Pair<float>::store(staged + row * STAGED_STRIDE + col, acc[4 * j + 2 * half],
                                     acc[4 * j + 2 * half + 1]);
        }
      }
  }

  template <typename Epilogue>
  __device__ __forceinline__ static void write_tile(const MatmulArgs& args,
                                                    const EpilogueOperands& ops,
                                                    const float* staged, int tile_m, int tile_n,
                                                    int batch, int split) {
    // Each thread keeps one chunk of columns and walks down the rows, so the
    // epilogue's per-column operands (a bias) are read once per tile, not once per
    // row. ROW_STEP rows per pass; with OUT_COLS = 192 the last THREADS % OUT_CHUNKS
    // threads sit this out. (tile_m, tile_n: the caller's tile, OUT_ROWS x OUT_COLS.)
    constexpr int ROW_STEP = THREADS / OUT_CHUNKS;
    if (static_cast<int>(threadIdx.x) >= ROW_STEP * OUT_CHUNKS) return;
    const int chunk = static_cast<int>(threadIdx.x) % OUT_CHUNKS;
    const int col = tile_n * OUT_COLS + chunk * VEC;
    if (col >= args.n) return;
    const int valid = min(args.n - col, VEC);
    float columns[Epilogue::kColumnSlots][VEC];
    if (args.splits == 1) Epilogue::template load_columns<VEC>(columns, batch, col, valid, ops);
#pragma unroll 1
    for (int staged_row = static_cast<int>(threadIdx.x) / OUT_CHUNKS; staged_row < OUT_ROWS;
         staged_row += ROW_STEP) {
      const int row = tile_m * OUT_ROWS + staged_row;
      if (row >= args.m) break;
      float v[VEC];
      matmul::read_staged<VEC>(staged + staged_row * OUT_STRIDE + chunk * VEC, chunk, v);
      matmul::write_chunk<TC, Epilogue>(args, ops, batch, split, row, col, valid, v, columns);
    }
  }

  // The kernel body: grid = (tiles_m * tiles_n, splits, batch), THREADS threads.
  template <typename Epilogue>
  __device__ __forceinline__ static void run(const MatmulArgs& args, const EpilogueOperands& ops,
                                             const TensorMap& map_a, const TensorMap& map_b) {
    static_assert(OUT_ROWS * OUT_STRIDE * 4 <= STAGES * STAGE_BYTES,
                  "the epilogue stages the tile through the pipeline's buffers");
    extern __shared__ __align__(1024) unsigned char kjit_wgmma_shared[];
    // The swizzle pattern repeats every 1024 bytes: stages start on such a boundary.
    const u32 base = mma::shared_address(kjit_wgmma_shared);
    const u32 stages = (base + 1023) & ~1023u;
    float* staged = reinterpret_cast<float*>(kjit_wgmma_shared + (stages - base));
    const u32 full = stages + STAGES * STAGE_BYTES;
    const u32 empty = full + 8 * STAGES;

    // w: the kernel's tile (swapped: rows along N, columns along M); out: the same
    // tile as the caller's rows and columns, for the write-out.
    const matmul::BlockWork w =
        matmul::block_work<BM, BN>(args, SWAP ? args.n : args.m, SWAP ? args.m : args.n);
    matmul::BlockWork out = w;
    if constexpr (SWAP) {
      out.tile_m = w.tile_n;
      out.tile_n = w.tile_m;
    }
    const int tile_m = w.tile_m, tile_n = w.tile_n, split = w.split, batch = w.batch;
    const int k_begin = w.k_begin, k_end = w.k_end;
    const int k_tiles = (k_end - k_begin + BK - 1) / BK;  // the copy engine zero-fills past K

    if (threadIdx.x == 0) {
      prefetch_tensor_map(map_a);
      prefetch_tensor_map(map_b);
      for (int s = 0; s < STAGES; ++s) {
        barrier_init(full + 8 * s, 1);               // the producer's arrive + the bytes
        barrier_init(empty + 8 * s, 4 * CONSUMERS);  // one arrive per consumer warp
      }
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    const int group = static_cast<int>(threadIdx.x) / 128 - 1;  // -1: the producer warpgroup
    float acc[ACC];
#pragma unroll
    for (int i = 0; i < ACC; ++i) acc[i] = 0.0f;
    if (group < 0) {
      if (threadIdx.x == 0)
        produce(map_a, map_b, stages, full, empty, tile_m * BM, tile_n * BN, batch, k_begin,
                k_tiles);
    } else {
      consume(acc, stages, full, empty, k_tiles);
    }
    // Whole-block barriers only (no named barriers over a subset of warps): every
    // wgmma has read its last stage, so the stages may hold the staged tile; then
    // everything is staged before anyone writes C. (With named barriers for the
    // consumers alone, compute-sanitizer's racecheck reported the staged reads
    // against the staging writes.)
    __syncthreads();
    if (group >= 0) stage_accumulators(staged, acc, group);
    if (args.splits > 1 && args.splits_cluster) {
      // Its first cluster barrier also orders this block's staging before its reads.
      finish_split_in_cluster<Epilogue>(args, ops, out, stages);
      return;
    }
    __syncthreads();
    write_tile<Epilogue>(args, ops, staged, out.tile_m, out.tile_n, batch, split);
    if (args.splits > 1) matmul::finish_split<TC, Epilogue, OUT_ROWS, OUT_COLS>(args, ops, out);
  }

  // Split-K through distributed shared memory (stage 6 on sm_90). The S splits of a
  // tile are one thread-block cluster (the runtime launches clusters of 1 x S x 1,
  // so cluster rank = blockIdx.y = split), and every split has just staged its fp32
  // partial tile in its own shared memory (`staged`: BM rows of STAGED_STRIDE
  // floats). After a cluster barrier each block sums 1/S of the tile, reading the
  // same 4 floats from every split's shared memory over the SM-to-SM network, in
  // split order 0, 1, ..., S - 1 (deterministic), and finishes and stores them.
  // (w: the caller's tile, OUT_ROWS x OUT_COLS, staged rows OUT_STRIDE floats apart.)
  // Against the workspace way (finish_split): no fp32 partials written to and read
  // back from L2, no __threadfence, no arrival counter to spin on, and no
  // cooperative launch (a cluster is resident as a whole by construction). A second
  // cluster barrier, its arrive relaxed (C's stores need not drain first), keeps
  // every block's shared memory alive until its peers have read it.
  template <typename Epilogue>
  __device__ __forceinline__ static void finish_split_in_cluster(const MatmulArgs& args,
                                                                 const EpilogueOperands& ops,
                                                                 const matmul::BlockWork& w,
                                                                 u32 staged) {
    constexpr int MAX_SPLITS = 8;  // a portable cluster holds at most 8 blocks
    cluster_sync();
    const int rows = min(OUT_ROWS, args.m - w.tile_m * OUT_ROWS);
    const int cols = min(OUT_COLS, args.n - w.tile_n * OUT_COLS);
    const int quads = (cols + 3) / 4;  // groups of 4 columns per row
    const int total = rows * quads;
    const int begin = total * w.split / args.splits;
    const int end = total * (w.split + 1) / args.splits;
#pragma unroll 1
    for (int i = begin + static_cast<int>(threadIdx.x); i < end; i += THREADS) {
      const int r = i / quads, col = 4 * (i % quads);
      const u32 mine = staged + static_cast<u32>((r * OUT_STRIDE + col) * 4);
      float4 v[MAX_SPLITS];
#pragma unroll
      for (int s = 0; s < MAX_SPLITS; ++s)  // every load in flight before the first add
        if (s < args.splits) v[s] = load_cluster_f32x4(cluster_address(mine, s));
      float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int s = 0; s < MAX_SPLITS; ++s)
        if (s < args.splits) {
          acc[0] += v[s].x;
          acc[1] += v[s].y;
          acc[2] += v[s].z;
          acc[3] += v[s].w;
        }
      matmul::finish_quad<TC, Epilogue>(args, ops, w.batch, w.tile_m * OUT_ROWS + r,
                                        w.tile_n * OUT_COLS + col, min(4, cols - col), acc);
    }
    cluster_arrive_relaxed();
    cluster_wait();
  }

  // ---- the persistent schedule ---------------------------------------------------
  // grid = one or a few blocks per SM (the runtime asks the occupancy calculator),
  // each walking the work units blockIdx.x, + gridDim.x, ... — a unit is one output
  // tile of one K split of one batch, numbered split-major, then batch, then in the
  // block order of tile_of_block (so the units in flight at once share A and B tiles
  // in L2, as the one-tile-per-block grid's blocks do). The producer thread runs
  // ahead across tile boundaries: while the consumers finish a tile and write it
  // out, the copy engine is already filling the stages with the next tile's
  // k-tiles, so the next main loop starts on a full pipeline (the non-persistent
  // grid pays that fill, and an idle write-out, once per tile). The stages are
  // never idle, so the write-out does not stage through them: each consumer warp
  // goes through its own small slab of shared memory (write_out), and on to the
  // next tile's wgmma while those stores drain.
  __device__ __forceinline__ static matmul::BlockWork unit_work(const MatmulArgs& args,
                                                                long long unit, int tiles_m,
                                                                int tiles_n) {
    const long long tiles = static_cast<long long>(tiles_m) * tiles_n;
    long long tile = unit;  // over every batch's tiles
    matmul::BlockWork w;
    w.split = 0;
    w.k_begin = 0;
    w.k_end = args.k;
    // Stream-K: the last streamk_tiles tiles are streamk_splits units each, split-major.
    const long long whole = streamk_whole_tiles(args, tiles);
    if (unit >= whole) {
      const long long v = unit - whole;
      tile = whole + v % args.streamk_tiles;
      w.split = static_cast<int>(v / args.streamk_tiles);
      const int k_tiles = (args.k + BK - 1) / BK;
      w.k_begin = w.split * k_tiles / args.streamk_splits * BK;
      w.k_end = min(args.k, (w.split + 1) * k_tiles / args.streamk_splits * BK);
    }
    matmul::tile_of_block(static_cast<int>(tile % tiles), tiles_m, tiles_n, args.raster, w.tile_m,
                          w.tile_n);
    w.batch = static_cast<int>(tile / tiles);
    return w;
  }

  // The tiles computed whole, one unit each (all of them without stream-K).
  __device__ __forceinline__ static long long streamk_whole_tiles(const MatmulArgs& args,
                                                                  long long tiles) {
    return tiles * args.batch - (args.streamk_splits > 1 ? args.streamk_tiles : 0);
  }

  // ---- stream-K: the last wave shared by every SM ---------------------------------
  // T tiles on G persistent blocks make T / G full waves and a last one of R = T % G
  // tiles, during which G - R SMs would idle. With stream-K (schedule=streamk; the
  // runtime sets streamk_tiles = R and streamk_splits = S when R <= G / 2) each of
  // those R tiles is S units of 1 / S of its k-tiles, R x S <= G of them: the last
  // wave takes about 1 / S of a tile's time, plus this meeting of the splits.
  //
  // Units are numbered split-major (unit_work), so the units of split S - 1 come
  // last in every block's walk. Splits 0 .. S - 2 store their fp32 accumulators in
  // the workspace in the accumulators' own order (consumer thread t's values 4q ..
  // 4q + 3 as float4 q x CONSUMER_THREADS + t: each warp store one 512-byte run),
  // make them visible GPU-wide and count themselves in the tile's counter. Split
  // S - 1 waits until all S - 1 have counted, adds their partials to its own
  // accumulators in split order (((own + P0) + P1) + ...: the same bits every run,
  // whichever split finished first) and writes the tile out as any other. No
  // deadlock: every block is resident at once (a cooperative launch), a waiting
  // split waits only for splits that come earlier in their blocks' walks, and
  // those never wait. Returns whether this block writes the tile out.
  __device__ __forceinline__ static bool finish_streamk(const MatmulArgs& args, float (&acc)[ACC],
                                                        int split, long long tail) {
    constexpr int QUADS = ACC / 4;  // float4s a thread, per partial tile
    constexpr int LOADS = 8;        // float4s in flight a thread while summing
    static_assert(QUADS % LOADS == 0, "BN is a multiple of 64");
    const int t = static_cast<int>(threadIdx.x) - 128;  // consumer thread
    const int splits = args.streamk_splits;
    float4* partials = reinterpret_cast<float4*>(args.workspace) +
                       tail * (splits - 1) * QUADS * CONSUMER_THREADS + t;
    unsigned* counter = args.arrivals + tail;
    if (split < splits - 1) {
      float4* mine = partials + split * QUADS * CONSUMER_THREADS;
#pragma unroll
      for (int q = 0; q < QUADS; ++q)
        __stcg(mine + q * CONSUMER_THREADS,
               make_float4(acc[4 * q], acc[4 * q + 1], acc[4 * q + 2], acc[4 * q + 3]));
      __threadfence();
      named_barrier_sync(1, CONSUMER_THREADS);  // every consumer thread's partial is out
      if (t == 0) atomicAdd(counter, 1u);
      return false;
    }
    if (t == 0) {
      matmul::wait_for_count(counter, static_cast<unsigned>(splits - 1));
      *counter = 0;  // every other split has counted itself: ready for the next launch
    }
    named_barrier_sync(1, CONSUMER_THREADS);
    __threadfence();
#pragma unroll
    for (int q0 = 0; q0 < QUADS; q0 += LOADS) {
#pragma unroll 1
      for (int s = 0; s < splits - 1; ++s) {
        float4 v[LOADS];
#pragma unroll
        for (int i = 0; i < LOADS; ++i)
          v[i] = __ldcg(partials + (s * QUADS + q0 + i) * CONSUMER_THREADS);
#pragma unroll
        for (int i = 0; i < LOADS; ++i) {
          acc[4 * (q0 + i)] += v[i].x;
          acc[4 * (q0 + i) + 1] += v[i].y;
          acc[4 * (q0 + i) + 2] += v[i].z;
          acc[4 * (q0 + i) + 3] += v[i].w;
        }
      }
    }
    return true;
  }

  // Byte `byte` of row `row` of a warp's slab. Rows are one 128-byte line, unpadded;
  // the 16-byte chunks of row r are XOR-swizzled by r % 8, so the 8 rows a warp's
  // pair stores touch, and the 8 chunks of a row that 8 lanes read or write as
  // 16-byte accesses, fall in different banks (2 KB a warp: 256 x 128 tiles with 4
  // stages fit in shared memory; padded rows, 2.3 KB, did not).
  __device__ __forceinline__ static int slab_offset(int row, int byte) {
    return row * SLAB_ROW_BYTES + (((byte >> 4) ^ (row & 7)) << 4) + (byte & 15);
  }

  // The epilogue's per-column operands (a bias) at this lane's pair of columns in each
  // group of 8 of a line, line_col + 8 jj + c and + 1: read once for both halves of
  // the warp's 16 rows, one pair load each, all before the line's first output,
  // instead of two 2-byte loads per pair of outputs inside the line's chain of
  // stores (finish() without columns). On the H200, same binary: gelu(acc + bias)
  // 4096^3 (256 x 128) 0.1913 -> 0.1901 ms, 2048 x 50257 x 768 0.4361 -> 0.4312, and
  // ping-pong 64 x 256, with one warp a scheduler to hide the loads, 0.5029 -> 0.4754
  // (docs/perf/2026-12-04-h200-gelu-for-16bit.md).
  template <typename Epilogue>
  __device__ __forceinline__ static void load_line_columns(
      float (&columns)[SLAB_COLUMNS / 8][Epilogue::kColumnSlots][2], long long batch, int line_col,
      int c, const EpilogueOperands& ops) {
#pragma unroll
    for (int jj = 0; jj < SLAB_COLUMNS / 8; ++jj)
      Epilogue::template load_columns<2>(columns[jj], batch, line_col + 8 * jj + c, 2, ops);
  }

  // finish() of output e of a pair whose column operands load_line_columns read.
  template <typename Epilogue>
  __device__ __forceinline__ static float finish_pair(
      float acc, const MatmulArgs& args, long long batch, int row, int col,
      const float (&pair)[Epilogue::kColumnSlots][2], int e, const EpilogueOperands& ops) {
    float at[Epilogue::kColumnSlots];
#pragma unroll
    for (int k = 0; k < Epilogue::kColumnSlots; ++k) at[k] = pair[k][e];
    return matmul::finish<TC, Epilogue>(acc, 0.0f, args, batch, row, col + e, at, ops);
  }

  // The write-out through the copy engine (TMA bulk stores), for whole tiles without
  // C0 where C's pointer, rows and batch stride are 16-byte aligned (args.c_tma).
  // Phase 1 is write_out_16's (each lane finishes its pairs of outputs into the
  // warp's slab); phase 2 is one instruction: a lane asks the copy engine to store
  // the slab's rows as a box of map_c, and the warp moves on. The loads and stores of
  // phase 2 (four 16-byte chunks a lane per line) leave the consumer warps, and so
  // does the wait for a memory system that every SM writes to at once when a wave of
  // tiles ends: the copy engine drains the slab while the next tile's wgmma run.
  //
  // The slab's two halves (rows 0-7 and 8-15, 1 KiB each, 1024-byte aligned) are one
  // 128-byte-swizzle atom each, the layout slab_offset writes and the map's swizzle
  // reads, and they take turns: a half is written again only once the store that
  // last read it has read it (bulk_wait_read<1>: the half's previous store is the
  // second most recent of the lane's groups). Lane 0 issues, commits and waits; the
  // warp follows it through __syncwarp.
  template <typename Epilogue>
  __device__ __forceinline__ static void write_out_bulk(
      const MatmulArgs& args, const EpilogueOperands& ops, const float (&acc)[ACC],
      const matmul::BlockWork& w, int row0, int col0, int r1, int c1, unsigned char* slab,
      const TensorMap& map_c) {
    const bool issuer = threadIdx.x % 32 == 0;
    const u32 slab_address = mma::shared_address(slab);
#pragma unroll
    for (int line = 0; line < BN / SLAB_COLUMNS; ++line) {
      const int line_col = col0 + line * SLAB_COLUMNS;  // the line's first column
      float columns[SLAB_COLUMNS / 8][Epilogue::kColumnSlots][2];
      load_line_columns<Epilogue>(columns, w.batch, line_col, c1, ops);
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        if (issuer) bulk_wait_read<1>();  // this half's previous store has read it
        __syncwarp();
#pragma unroll
        for (int jj = 0; jj < SLAB_COLUMNS / 8; ++jj) {
          const int j = line * (SLAB_COLUMNS / 8) + jj;  // accumulator column group
          const int col = line_col + 8 * jj + c1;
          float v[2];
#pragma unroll
          for (int e = 0; e < 2; ++e)
            v[e] = finish_pair<Epilogue>(acc[4 * j + 2 * half + e], args, w.batch,
                                         row0 + r1 + 8 * half, col, columns[jj], e, ops);
          matmul::Pair<TC>::store(
              reinterpret_cast<TC*>(
                  slab + slab_offset(r1 + 8 * half, (8 * jj + c1) * static_cast<int>(sizeof(TC)))),
              v[0], v[1]);
        }
        fence_async_shared();  // the half's writes, before the copy engine reads them
        __syncwarp();
        if (issuer) {
          tma_store(map_c, slab_address + half * 8 * SLAB_ROW_BYTES, line_col, row0 + 8 * half,
                    w.batch);
          bulk_commit();
        }
      }
    }
  }

  // Writes a consumer warp's 16 x BN outputs where C's rows are 16-byte aligned. Warp w of a group
  // holds rows 16w + lane / 4 and + 8, columns 8j + 2 (lane % 4) and + 1, in acc[4j + 2 half] and
  // acc[4j + 2 half + 1]: stored straight from there, a warp instruction would
  // write 4 bytes to each of 8 rows, and the load-store unit would spend 8 passes on
  // it (measured on the H200: 5% slower than the one-tile-per-block grid's staged
  // write-out). So the warp goes through its own slab of shared memory (the stages
  // belong to the producer, already loading the next tile), one 128-byte line of
  // columns at a time: the finished outputs (alpha, beta * C0, the epilogue), as
  // TC, in; then rows of whole 16-byte chunks out, 8 lanes per row (a warp
  // instruction writes 4 full lines), or, not GUARDED, a bulk store of the copy
  // engine (write_out_bulk). Only __syncwarp: no other warp reads the slab.
  // The code is unrolled over the accumulators (their indices must be constants
  // to stay in registers), so each step stays small.
  // GUARDED: the tile crosses M or N, or beta * C0 is read. Then C0 comes into the
  // slab first, in the same 16-byte chunks that C goes out in (each chunk checked
  // against M and N once); the epilogue's column operands come in per pair of
  // columns (zeros past N), its others are read at the nearest output inside the
  // matrix: outputs past M or N get values that are never stored, and no output
  // needs a branch of its own. (A check and a branch per
  // output, as before, made the guarded write-out ~3x the unguarded one's
  // instructions; on the H200 an N of 4064 ran 6% slower than 4096, the same 512
  // tiles, from the 32 edge tiles alone.) Else the common case runs without either.
  //
  // Not GUARDED (a whole tile, no C0), C's rows 16-byte aligned: the copy engine
  // stores the slab instead (write_out_bulk), so the warp goes on to its next tile
  // while the line drains.
  template <typename Epilogue, bool GUARDED>
  __device__ __forceinline__ static void write_out_16(const MatmulArgs& args,
                                                      const EpilogueOperands& ops,
                                                      const float (&acc)[ACC],
                                                      const matmul::BlockWork& w, int group,
                                                      unsigned char* slab, const TensorMap& map_c) {
    const int warp = (static_cast<int>(threadIdx.x) / 32) % 4;
    const int lane = static_cast<int>(threadIdx.x) % 32;
    const int row0 = w.tile_m * BM + group * 64 + warp * 16;  // the warp's first row
    const int col0 = w.tile_n * BN;
    // Phase 1 coordinates: rows lane / 4 and + 8, columns 2 (lane % 4) + {0, 1}.
    const int r1 = lane / 4, c1 = 2 * (lane % 4);
    if constexpr (!GUARDED) {
      write_out_bulk<Epilogue>(args, ops, acc, w, row0, col0, r1, c1, slab, map_c);
      return;
    }
    int row_read[2];  // where the epilogue reads its row operands (inside M)
#pragma unroll
    for (int half = 0; half < 2; ++half)
      row_read[half] = GUARDED ? min(row0 + r1 + 8 * half, args.m - 1) : row0 + r1 + 8 * half;
    const bool beta = GUARDED && args.beta != 0.0f;
    // Phase 2 coordinates: lanes 8i..8i+7 write row i (+ 4, 8, 12), chunk lane % 8.
    const int r2 = lane / 8, chunk = lane % 8;
    TC* c_base = static_cast<TC*>(args.c) + w.batch * args.stride_c;
    const TC* c0_base = static_cast<const TC*>(args.c0) + w.batch * args.stride_c0;
#pragma unroll
    for (int line = 0; line < BN / SLAB_COLUMNS; ++line) {
      const int line_col = col0 + line * SLAB_COLUMNS;  // the line's first column
      __syncwarp();                                     // the previous line's reads are done
      if (beta) {
        // Phase 0: the line of C0, chunk by chunk as phase 2 writes C (zeros past M, N);
        // a rolled loop, so the four chunks' values are not all live at once.
#pragma unroll 1
        for (int pass = 0; pass < 4; ++pass) {
          const int r = r2 + 4 * pass, row = row0 + r, col = line_col + chunk * VEC;
          const int valid = row < args.m ? min(max(args.n - col, 0), VEC) : 0;
          float v[VEC];
#pragma unroll
          for (int q = 0; q < VEC; ++q) v[q] = 0.0f;
          if (valid > 0)
            matmul::load_values<TC, VEC>(c0_base + static_cast<long long>(row) * args.ldc0 + col,
                                         valid, v);
          matmul::Chunk<TC>::store16(reinterpret_cast<TC*>(slab + slab_offset(r, chunk * 16)), v);
        }
        __syncwarp();
      }
#pragma unroll
      for (int jj = 0; jj < SLAB_COLUMNS / 8; ++jj) {
        const int j = line * (SLAB_COLUMNS / 8) + jj;  // accumulator column group
        const int col = line_col + 8 * jj + c1;
        // GUARDED: the per-column operands of the pair's two columns, zeros past N
        // (read once for both rows; a clamped address per output cost registers
        // that 256-row tiles, 96 a thread, do not have).
        float columns[Epilogue::kColumnSlots][2];
        if constexpr (GUARDED)
          Epilogue::template load_columns<2>(columns, w.batch, col, max(min(args.n - col, 2), 0),
                                             ops);
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          // The pair's place in the slab: its C0 (phase 0) out, its outputs in.
          TC* at = reinterpret_cast<TC*>(
              slab + slab_offset(r1 + 8 * half, (8 * jj + c1) * static_cast<int>(sizeof(TC))));
          float c0v[2] = {0.0f, 0.0f};
          if (beta) matmul::Pair<TC>::load(at, c0v[0], c0v[1]);
          float v[2];
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            if constexpr (GUARDED) {
              float at_e[Epilogue::kColumnSlots];
#pragma unroll
              for (int k = 0; k < Epilogue::kColumnSlots; ++k) at_e[k] = columns[k][e];
              // Matrix operands (if any) are read at the nearest output inside N.
              v[e] =
                  matmul::finish<TC, Epilogue>(acc[4 * j + 2 * half + e], c0v[e], args, w.batch,
                                               row_read[half], min(col + e, args.n - 1), at_e, ops);
            } else {
              v[e] = matmul::finish<TC, Epilogue>(acc[4 * j + 2 * half + e], c0v[e], args, w.batch,
                                                  row_read[half], col + e, ops);
            }
          }
          matmul::Pair<TC>::store(at, v[0], v[1]);
        }
      }
      __syncwarp();  // the line is staged
#pragma unroll
      for (int pass = 0; pass < 4; ++pass) {
        const int r = r2 + 4 * pass, row = row0 + r, col = line_col + chunk * VEC;
        if (GUARDED && (row >= args.m || col >= args.n)) continue;
        float v[VEC];
        matmul::Chunk<TC>::load16(reinterpret_cast<const TC*>(slab + slab_offset(r, chunk * 16)),
                                  v);
        TC* out = c_base + static_cast<long long>(row) * args.ldc + col;
        if (!GUARDED || col + VEC <= args.n) {
          matmul::store_chunk(out, v);
        } else {
#pragma unroll 1
          for (int e = 0; e < args.n - col; ++e) {
            out[e] = from_f32<TC>(v[0]);
#pragma unroll
            for (int q = 0; q + 1 < VEC; ++q) v[q] = v[q + 1];  // next output to the front
          }
        }
      }
    }
  }

  // The write-out of C whose rows are not 16-byte aligned (N = 50257): the same warp
  // slab, but the line is staged as fp32 accumulators and finished on the way out.
  // Warp w of a group holds rows 16w +
  // lane / 4 and + 8, columns 8j + 2 (lane % 4) and + 1, in acc[4j + 2 half] and
  // acc[4j + 2 half + 1]: stored straight from there, a warp instruction would
  // write 4 bytes to each of 8 rows, and the load-store unit would spend 8 passes on
  // it (measured on the H200: 5% slower than the one-tile-per-block grid's staged
  // write-out). So the warp goes through its own slab of shared memory (the stages
  // belong to the producer, already loading the next tile), one 128-byte line of
  // 32 columns at a time, in two phases with only __syncwarp between them (no other
  // warp reads the slab):
  //   1. the raw fp32 accumulators in, as pairs. This part is unrolled over the
  //      accumulators (their indices must be constants to stay in registers) and is
  //      a few stores per line.
  //   2. out in rows of 16-byte chunks of 4 fp32 values, 8 lanes a row: each lane
  //      finishes its 4 outputs (alpha, beta * C0, the epilogue with its column
  //      operands read 4 at a time) and stores them, 4 outputs as wide as the row's
  //      alignment allows. A rolled loop: the epilogue's code is there once per
  //      line, not once per output. (write_out_16 inlines it per output: a 128 x 256
  //      tile's thread runs 128 gelus, ~4,400 instructions the instruction cache
  //      cannot hold; on the H200 ncu counted 10x the no-instruction stalls, and
  //      gelu(acc + bias) cost 30% over the plain product there. Here 0.2166 ms
  //      against 0.2333 at 4096^3; but the plain product loses 5%, and 256 x 128
  //      tiles with gelu 2.5%: aligned C stays with write_out_16.)
  // GUARDED: the tile crosses M or N. Phase 2 skips the chunks past M or N and
  // stores a chunk that N cuts one output at a time; the epilogue's operands are read
  // inside the matrix only (column operands are zeros past N, others are read at the
  // nearest output inside N). Else the common case runs without a check.
  template <typename Epilogue, bool GUARDED>
  __device__ __forceinline__ static void write_out_f32(const MatmulArgs& args,
                                                       const EpilogueOperands& ops,
                                                       const float (&acc)[ACC],
                                                       const matmul::BlockWork& w, int group,
                                                       unsigned char* slab) {
    const int warp = (static_cast<int>(threadIdx.x) / 32) % 4;
    const int lane = static_cast<int>(threadIdx.x) % 32;
    const int row0 = w.tile_m * BM + group * 64 + warp * 16;  // the warp's first row
    const int col0 = w.tile_n * BN;
    // Phase 1 coordinates: rows lane / 4 and + 8, columns 2 (lane % 4) + {0, 1}.
    const int r1 = lane / 4, c1 = 2 * (lane % 4);
    // Phase 2 coordinates: lanes 8i..8i+7 write row i (+ 4, 8, 12), chunk lane % 8.
    const int r2 = lane / 8, chunk = lane % 8;
    TC* c_base = static_cast<TC*>(args.c) + w.batch * args.stride_c;
    const TC* c0_base = static_cast<const TC*>(args.c0) + w.batch * args.stride_c0;
#pragma unroll
    for (int line = 0; line < BN / SLAB_F32_COLUMNS; ++line) {
      __syncwarp();  // the previous line's reads are done
#pragma unroll
      for (int jj = 0; jj < SLAB_F32_COLUMNS / 8; ++jj) {
        const int j = line * (SLAB_F32_COLUMNS / 8) + jj;  // accumulator column group
#pragma unroll
        for (int half = 0; half < 2; ++half)
          matmul::Pair<float>::store(
              reinterpret_cast<float*>(slab + slab_offset(r1 + 8 * half, (8 * jj + c1) * 4)),
              acc[4 * j + 2 * half], acc[4 * j + 2 * half + 1]);
      }
      __syncwarp();  // the line is staged
#pragma unroll 1
      for (int pass = 0; pass < 4; ++pass) {
        const int r = r2 + 4 * pass, row = row0 + r;
        const int col = col0 + line * SLAB_F32_COLUMNS + 4 * chunk;
        if (GUARDED && (row >= args.m || col >= args.n)) continue;
        const int valid = GUARDED ? min(args.n - col, 4) : 4;
        float v[4];
        matmul::Chunk<float>::load16(
            reinterpret_cast<const float*>(slab + slab_offset(r, 16 * chunk)), v);
        float c0v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (args.beta != 0.0f)
          matmul::load_values<TC, 4>(c0_base + static_cast<long long>(row) * args.ldc0 + col, valid,
                                     c0v);
        float columns[Epilogue::kColumnSlots][4];
        Epilogue::template load_columns<4>(columns, w.batch, col, valid, ops);
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          float at_q[Epilogue::kColumnSlots];
#pragma unroll
          for (int k = 0; k < Epilogue::kColumnSlots; ++k) at_q[k] = columns[k][q];
          v[q] =
              matmul::finish<TC, Epilogue>(v[q], c0v[q], args, w.batch, row,
                                           GUARDED ? min(col + q, args.n - 1) : col + q, at_q, ops);
        }
        TC* out = c_base + static_cast<long long>(row) * args.ldc + col;
        if (!GUARDED || valid == 4) {
          matmul::store_four(out, v);
        } else {
#pragma unroll 1
          for (int e = 0; e < valid; ++e) {
            out[e] = from_f32<TC>(v[0]);
#pragma unroll
            for (int q = 0; q + 1 < 4; ++q) v[q] = v[q + 1];  // next output to the front
          }
        }
      }
    }
  }

  // ---- misaligned rows of C, through the copy engine after all -----------------
  // Word i of a chunk, i not a constant: selects (an index into a register array
  // that is not a constant would put it in local memory).
  __device__ __forceinline__ static u32 word_of(const matmul::U32x4& c, int i) {
    return i == 0 ? c.x : i == 1 ? c.y : i == 2 ? c.z : c.w;
  }

  // A row's head and tail where its chunk is laid out as in C (byte p of c belongs p
  // bytes past a 16-byte boundary of C, as in the chunks of a shifted row): at most one
  // store each of 2, 4 and 8 bytes, no loop.
  // Bytes [from, 16) of c to dst (where byte `from` belongs), from even and > 0.
  __device__ __forceinline__ static void store_head(unsigned char* dst, const matmul::U32x4& c,
                                                    int from) {
    unsigned char* chunk = dst - from;  // the 16-byte boundary before dst
    int p = from;
    if (p & 2) {
      *reinterpret_cast<unsigned short*>(chunk + p) =
          static_cast<unsigned short>(word_of(c, p >> 2) >> 16);
      p += 2;
    }
    if (p & 4) {
      *reinterpret_cast<u32*>(chunk + p) = word_of(c, p >> 2);
      p += 4;
    }
    if (p == 8) *reinterpret_cast<uint2*>(chunk + 8) = make_uint2(c.z, c.w);
  }
  // Bytes [0, to) of c to dst (16-byte aligned), to even.
  __device__ __forceinline__ static void store_tail(unsigned char* dst, const matmul::U32x4& c,
                                                    int to) {
    int p = 0;
    if (to & 8) {
      *reinterpret_cast<uint2*>(dst) = make_uint2(c.x, c.y);
      p = 8;
    }
    if (to & 4) {
      *reinterpret_cast<u32*>(dst + p) = word_of(c, p >> 2);
      p += 4;
    }
    if (to & 2)
      *reinterpret_cast<unsigned short*>(dst + p) =
          static_cast<unsigned short>(word_of(c, p >> 2) & 0xffffu);
  }

  // The write-out of a whole tile without C0 into C whose rows are not 16-byte
  // aligned (N = 50257, a contiguous C), for 16-bit outputs, through the copy
  // engine: one plain bulk store (bulk_store: no tensor map, no box) per row and
  // line, from a buffer whose rows are shifted so that every byte sits at its
  // address in C modulo 16, as a bulk store needs.
  //
  // A row that starts m bytes past a 16-byte boundary (m even, 2..14) puts byte b
  // of a 128-byte line of outputs at b + m of its 144-byte buffer row:
  //   - line bytes [h, h + 112), h = 16 - m, land on buffer bytes [16, 128): seven
  //     whole chunks, aligned in C too;
  //   - the line's first h bytes sit at [m, 16), and its last m bytes at [128,
  //     128 + m). Those last bytes share a chunk of C with the next line's first h:
  //     the lanes that hold them keep them (`held`) and write them at [0, m) of the
  //     buffer row with the next line, which then goes out as 128 bytes from the
  //     boundary before it. The row's head (its first line's first h bytes) and tail
  //     (its last line's last m bytes) are the only narrow stores (store_head,
  //     store_tail): their chunks are shared with the neighbouring tiles.
  // A row on a boundary (m = 0) is one bulk store of 128 bytes a line.
  //
  // One line of 64 columns and one half of the warp's 16 rows at a time:
  //   1. each lane finishes its 8 pairs of outputs (alpha, the epilogue) of row
  //      r1 (+ 8) as 8 words. Where m = 2 mod 4 a pair would straddle two words of
  //      the buffer, so a lane takes the column before its pair from its neighbour
  //      (a shuffle; before column 0 comes the last line's column 63) and stores
  //      (column - 1, column) instead;
  //   2. once the copy engine has read what this warp's last bulk stores left in the
  //      buffer, the words go in: 8 rows of 144 bytes, 4 banks apart, so the 32
  //      lanes of a store (8 rows x 4 words) fall in different banks except where
  //      two rows' shifts overlap (at most 2-way);
  //   3. lanes 0-7, a row each: the head or the tail, and the bulk store. The warp
  //      goes on to the next half while the copy engine drains this one.
  // Measured on the H200 (2048 x 50257 x 768, ms): against the warps' own 16-byte
  // stores of the same windows, 128 x 256 0.3675 -> 0.3682, 256 x 128 0.3775 ->
  // 0.3480, ping-pong 128 x 128 0.4118 -> 0.3663; with gelu(acc + bias) 0.5785 ->
  // 0.5672 and 0.5117 -> 0.4784; 4097^3 192 x 192 0.2494 -> 0.2470
  // (docs/perf/2026-12-04-h200-shifted-bulk-stores.md). Keeping the last line's
  // words in registers instead of splicing them into the next line's chunk 0 in
  // shared memory (a read, a write and a second proxy fence per row and line): 128
  // x 256 0.3628 -> 0.3565, 256 x 128 unchanged
  // (docs/perf/2026-12-04-h200-shifted-rows-held-words.md, with where the rest of
  // the time goes).
  // Only __syncwarp: no other warp reads the buffer (8 x 144 bytes of the warp's slab).
  static constexpr int SHIFTED_ROW_BYTES = 144;
  template <typename Epilogue>
  __device__ __forceinline__ static void write_out_shifted(const MatmulArgs& args,
                                                           const EpilogueOperands& ops,
                                                           const float (&acc)[ACC],
                                                           const matmul::BlockWork& w, int group,
                                                           unsigned char* slab) {
    static_assert(sizeof(TC) == 2, "16-bit outputs: a row's address is a multiple of 2");
    static_assert(8 * SHIFTED_ROW_BYTES <= SLAB_BYTES, "8 shifted rows fit the warp's slab");
    constexpr int LINES = BN / SLAB_COLUMNS;
    const int warp = (static_cast<int>(threadIdx.x) / 32) % 4;
    const int lane = static_cast<int>(threadIdx.x) % 32;
    const int row0 = w.tile_m * BM + group * 64 + warp * 16;  // the warp's first row
    const int col0 = w.tile_n * BN;
    // Phase 1: row r1 (+ 8), columns 8 jj + 2 q and + 1 of each group of 8.
    const int r1 = lane / 4, q = lane % 4;
    const u32 buffer = mma::shared_address(slab);
    TC* c_base = static_cast<TC*>(args.c) + w.batch * args.stride_c;
    auto row_start = [&](int r) {  // row r of the warp's 16, at the tile's first column
      return reinterpret_cast<unsigned char*>(c_base + static_cast<long long>(row0 + r) * args.ldc +
                                              col0);
    };
    int shift[2];           // phase 1: m of row r1 + 8 half
    unsigned char* out[2];  // phase 3 (lanes 0-7): row lane + 8 half in C
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      shift[half] =
          static_cast<int>(reinterpret_cast<unsigned long long>(row_start(r1 + 8 * half)) & 15);
      out[half] = row_start(min(lane, 7) + 8 * half);
    }
    u32 held[2] = {0u, 0u};   // this lane's word of the last line past buffer byte 128
    u32 last7[2] = {0u, 0u};  // the last line's pair of group 7 (columns 56 + 2q, + 1)
#pragma unroll
    for (int line = 0; line < LINES; ++line) {
      float columns[SLAB_COLUMNS / 8][Epilogue::kColumnSlots][2];
      load_line_columns<Epilogue>(columns, w.batch, col0 + line * SLAB_COLUMNS, 2 * q, ops);
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        u32 pair[8];  // 1. this half's outputs of the line, a word per pair of columns
#pragma unroll
        for (int jj = 0; jj < 8; ++jj) {
          const int j = line * 8 + jj;  // accumulator column group
          const int col = col0 + line * SLAB_COLUMNS + 8 * jj + 2 * q;
          float v[2];
#pragma unroll
          for (int e = 0; e < 2; ++e)
            v[e] = finish_pair<Epilogue>(acc[4 * j + 2 * half + e], args, w.batch,
                                         row0 + r1 + 8 * half, col, columns[jj], e, ops);
          pair[jj] = matmul::Pair<TC>::pack(v[0], v[1]);
        }
        const int m = shift[half];
        // Buffer byte of this lane's word of group 7: past 128 (the line's last m
        // bytes) for the lanes whose word is held for the next line.
        const int p7 = 112 + 4 * q + (m & 12);
        const bool last = line == LINES - 1;
        if (lane < 8) bulk_wait_read<0>();  // 2. the buffer's last bulk stores have read it
        __syncwarp();
        unsigned char* row = slab + r1 * SHIFTED_ROW_BYTES;
        if (line > 0 && p7 >= 128) *reinterpret_cast<u32*>(row + p7 - 128) = held[half];
#pragma unroll
        for (int jj = 0; jj < 8; ++jj) {
          // The column before this lane's pair: lane q - 1's second, or for q = 0
          // lane 3's second of the group before (of the last line's group 7 for group
          // 0: a line's first word holds the last line's column 63).
          const u32 offered = q == 3 ? (jj == 0 ? last7[half] : pair[jj - 1]) : pair[jj];
          const u32 before = __shfl_sync(0xffffffffu, offered, q == 0 ? lane + 3 : lane - 1);
          const u32 word = (m & 2) ? __byte_perm(before, pair[jj], 0x5432) : pair[jj];
          if (jj < 7 || p7 < 128 || last)
            *reinterpret_cast<u32*>(row + 16 * jj + 4 * q + (m & 12)) = word;
          else
            held[half] = word;
        }
        if (last) {
          // Where m = 2 mod 4 the row's last column is the high half of lane 3's
          // group 7 and no word above holds it: (column 63, -) ends the tail.
          const u32 before = __shfl_sync(0xffffffffu, pair[7], q == 0 ? lane + 3 : lane - 1);
          if (q == 0 && (m & 2))
            *reinterpret_cast<u32*>(row + 128 + (m & 12)) = __byte_perm(before, 0u, 0x5432);
        }
        last7[half] = pair[7];
        fence_async_shared();  // the words, before the copy engine reads them
        __syncwarp();
        if (lane < 8) {                                 // 3. row lane + 8 half
          unsigned char* dst = out[half] + 128 * line;  // the line's first byte in C
          const int row_shift = static_cast<int>(reinterpret_cast<unsigned long long>(dst) & 15);
          const u32 row_buffer = buffer + lane * SHIFTED_ROW_BYTES;
          const unsigned char* mine = slab + lane * SHIFTED_ROW_BYTES;
          if (row_shift == 0) {
            bulk_store(dst, row_buffer, 128);
          } else {
            const int h = 16 - row_shift;
            if (last)  // the row's tail: the line's last m bytes, at [128, 128 + m)
              store_tail(dst + h + 112, *reinterpret_cast<const matmul::U32x4*>(mine + 128),
                         row_shift);
            if (line == 0) {  // the row's head: the line's first h bytes, at [m, 16)
              store_head(dst, *reinterpret_cast<const matmul::U32x4*>(mine), row_shift);
              bulk_store(dst + h, row_buffer + 16, 112);
            } else {  // the last line's last m bytes and this line, from the boundary
              bulk_store(dst - row_shift, row_buffer, 128);
            }
          }
          bulk_commit();
        }
      }
    }
  }

  // Writes a consumer warp's 16 x BN outputs of a finished tile (`whole`: inside M and
  // N). Two ways, chosen by C's alignment class, both measured on the H200 (4096^3
  // aligned, 2048 x 50257 x 768 not; same process, old and new binaries in turn):
  //   write_out_16: outputs finished as they come off the accumulators, staged as
  //     TC, out in 16-byte chunks. Aligned C: 0.1776 ms at 4096^3 (128 x 256) where
  //     the other way takes 0.1863 (twice the lines, fp32 staging, 8-byte stores).
  //     Whole tiles without C0 where C takes a tensor map: out through the copy
  //     engine instead (write_out_bulk; same configs, old and new binaries:
  //     32000 x 4096 x 768 0.3057 -> 0.2967 ms, 4096 x 11008 x 4096 0.5199 -> 0.4825,
  //     16384 x 8192 x 1024 0.3990 -> 0.3865, 4096^3 0.1773 -> 0.1764); the rest
  //     (edge tiles, C0, a C without a map) through the warp's own stores.
  //   write_out_f32: raw fp32 accumulators staged, finished 4 at a time on the way
  //     out in a rolled loop. Misaligned C: 0.4253 ms at 2048 x 50257 x 768 (128 x
  //     256) where write_out_16 takes 0.5325, and with gelu(acc + bias) 0.6142
  //     against 0.6845. It stays for edge tiles and C0; whole tiles without C0 of
  //     16-bit outputs go through the copy engine from shifted rows
  //     (write_out_shifted).
  template <typename Epilogue>
  __device__ __forceinline__ static void write_out(const MatmulArgs& args,
                                                   const EpilogueOperands& ops,
                                                   const float (&acc)[ACC],
                                                   const matmul::BlockWork& w, int group,
                                                   unsigned char* slab, bool whole,
                                                   const TensorMap& map_c) {
    if (whole && args.beta == 0.0f && args.c_tma) {  // the copy engine stores the tile
      write_out_16<Epilogue, false>(args, ops, acc, w, group, slab, map_c);
      return;
    }
    // The slab is written with ordinary stores now: the copy engine must have read
    // what the last bulk stores of this warp left there (lanes without any return
    // at once).
    if (args.c_tma || SHIFTED_WRITE_OUT) {
      bulk_wait_read<0>();
      __syncwarp();
    }
    if constexpr (C_ALIGNED) {
      write_out_16<Epilogue, true>(args, ops, acc, w, group, slab, map_c);
    } else if (!whole) {
      write_out_f32<Epilogue, true>(args, ops, acc, w, group, slab);
    } else {
      // The misaligned class (A or B padded) may still write a C whose rows are
      // aligned (K = 4097, N = 4096; or rows of C padded, ldc = 50304): whole tiles
      // without C0 went out through the copy engine above.
      if constexpr (SHIFTED_WRITE_OUT) {
        if (args.beta == 0.0f) {
          write_out_shifted<Epilogue>(args, ops, acc, w, group, slab);
          return;
        }
      }
      write_out_f32<Epilogue, false>(args, ops, acc, w, group, slab);
    }
  }

  // The producer thread of a persistent block: every unit blockIdx.x, + gridDim.x,
  // ..., in order, k-tile after k-tile through the one stage ring.
  __device__ __forceinline__ static void produce_units(const MatmulArgs& args,
                                                       const TensorMap& map_a,
                                                       const TensorMap& map_b, u32 stages, u32 full,
                                                       u32 empty, int tiles_m, int tiles_n,
                                                       long long units) {
    int first = 0;
    for (long long unit = blockIdx.x; unit < units; unit += gridDim.x) {
      const matmul::BlockWork w = unit_work(args, unit, tiles_m, tiles_n);
      const int k_tiles = (w.k_end - w.k_begin + BK - 1) / BK;
      produce(map_a, map_b, stages, full, empty, w.tile_m * BM, w.tile_n * BN, w.batch, w.k_begin,
              k_tiles, first);
      first += k_tiles;
    }
  }

  template <typename Epilogue>
  __device__ __forceinline__ static void run_persistent(const MatmulArgs& args,
                                                        const EpilogueOperands& ops,
                                                        const TensorMap& map_a,
                                                        const TensorMap& map_b,
                                                        const TensorMap& map_c) {
    extern __shared__ __align__(1024) unsigned char kjit_wgmma_shared[];
    const u32 base = mma::shared_address(kjit_wgmma_shared);
    // The stages, the consumer warps' slabs (1024-byte aligned, as bulk stores of
    // 128-byte-swizzled boxes need), then the mbarriers.
    const u32 stages = (base + 1023) & ~1023u;
    const u32 slabs = stages + STAGES * STAGE_BYTES;
    const u32 full = slabs + 4 * CONSUMERS * SLAB_BYTES;
    const u32 empty = full + 8 * STAGES;
    if (threadIdx.x == 0) {
      prefetch_tensor_map(map_a);
      prefetch_tensor_map(map_b);
      if (args.c_tma) prefetch_tensor_map(map_c);
      for (int s = 0; s < STAGES; ++s) {
        barrier_init(full + 8 * s, 1);
        barrier_init(empty + 8 * s, 4 * CONSUMERS);
      }
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    const int tiles_m = (args.m + BM - 1) / BM, tiles_n = (args.n + BN - 1) / BN;
    // Every tile once, and stream-K's split tiles S - 1 more times.
    const long long whole_tiles =
        streamk_whole_tiles(args, static_cast<long long>(tiles_m) * tiles_n);
    const long long units =
        whole_tiles + (args.streamk_splits > 1
                           ? static_cast<long long>(args.streamk_tiles) * args.streamk_splits
                           : 0);
    const int group = static_cast<int>(threadIdx.x) / 128 - 1;  // -1: the producer warpgroup
    int first = 0;  // k-tiles through the pipeline so far (both sides count the same)
    if (group < 0) {
      if constexpr (CONSUMERS > 1)
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(PRODUCER_REGISTERS) : "memory");
      if (threadIdx.x != 0) return;  // the producer's other warps have nothing to do
      produce_units(args, map_a, map_b, stages, full, empty, tiles_m, tiles_n, units);
      return;
    }
    if constexpr (CONSUMERS > 1)
      asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(CONSUMER_REGISTERS) : "memory");
    // This warp's write-out slab.
    unsigned char* slab =
        kjit_wgmma_shared + (slabs - base) + (static_cast<int>(threadIdx.x) / 32 - 4) * SLAB_BYTES;
    for (long long unit = blockIdx.x; unit < units; unit += gridDim.x) {
      const matmul::BlockWork w = unit_work(args, unit, tiles_m, tiles_n);
      const int k_tiles = (w.k_end - w.k_begin + BK - 1) / BK;
      float acc[ACC];
#pragma unroll
      for (int i = 0; i < ACC; ++i) acc[i] = 0.0f;
      consume(acc, stages, full, empty, k_tiles, first);
      first += k_tiles;
      if (unit >= whole_tiles &&
          !finish_streamk(args, acc, w.split, (unit - whole_tiles) % args.streamk_tiles))
        continue;  // a split of a stream-K tile whose last split writes it
      const bool whole = (w.tile_m + 1) * BM <= args.m && (w.tile_n + 1) * BN <= args.n;
      write_out<Epilogue>(args, ops, acc, w, group, slab, whole, map_c);
    }
    // The slab stays allocated until the copy engine is done with it.
    if (args.c_tma || SHIFTED_WRITE_OUT) bulk_wait_all<0>();
  }

  // ---- the ping-pong schedule ----------------------------------------------------
  // As persistent, a block per SM walks the work units through one pipeline that
  // never drains; but the two consumer warpgroups take turns instead of sharing each
  // tile: warpgroup 0 computes the block's units 0, 2, 4, ..., warpgroup 1 units 1,
  // 3, 5, ..., each a whole BM x BN tile (ROWS row groups of 64 rows). The producer
  // loads the units' k-tiles in that order, so while one warpgroup runs its main
  // loop the other writes its finished tile out (alpha, beta, the epilogue's math
  // and the stores): the tensor cores do not wait for the write-out.
  //
  // Whose turn: a warpgroup skips the other's k-tiles in the stage ring, so it
  // could reach a stage's barrier two phases early, and a parity wait cannot tell
  // phase r from phase r - 2. So it starts waiting on its next unit only once the
  // other warpgroup has seen the last k-tile of its own unit land (order[g]): by
  // then every earlier phase of every stage is complete.
  //
  // Each of the 4 warps arrives on order[g] (count 4), not one thread for the
  // warpgroup: the warps wait on their turn independently, so a turn handed over by
  // one warp could complete two phases of order[] while a slower warp of the same
  // warpgroup was still waiting on the first, which its parity wait then never sees
  // (a hang). With a unit of one k-tile the hand-over came before any instruction
  // that waits for the whole warpgroup; under compute-sanitizer on the H200 such
  // launches never finished (docs/perf/2026-12-03-h200-decode-pingpong-sanitizer.md).
  // With every warp arriving, order[g] completes a phase only after all 4 warps of
  // the other warpgroup passed their own previous wait.
  __device__ __forceinline__ static void consume_tile(float (&acc)[ROWS][ACC], u32 stages, u32 full,
                                                      u32 empty, int k_tiles, int first,
                                                      u32 others_turn) {
    const bool warp_leader = threadIdx.x % 32 == 0;
    for (int kt = 0; kt < k_tiles; ++kt) {
      const int s = (first + kt) % STAGES;
      const u32 a = stages + s * STAGE_BYTES;
      const u32 b = a + A_BYTES;
      barrier_wait(full + 8 * s, ((first + kt) / STAGES) & 1);
      // This warp has seen its unit's last k-tile land: its share of the turn is over.
      if (kt == k_tiles - 1 && warp_leader) barrier_arrive(others_turn);
#pragma unroll
      for (int r = 0; r < ROWS; ++r) fence_accumulators(acc[r]);
      wgmma_fence();
      // Each descriptor is built once a k-tile and moved by one add a k step or row
      // group. wgmma reads descriptors from uniform registers; rebuilt per step,
      // ptxas made them in the thread's registers and moved each over (R2UR).
      const unsigned long long a_tile = stage_descriptor<A_K_MAJOR>(a);
      const unsigned long long b_tile = stage_descriptor<B_K_MAJOR>(b);
#pragma unroll
      for (int kk = 0; kk < K_STEPS; ++kk) {
        const unsigned long long desc_b = advance(b_tile, kk * B_STEP_BYTES);
#pragma unroll
        for (int r = 0; r < ROWS; ++r)  // row group r of the tile's rows
          Wgmma::run(acc[r], advance(a_tile, r * GROUP_BYTES + kk * A_STEP_BYTES), desc_b);
      }
      wgmma_commit();
#pragma unroll
      for (int r = 0; r < ROWS; ++r) fence_accumulators(acc[r]);
      wgmma_wait<1>();  // k-tile kt - 1's group is complete: its stage may be refilled
      if (kt > 0 && warp_leader) barrier_arrive(empty + 8 * ((first + kt - 1) % STAGES));
    }
    wgmma_wait<0>();
#pragma unroll
    for (int r = 0; r < ROWS; ++r) fence_accumulators(acc[r]);
    if (k_tiles > 0 && warp_leader) barrier_arrive(empty + 8 * ((first + k_tiles - 1) % STAGES));
  }

  template <typename Epilogue>
  __device__ __forceinline__ static void run_pingpong(const MatmulArgs& args,
                                                      const EpilogueOperands& ops,
                                                      const TensorMap& map_a,
                                                      const TensorMap& map_b,
                                                      const TensorMap& map_c) {
    static_assert(ROWS * ACC <= 128, "ping-pong: a warpgroup holds a whole tile, BM x BN <= 16384");
    extern __shared__ __align__(1024) unsigned char kjit_wgmma_shared[];
    const u32 base = mma::shared_address(kjit_wgmma_shared);
    // The stages, the eight consumer warps' slabs (1024-byte aligned), the mbarriers.
    const u32 stages = (base + 1023) & ~1023u;
    const u32 slabs = stages + STAGES * STAGE_BYTES;
    const u32 full = slabs + 8 * SLAB_BYTES;
    const u32 empty = full + 8 * STAGES;
    const u32 order = empty + 8 * STAGES;  // order[g]: warpgroup g may start its next tile
    if (threadIdx.x == 0) {
      prefetch_tensor_map(map_a);
      prefetch_tensor_map(map_b);
      if (args.c_tma) prefetch_tensor_map(map_c);
      for (int s = 0; s < STAGES; ++s) {
        barrier_init(full + 8 * s, 1);
        barrier_init(empty + 8 * s, 4);  // one warpgroup reads a stage: its 4 warps release it
      }
      barrier_init(order, 4);  // one arrive per warp of the other warpgroup (consume_tile)
      barrier_init(order + 8, 4);
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    const int tiles_m = (args.m + BM - 1) / BM, tiles_n = (args.n + BN - 1) / BN;
    const long long units = static_cast<long long>(tiles_m) * tiles_n * args.batch * args.splits;
    // -1: the producer warpgroup. Read through a shuffle (sm90::warpgroup_index), so
    // that ptxas knows it is warp-uniform: the turns' branches on it stay uniform and
    // so do the stage addresses and descriptors computed under them. (In run and
    // run_persistent the same made the 20-warp 256 x 128 kernels spill.)
    const int group = warpgroup_index() - 1;
    int first = 0;    // k-tiles through the pipeline so far, both warpgroups' (the ring is shared)
    if (group < 0) {  // the producer: every unit of the block, in order, as run_persistent
      asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(PRODUCER_REGISTERS) : "memory");
      if (threadIdx.x != 0) return;
      produce_units(args, map_a, map_b, stages, full, empty, tiles_m, tiles_n, units);
      return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(PINGPONG_CONSUMER_REGISTERS)
                 : "memory");
    unsigned char* slab =
        kjit_wgmma_shared + (slabs - base) + (static_cast<int>(threadIdx.x) / 32 - 4) * SLAB_BYTES;
    int turns = 0;  // waits on order[group] so far (their parity)
    long long i = 0;
    for (long long unit = blockIdx.x; unit < units; unit += gridDim.x, ++i) {
      const matmul::BlockWork w = unit_work(args, unit, tiles_m, tiles_n);
      const int k_tiles = (w.k_end - w.k_begin + BK - 1) / BK;
      if ((i & 1) != group) {  // the other warpgroup's tile: skip its k-tiles
        first += k_tiles;
        continue;
      }
      if (i > 0) barrier_wait(order + 8 * group, turns++ & 1);
      float acc[ROWS][ACC];
#pragma unroll
      for (int r = 0; r < ROWS; ++r)
#pragma unroll
        for (int j = 0; j < ACC; ++j) acc[r][j] = 0.0f;
      consume_tile(acc, stages, full, empty, k_tiles, first, order + 8 * (1 - group));
      first += k_tiles;
      const bool whole = (w.tile_m + 1) * BM <= args.m && (w.tile_n + 1) * BN <= args.n;
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        write_out<Epilogue>(args, ops, acc[r], w, r, slab, whole, map_c);
      }
    }
    if (args.c_tma || SHIFTED_WRITE_OUT) bulk_wait_all<0>();  // the slab's last reads
  }
};

}  // namespace sm90
}  // namespace kjit
