// Matmul lowering: a Problem (what: shapes, layouts, dtypes, alignment class,
// epilogue) and a Config (how: tiles, warps, stages, split-K) -> one KernelSource
// whose glue instantiates templates/matmul.cuh (tensor cores) or
// templates/matmul_simt.cuh (exact fp32). Pure C++: no CUDA headers here.
//
//   C = epilogue(alpha * op(A) * op(B) + beta * C0, extra operands)
//
// The epilogue arrives as CUDA text of a device function
//   __device__ __forceinline__ float NAME(float acc, float x1, float x2, ...)
// plus the list of its extra operands; the elementwise IR emits exactly that, and
// tests write such functions by hand.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kjit/compiler/ir/dtype.h"
#include "kjit/compiler/kernel_source.h"

namespace kjit::matmul {

// Input (and output) element types. TF32 is an input type only: f32 values in
// memory, multiplied on the tensor cores as TF32 (10-bit mantissa, fp32
// accumulation; the wgmma engine, sm_90) — what "allow TF32" means elsewhere. F32
// inputs take the exact SIMT path.
enum class DType { F32, F16, BF16, TF32 };
ir::DType to_ir(DType dtype);  // the stored type: TF32 is stored as f32
const char* to_string(DType dtype);
int dtype_bytes(DType dtype);
// "f32" | "f16" | "bf16" | "tf32"; anything else is a UserError naming the supported ones.
DType parse_dtype(const std::string& text);

// How an extra epilogue operand is indexed.
enum class OperandKind {
  RowVector,     // one value per output row: length M (per batch, or shared)
  ColumnVector,  // one value per output column: length N (e.g. a bias)
  Tensor,        // a full M x N tensor (e.g. a residual), with its own leading dimension
};
const char* to_string(OperandKind kind);

struct EpilogueOperand {
  std::string name;
  OperandKind kind = OperandKind::ColumnVector;
  DType dtype = DType::BF16;
};

struct Epilogue {
  std::string text;  // the expression as ir::canonical_text spells it ("gelu(acc + bias)"):
                     // comments and tuning keys
  std::string function_name;    // empty: the identity epilogue
  std::string function_source;  // the device function's CUDA text
  // The same function for a C of bf16 or f16, where it may spend less on precision
  // than the 16-bit result keeps (ir::ScalarMath::Rounded16); empty: function_source.
  std::string function_source_16bit;
  std::vector<EpilogueOperand> operands;  // in the function's argument order after acc
  static constexpr int kMaxOperands = 4;
};

struct Problem {
  int64_t m = 0, n = 0, k = 0, batch = 1;
  bool a_transposed = false;  // layout "t?": A is stored K x M
  bool b_transposed = false;  // layout "?t": B is stored N x K
  DType input = DType::BF16;
  DType output = DType::BF16;
  // Alignment class: true when A and B rows (and pointers, and batch strides) are
  // 16-byte aligned, so the tensor-core kernel reads them directly; false means
  // the padded path (copies into aligned scratch first).
  bool aligned = true;
  Epilogue epilogue;

