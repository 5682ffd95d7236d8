// Attention score and mask modifiers written in kjit's elementwise IR (what
// FlexAttention calls score_mod and mask_mod), lowered to the device functions an
// attention kernel calls per score, with fp64 twins for checking:
//
//   score_mod_from_ir("tanh(s / 50) * 50")                          soft-capping
//   score_mod_from_ir("slope:f32[heads]; s - slope * abs(q_idx - kv_idx)")  ALiBi
//   mask_mod_from_ir("(kv_idx <= q_idx) * (q_idx - kv_idx < 256)")  a sliding window
//
// Names a modifier reads: `s`, the scaled score (f32; score modifiers only),
// `q_idx` and `kv_idx`, the query's and key's positions in their sequences, and
// `head`, the query head (i32). Any other name is an extra operand, indexed by its
// declared shape: [heads] per query head (the default: undeclared names are
// f32[heads]), [q] per query position, [kv] per key position; f32, f16, bf16 or i32.
// A mask keeps the scores where its value is nonzero (a comparison, or products of
// comparisons for "and").
//
// The score modifier comes with its derivative with respect to s
// (compiler/passes/derivative.h): the backward pass scales dS by mod'(s) before it
// forms dQ and dK. compiler/lowering/attention.cpp wraps the functions in the
// kernels' MOD policy (templates/attention.cuh, NoModifiers).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kjit/compiler/ir/dtype.h"

namespace kjit::attention {

enum class ModifierOperandKind { PerHead, PerQuery, PerKey };
const char* to_string(ModifierOperandKind kind);

struct ModifierOperand {
  std::string name;
  ModifierOperandKind kind;
  ir::DType dtype;
};

// The positions one score is evaluated at, and the extra operands' values there
// (in `operands` order), for the fp64 twins.
struct ScorePoint {
  double s = 0;  // the scaled score (score modifiers)
  int64_t q_idx = 0, kv_idx = 0, head = 0;
  std::vector<double> operands;
};

// A tile of scores: queries [q_lo, q_hi] by keys [kv_lo, kv_hi] of one head, and
// the per-head operands' values there (in `operands` order; others are ignored).
struct TileBox {
  int64_t q_lo = 0, q_hi = 0, kv_lo = 0, kv_hi = 0, head = 0;
  std::vector<double> operands;
};
// What a mask says of a tile (templates/interval.cuh): it keeps none of its scores,
// some (or cannot tell), or all.
enum class TileState { None = 0, Some = 1, All = 2 };

struct Modifier {
  std::string text;       // as written
  std::string canonical;  // the optimized graph's text form: equal modifiers, equal text
  std::string key;        // a short stable hash of `canonical`, for kernel classes
  std::vector<ModifierOperand> operands;
  // Device functions over (s,) q_idx, kv_idx, head and the operands' values, in
  // that order: kjit_score_mod and kjit_score_mod_grad (float), or kjit_mask_mod
  // (bool). `source` holds all of them.
  std::string source;
  // A score modifier that reads the positions only as q_idx - kv_idx (ALiBi), with
  // arithmetic on it that is exact in float below 2^24, and no operand per position:
  // `source` also holds kjit_score_mod_relative(s, q_minus_kv as a float, head,
  // operands), the same function. The forward kernels call it for problems whose
  // sequences are shorter than 2^24 (compiler/lowering/attention.cpp): the difference
  // is formed once per tile, and a constant added per score.
  bool relative = false;
  // A score modifier whose derivative with respect to s is a constant (1 for s plus a
  // bias, as ALiBi): the backward kernels keep no mod'(s) per score, which frees the
  // registers the edge tests of the built-in masks need in a loop of their own.
  bool constant_grad = false;
  bool reads_head = false;  // the value depends on `head` (not counting per-head operands)
  std::function<double(const ScorePoint&)> reference;  // the value (a mask: 1 or 0)
  std::function<double(const ScorePoint&)> gradient;   // d value / ds (score modifiers)
  // Mask modifiers: kjit_mask_tile(q_lo, q_hi, kv_lo, kv_hi, head, the per-head
  // operands' values), the mask evaluated over a whole tile with interval arithmetic
  // (templates/interval.cuh), 0 / 1 / 2 as TileState: the kernels skip the tiles it
  // keeps nothing of and test no score of the tiles it keeps whole. In `source`; and
  // the same analysis on the host, for the tests.
  std::function<TileState(const TileBox&)> tile;
};

// Integers below 2^24 are whole numbers in f32, and so is every sum, difference,
// product, min and max of them that stays below it: where the relative form of a
// score modifier (Modifier::relative) is exact.
constexpr int64_t kExactInFloat = int64_t{1} << 24;

// At most this many extra operands per modifier, and per kernel (both modifiers:
// AttentionArgs::modifier_operands in templates/attention.cuh).
constexpr int kMaxModifierOperands = 4;
constexpr int kMaxKernelModifierOperands = 8;

// UserErrors (naming the text and the rule) when the text does not parse, computes
// other than one value, gives a score modifier a non-floating result, lets a mask
// read s, or declares an operand of another shape or dtype than listed above.
Modifier score_mod_from_ir(const std::string& text);
Modifier mask_mod_from_ir(const std::string& text);

// The same, parsed once per process and text (the kernels' classes and sources ask
// for them often): shared, immutable. Thread-safe.
std::shared_ptr<const Modifier> cached_score_mod(const std::string& text);
std::shared_ptr<const Modifier> cached_mask_mod(const std::string& text);

}  // namespace kjit::attention