  std::string layout() const;  // "nn", "nt", "tn", "tt"
  // What a kernel is specialized on (sizes are run-time arguments), canonical:
  // "layout=..,dtype=..,out=..,align=16|1[,epilogue=..,name:kind:dtype...]".
  // Generated source carries only this, so every size shares one binary.
  std::string kernel_class() const;
  // "m=..,n=..,k=..,batch=..," + kernel_class(): for logs and tuning keys.
  std::string to_string() const;
};

// Sets a_transposed / b_transposed from "nn" | "nt" | "tn" | "tt" (UserError otherwise).
void set_layout(Problem& problem, const std::string& layout);

struct Config {
  int bm = 128, bn = 128, bk = 32;
  int warps = 8;    // warps per block
  int warps_m = 2;  // of which along M (warps / warps_m along N)
  int stages = 3;   // pipeline depth (cp.async, or TMA for wgmma)
  int splitk = 1;   // K splits (1: none)
  // Block order: consecutive blocks walk `raster` tile rows down a column of tiles
  // before moving right, so that the blocks in flight share A and B tiles in L2.
  // A launch argument, like splitk: configs that differ only in these two share
  // one binary.
  int raster = 8;
  // The Hopper engine (templates/matmul_sm90.cuh, sm_90a): TMA copies and wgmma,
  // bk = 64, one producer warpgroup plus bm / 64 consumer warpgroups (so warps =
  // 4 * (bm / 64 + 1) and wm = bm / 64). false: mma.sync (templates/matmul.cuh).
  bool wgmma = false;
  // mma.sync only: operands of any alignment are read with narrow loads through
  // registers (NarrowLoader in templates/matmul.cuh) instead of being padded into
  // 16-byte-aligned scratch first; the alternative for misaligned problems.
  bool narrow = false;
  // wgmma only: the persistent schedule (WgmmaMatmul::run_persistent): one or a few
  // blocks per SM walk the output tiles, the producer loading the next tile while
  // the consumers write the last one out from registers. false: one tile per block.
  bool persistent = false;
  // wgmma only, with persistent: the ping-pong schedule (WgmmaMatmul::run_pingpong):
  // two consumer warpgroups take turns, each computing whole bm x bn tiles (bm x bn
  // <= 16384), one's write-out under the other's main loop. warps = 12.
  bool pingpong = false;
  // wgmma only, with persistent (not pingpong): stream-K (schedule=streamk). The
  // tiles of the last partial wave, when it would leave at least half the SMs idle,
  // are split along K into units that every SM shares, and summed deterministically
  // (WgmmaMatmul::finish_streamk). A launch argument: the kernel is persistent's.
  bool streamk = false;
  // wgmma only (pitch=line): operands the copy engine reads M/N-major (A of layout
  // "t?", B of "?n") whose rows are not a whole number of 128-byte lines apart (or
  // whose start is off a line) are first copied into scratch whose rows are, on the
  // padded path's copy kernel. The copy engine's boxes are one line wide; rows off
  // the line make every box row straddle two lines (on the H200, 4096^3 with B in
  // rows of 4104 ran 1.25x slower). A run-time choice: the kernel is the same.
  bool line_pitch = false;
  // wgmma only, schedule=tile, 16-bit inputs, A K-major (layout "n?"): swap=ab, the
  // product computed transposed, Cᵀ = Bᵀ Aᵀ. The kernel's tile rows (bm) walk N and
  // its columns (bn = 16, 32, ... 256) walk M, so a decode-like product (M = 16) runs
  // m64n16 wgmma on B's rows rather than m64nN on 16 rows of A padded to 64. C is
  // still written in its own rows (the tile is staged transposed). Stages 2 to 12.
  bool swap = false;

  // "bm=128,bn=128,bk=32,warps=8,wm=2,stages=3,splitk=1" (+ ",raster=N" when not
  // 8, ",mma=wgmma", ",schedule=persistent|pingpong|streamk", ",load=narrow",
  // ",pitch=line" or ",swap=ab")
  std::string to_string() const;
  // The part of to_string() the kernel's source depends on (without splitk, raster
  // and pitch, which are launch arguments).
  std::string source_text() const;
  // Parses "key=value,..." over a default Config; keys: bm bn bk warps wm stages splitk
  // raster mma (sync | wgmma) schedule (tile | persistent | pingpong | streamk) load (async |
  // narrow) pitch (any | line) swap (none | ab). When
  // warps is given without wm, wm is chosen to make warp tiles square-ish; with mma=wgmma, bk,
  // warps and wm follow from bm. Unknown keys and malformed values are UserErrors naming the valid
  // keys.
  static Config parse(const std::string& text);
  int threads() const { return warps * 32; }
  bool operator==(const Config&) const = default;
};

// Stream-K's last wave (schedule=streamk): `tiles` output tiles (every batch's) on
// `blocks` persistent blocks, `k_tiles` k-tiles a tile, at most `most` splits (the
// config's splitk). The last wave's tiles % blocks tiles are split
// min(most, blocks / that, k_tiles / 2) ways, every split at least two k-tiles; none
// (splits = 1) when the tiles make one wave or less, the last wave is full, or
// fewer than 2 splits fit (the last wave already fills over half the blocks).
struct StreamK {
  int64_t tiles = 0;  // split tiles, the last of the walk
  int splits = 1;     // units per split tile
};
StreamK streamk_split(int64_t tiles, int64_t blocks, int64_t k_tiles, int most);

// The one tile shape of the exact fp32 SIMT path.
Config simt_config(int splitk = 1);

// A wgmma config: bm x bn x bk with `stages` TMA stages; bk = wgmma_bk(input) (64
// for 16-bit inputs, 32 for tf32), warps and wm derived.
Config wgmma_config(int bm, int bn, int stages, int splitk = 1, DType input = DType::BF16,
                    bool pingpong = false);
// The wgmma engine's k-tile: one 128-byte swizzle line per row.
int wgmma_bk(DType input);

// The warp split along M that makes the warp tile closest to square.
int square_warps_m(int bm, int bn, int warps);

// Row passes in which the tensor-core epilogue stages the fp32 BM x BN tile
// through shared memory: the fewest that split each warp's mma rows (bm / wm / 16)
// evenly and fit one pass, (bm / passes) x (bn + 8) floats, into the pipeline's
// buffers (e.g. 128 x 256 with 4 stages: 96 KiB of buffers, 2 passes of 66 KiB).
// 1 for the SIMT path (no staging).
int epilogue_passes(const Problem& problem, const Config& config);

// Whether the launch first copies 16-bit operands into scratch with 128-byte rows
// (the padded path of cp.async and TMA configs): misaligned ones (f32, tf32, staged
// instead, and narrow loads read them in place), and with pitch=line the M/N-major
// ones whose rows are off the 128-byte lines.
bool pads_operands(const Problem& problem, const Config& config);
// Whether that copy also rounds K up to whole k-tiles with zeros: on the padded path
// of a misaligned problem (an aligned one keeps its K, its last k-tile masked).
bool pads_k(const Problem& problem, const Config& config);
// Bytes of one L2 line: the width of the copy engine's 128-byte-swizzled boxes, and
// the row pitch the padded path gives its scratch operands.
constexpr int64_t kLineBytes = 128;
// On the padded path, whether a stored operand (its pointer, leading dimension and
// batch stride in elements; mn_major: A of "t?", B of "?n") is read in place rather
// than copied: 16-byte-aligned pointer, rows and batch stride, K not padded, and with
// pitch=line an M/N-major operand's pointer, rows and batch stride on 128-byte lines.
// The runtime asks with the launch's tensors, the tuner's model with packed ones.
bool reads_in_place(const Problem& problem, const Config& config, int64_t pointer, int64_t ld,
                    int64_t batch_stride, bool mn_major);

// Split-K on the wgmma engine's one-tile-per-block grid: a tile's splits are one
// thread-block cluster (at most this many blocks, the portable cluster size) and sum
// each other's partials through distributed shared memory. More splits, and the
// other engines and schedules, go through an fp32 workspace in global memory.
constexpr int kMaxClusterSplits = 8;
bool splits_in_cluster(const Config& config, int64_t splits);

// Dynamic shared memory the kernel needs (0 for the SIMT path's static tiles): the
// pipeline's buffers, or one epilogue pass if that is larger (only when even a
// single mma row per warp does not fit the buffers).
int shared_bytes(const Problem& problem, const Config& config);

// The problem's own constraints, whatever the config (shapes >= 1 and within 32
// bits, the epilogue's operands, dtypes): UserError with a hint.
void validate_problem(const Problem& problem);

// Problem and config constraints that hold on every device (shapes >= 1, tile
// divisibility, supported dtypes, epilogue operand count): UserError with a hint.
void validate(const Problem& problem, const Config& config);

// The tile kernel: glue that instantiates templates/matmul.cuh (or matmul_simt.cuh
// for f32). Byte-identical for equal inputs; sizes are kernel arguments.
KernelSource lower(const Problem& problem, const Config& config);

// The padding kernel of the misaligned path for 16-bit `dtype`: (PadJob job0,
// PadJob job1) with grid (blocks, batch, jobs); see kjit::matmul::PadJob in
// templates/matmul.cuh.
KernelSource lower_pad(DType dtype);

// The staging kernel of tf32 inputs: (StageJob job0, StageJob job1, int jobs) with
// grid (K / 32, rows / 32, batch x jobs), 32 x 8 threads; copies an f32 operand into
// K-major scratch with 16-byte rows, transposing M/N-major ones (see
// kjit::matmul::StageJob in templates/matmul.cuh).
KernelSource lower_stage_k_major();

}  // namespace kjit::matmul
