#include "kjit/compiler/lowering/attention.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <utility>

#include "kjit/compiler/lowering/wgmma.h"
#include "kjit/support/error.h"
#include "kjit/support/hash.h"
#include "kjit/support/key_values.h"

namespace kjit::attention {

namespace {

constexpr int64_t kMax32 = std::numeric_limits<int32_t>::max();
// Sequence lengths and packed token totals: the kernels count tiles and tile ends in
// 32-bit ints ((seq_k + BN - 1) / BN, row0 + BM, key0 + BN, a packed offset plus a
// row), with tiles of up to 256. Within 1023 of 2^31 they wrapped: a tile count came
// out negative, no key was read, and O was silently 0 (as for a row that sees no key).
constexpr int64_t kMaxLength = kMax32 - 1023;

const char* dtype_name(ir::DType dtype) {
  return dtype == ir::DType::F16 ? "f16" : "bf16";
}

std::string window_text(int64_t left, int64_t right) {
  auto side = [](int64_t v) { return v < 0 ? std::string("inf") : std::to_string(v); };
  return side(left) + ":" + side(right);
}

}  // namespace

void Problem::set_lengths(const std::vector<int64_t>& q, const std::vector<int64_t>& k) {
  const std::vector<int64_t>& keys = k.empty() ? q : k;
  if (q.empty() || keys.size() != q.size())
    throw UserError(
        fmt::format("packed attention needs one query and one key length per "
                    "sequence; got {} and {}",
                    q.size(), keys.size()));
  auto offsets = [](const std::vector<int64_t>& lengths, const char* what) {
    std::vector<int64_t> out = {0};
    for (size_t i = 0; i < lengths.size(); ++i) {
      if (lengths[i] < 1 || lengths[i] > kMaxLength)
        throw UserError(
            fmt::format("packed attention: {} length {} of sequence {} is not in "
                        "[1, {}] (the kernels' 32-bit tile arithmetic)",
                        what, lengths[i], i, kMaxLength));
      out.push_back(out.back() + lengths[i]);
    }
    return out;
  };
  cu_seqlens_q = offsets(q, "query");
  cu_seqlens_k = offsets(keys, "key");
  batch = static_cast<int64_t>(q.size());
  seq_q = *std::max_element(q.begin(), q.end());
  seq_k = *std::max_element(keys.begin(), keys.end());
}

int64_t Problem::total_q() const {
  return packed() ? cu_seqlens_q.back() : batch * seq_q;
}
int64_t Problem::total_k() const {
  return packed() ? cu_seqlens_k.back() : batch * seq_k;
}
int64_t Problem::seq_q_of(int64_t b) const {
  return packed() ? cu_seqlens_q[b + 1] - cu_seqlens_q[b] : seq_q;
}
int64_t Problem::seq_k_of(int64_t b) const {
  return packed() ? cu_seqlens_k[b + 1] - cu_seqlens_k[b] : seq_k;
}

double Problem::softmax_scale() const {
  return scale > 0 ? scale : 1.0 / std::sqrt(static_cast<double>(head_dim));
}

std::vector<ModifierOperand> Problem::modifier_operands() const {
  std::vector<ModifierOperand> out;
  if (!score_mod.empty()) out = cached_score_mod(score_mod)->operands;
  if (!mask_mod.empty())
    for (const ModifierOperand& o : cached_mask_mod(mask_mod)->operands) out.push_back(o);
  return out;
}

std::string Problem::kernel_class() const {
  std::string modifiers;
  if (!score_mod.empty()) modifiers += ",score_mod=" + cached_score_mod(score_mod)->key;
  if (!mask_mod.empty()) modifiers += ",mask_mod=" + cached_mask_mod(mask_mod)->key;
  return fmt::format("dtype={},d={}{}{}", dtype_name(dtype), head_dim,
                     backward ? ",pass=backward" : "", modifiers);
}

std::string Problem::to_string() const {
  std::string packed_text;
  if (packed()) {
    // "1+7+300", a run of equal lengths as "320x39".
    auto lengths = [](const std::vector<int64_t>& cu) {
      std::string out;
      for (size_t i = 1; i < cu.size();) {
        const int64_t length = cu[i] - cu[i - 1];
        size_t run = 1;
        while (i + run < cu.size() && cu[i + run] - cu[i + run - 1] == length) ++run;
        out += (out.empty() ? "" : "+") + std::to_string(length) +
               (run > 1 ? "x" + std::to_string(run) : "");
        i += run;
      }
      return out;
    };
    packed_text = "packed=q:" + lengths(cu_seqlens_q) + "/k:" + lengths(cu_seqlens_k) + ",";
  }
  return fmt::format(
             "batch={},heads={},kv_heads={},seq_q={},seq_k={},causal={},window={},scale={},", batch,
             heads, kv_heads, seq_q, seq_k, causal ? 1 : 0, window_text(window_left, window_right),
             softmax_scale()) +
         packed_text + kernel_class() + (backward && deterministic ? ",deterministic=1" : "");
}

std::string Config::to_string() const {
  if (wgmma)
    return fmt::format("mma=wgmma,bm={},bn={},stages={}{}{}{}", bm, bn, stages,
                       pingpong ? ",pingpong=1" : "", persistent ? ",persistent=1" : "",
                       atomic_dq ? ",dq=atomic" : "");
  return fmt::format("bm={},bn={},stages={},warp_rows={}", bm, bn, stages, warp_rows);
}

Config Config::parse(const std::string& text) {
  static const char* kValidKeys =
      "valid keys: mma, bm, bn, stages, warp_rows, pingpong, persistent, dq";
  Config config;
  bool bm_given = false;
  for (const auto& [key, value] :
       split_key_values(text, "attention config",
                        std::string("write e.g. bm=64,bn=64,stages=2; ") + kValidKeys)) {
    if (key == "mma") {
      if (value != "sync" && value != "wgmma")
        throw UserError("attention config mma=" + value + " is not an engine",
                        "mma=sync (mma.sync, sm_80+) or mma=wgmma (TMA + wgmma, sm_90)");
      config.wgmma = value == "wgmma";
      continue;
    }
    if (key == "pingpong") {
      if (value != "0" && value != "1")
        throw UserError("attention config pingpong=" + value + " is not 0 or 1");
      config.pingpong = value == "1";
      continue;
    }
    if (key == "persistent") {
      if (value != "0" && value != "1")
        throw UserError("attention config persistent=" + value + " is not 0 or 1");
      config.persistent = value == "1";
      continue;
    }
    if (key == "dq") {
      if (value != "separate" && value != "atomic")
        throw UserError("attention config dq=" + value + " is not a dQ mode",
                        "dq=separate (its own kernel, the same bits every run) or dq=atomic "
                        "(summed by the dK/dV kernel with atomics)");
      config.atomic_dq = value == "atomic";
      continue;
    }
    // The integer keys, and the field each sets; any other key is unknown, whatever
    // its value.
    int* field = key == "bm"          ? &config.bm
                 : key == "bn"        ? &config.bn
                 : key == "stages"    ? &config.stages
                 : key == "warp_rows" ? &config.warp_rows
                                      : nullptr;
    if (field == nullptr) throw UserError("attention config has no key '" + key + "'", kValidKeys);
    char* end = nullptr;
    const long parsed = std::strtol(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0' || parsed < 1 || parsed > 1 << 20)
      throw UserError(
          "attention config value '" + value + "' for '" + key + "' is not a positive integer",
          "e.g. bm=64");
    *field = static_cast<int>(parsed);
    bm_given |= field == &config.bm;
  }
  if (config.wgmma && !bm_given) config.bm = 128;
  return config;
}

void validate_problem(const Problem& p) {
  // The modifiers parse (UserErrors naming the text); both together fit the kernels'
  // operand slots by construction.
  static_assert(2 * kMaxModifierOperands <= kMaxKernelModifierOperands);
  p.modifier_operands();
  // Batch and heads index a grid dimension (at most 65535); lengths are 32-bit.
  auto positive = [](const char* name, int64_t v, int64_t most) {
    if (v < 1 || v > most)
      throw UserError(fmt::format("attention {} is {}; it must be in [1, {}]{}", name, v, most,
                                  most == kMaxBatch    ? " (a grid dimension)"
                                  : most == kMaxLength ? " (the kernels' 32-bit tile arithmetic)"
                                                       : ""),
                      most == kMaxBatch ? "fold batch into heads, or split the call" : "");
  };
  positive("batch", p.batch, kMaxBatch);
  positive("heads", p.heads, kMaxBatch);
  positive("kv_heads", p.kv_heads, kMaxBatch);
  positive("seq_q", p.seq_q, kMaxLength);
  positive("seq_k", p.seq_k, kMaxLength);
  if (p.heads % p.kv_heads != 0)
    throw UserError(
        fmt::format("attention kv_heads {} does not divide heads {}", p.kv_heads, p.heads),
        "grouped-query attention shares each K/V head among heads / kv_heads "
        "query heads; kv_heads = heads is plain multi-head attention");
  if (p.head_dim != 64 && p.head_dim != 96 && p.head_dim != 128 && p.head_dim != 256)
    throw UserError(fmt::format("attention head dim {} is not supported", p.head_dim),
                    "the head dims are 64, 96, 128 and 256");
  if (p.dtype != ir::DType::BF16 && p.dtype != ir::DType::F16)
    throw UserError(std::string("attention dtype ") + ir::to_string(p.dtype) + " is not supported",
                    "the dtypes are bf16 and f16 (fp32 accumulation and softmax)");
  if (p.window_left < -1 || p.window_right < -1 || p.window_left > kMax32 ||
      p.window_right > kMax32)
    throw UserError(fmt::format("attention window {}:{} is invalid", p.window_left, p.window_right),
                    fmt::format("each side is a number of keys in [0, {}], or -1 for unbounded "
                                "(the CLI's 'inf')",
                                kMax32));
  // causal is the window's right side at 0: a right side beyond it would be dropped
  // (right()), and the store would key the problem by a window it does not run.
  if (p.causal && p.window_right > 0)
    throw UserError(fmt::format("attention causal with window {}:{}: the window's right side "
                                "is not 0",
                                p.window_left, p.window_right),
                    "give one of them (causal is the window -1:0, the CLI's inf:0)");
  // A sliding window's edges are found as a row plus the window in 32-bit ints (the
  // right side is at most S_q - 1 and the left S_k - 1 once unbounded sides are -1):
  // S_q + S_k must fit.
  const bool bounded_side =
      (p.window_left >= 0 && p.window_left < p.seq_k) || (p.right() > 0 && p.right() < p.seq_q);
  if (bounded_side && p.seq_q + p.seq_k > kMaxLength)
    throw UserError(
        fmt::format("attention with the window {}:{}: seq_q + seq_k is {}; at most {} "
                    "(the kernels' 32-bit window arithmetic)",
                    p.window_left, p.window_right, p.seq_q + p.seq_k, kMaxLength));
  if (p.packed()) {
    auto check_offsets = [&](const std::vector<int64_t>& cu, const char* name, int64_t longest) {
      if (static_cast<int64_t>(cu.size()) != p.batch + 1)
        throw UserError(fmt::format("packed attention: {} has {} offsets for {} sequences", name,
                                    cu.size(), p.batch),
                        "one more offset than sequences: 0, then each sequence's end");
      if (cu.front() != 0)
        throw UserError(fmt::format("packed attention: {}[0] is {}, not 0", name, cu.front()));
      int64_t most = 0;
      for (size_t i = 1; i < cu.size(); ++i) {
        if (cu[i] < cu[i - 1])
          throw UserError(fmt::format("packed attention: {} decreases at {} ({} after {})", name, i,
                                      cu[i], cu[i - 1]),
                          "offsets are cumulative sequence lengths: never decreasing");
        most = std::max(most, cu[i] - cu[i - 1]);
      }
      if (cu.back() > kMaxLength)
        throw UserError(fmt::format(
            "packed attention: {} tokens in all is over {} (the kernels' 32-bit tile arithmetic)",
            cu.back(), kMaxLength));
      if (most != longest)
        throw UserError(fmt::format("packed attention: the longest sequence in {} has {} tokens "
                                    "but the problem says {}",
                                    name, most, longest),
                        "Problem::set_lengths() sets them together");
    };
    if (p.cu_seqlens_k.empty())
      throw UserError("packed attention: cu_seqlens_k is missing",
                      "give key offsets too (the same as the queries' for self-attention)");
    check_offsets(p.cu_seqlens_q, "cu_seqlens_q", p.seq_q);
    check_offsets(p.cu_seqlens_k, "cu_seqlens_k", p.seq_k);
  } else if (!p.cu_seqlens_k.empty()) {
    throw UserError("packed attention: cu_seqlens_k given without cu_seqlens_q");
  }
  // The kernels take the scale, and the scale times log2 e, as f32: past these
  // bounds it would arrive as infinity (NaN scores) or as 0 (a uniform softmax).
  constexpr double kMinScale = std::numeric_limits<float>::min();
  constexpr double kMaxScale = std::numeric_limits<float>::max() / 2;
  if (!(std::isfinite(p.scale) && p.scale >= 0))
    throw UserError(fmt::format("attention scale {} is not a positive finite number", p.scale),
                    "0 means 1 / sqrt(head dim)");
  if (p.scale != 0 && (p.scale < kMinScale || p.scale > kMaxScale))
    throw UserError(fmt::format("attention scale {} is outside [{:g}, {:g}], the f32 range the "
                                "kernels compute in",
                                p.scale, kMinScale, kMaxScale),
                    "0 means 1 / sqrt(head dim)");
  // Every byte offset the kernels form is 64-bit: each tensor must fit, and all of
  // them together (one address space): Q, O (and dO, dQ), K, V (and dK, dV), the LSE
  // and the backward's f32 workspace (D, LSE · log2 e and the dQ sums per query row).
  int64_t total = 0;
  auto count = [&](const char* what, int64_t tokens, int64_t heads, int64_t row_bytes, int copies) {
    int64_t bytes = 0;
    if (__builtin_mul_overflow(tokens, heads, &bytes) ||
        __builtin_mul_overflow(bytes, row_bytes, &bytes) ||
        __builtin_mul_overflow(bytes, static_cast<int64_t>(copies), &bytes) ||
        __builtin_add_overflow(total, bytes, &total))
      throw UserError(
          fmt::format(
              "attention with {} query and {} key tokens, {} heads ({} K/V heads) of head dim {} "
              "holds more than 2^63 bytes ({} and what comes before it)",
              p.total_q(), p.total_k(), p.heads, p.kv_heads, p.head_dim, what),
          "offsets are 64-bit byte counts; split the batch or the heads into several calls");
  };
  const int64_t element = 2;  // bf16 and f16
  count("Q, O, dO and dQ", p.total_q(), p.heads, p.head_dim * element, 4);
  count("K, V, dK and dV", p.total_k(), p.kv_heads, p.head_dim * element, 4);
  count("the LSE and the backward's f32 workspace", p.total_q(), p.heads, 4 + 8 + 4 * p.head_dim,
        1);
}

void validate(const Problem& p, const Config& c) {
  validate_problem(p);
  validate_config(p, c);
}

void validate_config(const Problem& p, const Config& c) {
  if (p.backward) {
    if (c.persistent)
      throw UserError("attention backward config " + c.to_string() + " asks for persistent",
                      "the persistent schedule is the forward pass's (mma=wgmma)");
    if (c.pingpong && !c.wgmma)
      throw UserError("attention backward config " + c.to_string() + " asks for pingpong",
                      "ping-pong applies to mma=wgmma only");
    if (c.atomic_dq) {
      if (!c.wgmma || c.bm != 64 || c.pingpong)
        throw UserError("attention backward config " + c.to_string() + " asks for dq=atomic",
                        "the atomic dQ takes mma=wgmma,bm=64 without ping-pong");
      if (p.deterministic)
        throw UserError("attention backward config dq=atomic for a deterministic problem",
                        "the atomic dQ's sums vary in their last bits from run to run; "
                        "dq=separate gives the same bits every run");
    }
    if (c.wgmma) {
      if (p.head_dim != 64 && p.head_dim != 128)
        throw UserError(
            fmt::format("attention backward config mma=wgmma does not take head dim {}",
                        p.head_dim),
            "the wgmma engine takes head dims 64 and 128; mma=sync takes 64, 96, 128 and 256");
      for (const auto& [name, v] : {std::pair{"bm", c.bm}, std::pair{"bn", c.bn}})
        if (v != 64 && v != 128)
          throw UserError(
              fmt::format("attention backward config mma=wgmma,{}={} is not 64 or 128", name, v));
      if (c.stages < 2 || c.stages > 3)
        throw UserError(
            fmt::format("attention backward config mma=wgmma,stages={} is not 2 or 3", c.stages));
      return;
    }
    if (c.warp_rows != 16)
      throw UserError(fmt::format("attention backward config warp_rows={} is not 16", c.warp_rows),
                      "each warp of the backward kernels owns 16 rows (queries or keys)");
    for (const auto& [name, v] : {std::pair{"bm", c.bm}, std::pair{"bn", c.bn}})
      if (v != 16 && v != 32 && v != 64 && v != 128)
        throw UserError(
            fmt::format("attention backward config {}={} is not 16, 32, 64 or 128", name, v));
    if (c.stages < 2 || c.stages > 3)
      throw UserError(fmt::format("attention backward config stages={} is not 2 or 3", c.stages));
    return;
  }
  if (c.atomic_dq) throw UserError("attention config dq=atomic applies to the backward pass only");
  if (c.wgmma) {
    if (p.head_dim != 64 && p.head_dim != 128)
      throw UserError(
          fmt::format("attention config mma=wgmma does not take head dim {}", p.head_dim),
          "the wgmma engine takes head dims 64 and 128; mma=sync takes 64, 96, 128 "
          "and 256");
    if (c.bm != 128)
      throw UserError(
          fmt::format("attention config mma=wgmma,bm={}: bm is 128 (two consumer "
                      "warpgroups of 64 rows)",
                      c.bm));
    if (c.bn != 64 && c.bn != 128)
      throw UserError(fmt::format("attention config mma=wgmma,bn={} is not 64 or 128", c.bn));
    if (c.warp_rows != 16)
      throw UserError("attention config warp_rows applies to mma=sync only",
                      "a wgmma warpgroup owns 64 rows, 16 per warp");
    // The kernel numbers the items (pairs of query tiles x heads x batch, two items
    // a pair) and steps over them by the grid in 32 bits.
    const int64_t items = ((p.seq_q + c.bm - 1) / c.bm + 1) / 2 * 2 * p.heads * p.batch;
    if (c.persistent && items > int64_t{1} << 30)
      throw UserError(
          fmt::format("attention config persistent=1: {} work items (query tiles x heads x "
                      "batch) are over 2^30",
                      items),
          "persistent=0 launches a block per item");
  } else if (c.pingpong || c.persistent) {
    throw UserError(fmt::format("attention config {} applies to mma=wgmma only",
                                c.pingpong ? "pingpong" : "persistent"),
                    "the mma.sync engine's warps are not specialized");
  } else {
    if (c.warp_rows != 16 && c.warp_rows != 32)
      throw UserError(fmt::format("attention config warp_rows={} is not 16 or 32", c.warp_rows),
                      "each warp owns one or two tiles of 16 query rows");
    if (c.bm < c.warp_rows || c.bm > 128 || c.bm % c.warp_rows != 0)
      throw UserError(fmt::format("attention config bm={} is not a multiple of warp_rows={} in "
                                  "[{}, 128]",
                                  c.bm, c.warp_rows, c.warp_rows),
                      "bm = warp_rows x warps");
    if (c.bn != 16 && c.bn != 32 && c.bn != 64 && c.bn != 128)
      throw UserError(fmt::format("attention config bn={} is not 16, 32, 64 or 128", c.bn));
  }
  if (c.stages < 2 || c.stages > 4)
    throw UserError(fmt::format("attention config stages={} is not in [2, 4]", c.stages));
}

namespace {

// Tile analyses one count of a mask modifier's pairs may spend (about a second): a
// mask whose analysis cannot decide big boxes would otherwise be split down to every
// pair.
constexpr int64_t kPairCountBudget = int64_t{1} << 21;

// The (query, key) pairs of one sequence and head that the built-in masks (keys
// [i + offset - left, i + offset + right] of query i; < 0: unbounded) and the mask
// modifier both keep. A box of queries x keys is counted whole where both say None
// or All of it (the modifier by its tile analysis, as the kernels skip tiles), split
// in half along its longer side otherwise, and a single pair is evaluated.
// `budget` counts the analyses; past it, `spent` is set and the count is void.
struct KeptPairs {
  const Modifier& mask;
  int64_t left, right, offset, head;
  int64_t budget = kPairCountBudget;
  bool spent = false;

  TileState window(const TileBox& b) const {
    if ((right >= 0 && b.kv_lo > b.q_hi + offset + right) ||
        (left >= 0 && b.kv_hi < b.q_lo + offset - left))
      return TileState::None;
    if ((right < 0 || b.kv_hi <= b.q_lo + offset + right) &&
        (left < 0 || b.kv_lo >= b.q_hi + offset - left))
      return TileState::All;
    return TileState::Some;
  }

  double count(const TileBox& b) {
    if (spent || --budget < 0) {
      spent = true;
      return 0;
    }
    const TileState w = window(b);
    if (w == TileState::None) return 0;
    const TileState m = mask.tile(b);
    if (m == TileState::None) return 0;
    const double area =
        static_cast<double>(b.q_hi - b.q_lo + 1) * static_cast<double>(b.kv_hi - b.kv_lo + 1);
    if (w == TileState::All && m == TileState::All) return area;
    if (area == 1) {  // one pair: the window is exact there; the mask's value decides
      ScorePoint point;
      point.q_idx = b.q_lo, point.kv_idx = b.kv_lo, point.head = head;
      return mask.reference(point) != 0 ? 1 : 0;
    }
    TileBox first = b, second = b;
    if (b.q_hi - b.q_lo >= b.kv_hi - b.kv_lo) {
      first.q_hi = b.q_lo + (b.q_hi - b.q_lo) / 2;
      second.q_lo = first.q_hi + 1;
    } else {
      first.kv_hi = b.kv_lo + (b.kv_hi - b.kv_lo) / 2;
      second.kv_lo = first.kv_hi + 1;
    }
    return count(first) + count(second);
  }
};

// The pairs of every sequence and head the mask modifier and the built-in masks keep
// (per head only when the modifier reads `head`), or nullopt where they cannot be
// counted: the modifier reads operands (their values come with the launch), or its
// analysis spends the budget. Remembered per problem: the tuner asks per config.
std::optional<double> masked_pairs(const Problem& p) {
  const std::shared_ptr<const Modifier> m = cached_mask_mod(p.mask_mod);
  if (!m->operands.empty()) return std::nullopt;
  static std::mutex mutex;
  static std::map<std::string, std::optional<double>> counted;
  const std::string key = p.to_string();
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = counted.find(key); it != counted.end()) return it->second;
  }
  std::optional<double> pairs = 0.0;
  int64_t budget = kPairCountBudget;
  const int64_t heads = m->reads_head ? p.heads : 1;
  for (int64_t b = 0; b < (p.packed() ? p.batch : 1) && pairs; ++b) {
    const int64_t seq_q = p.seq_q_of(b), seq_k = p.seq_k_of(b);
    for (int64_t head = 0; head < heads && pairs; ++head) {
      KeptPairs counter{*m, p.window_left, p.right(), seq_k - seq_q, head, budget};
      TileBox all;
      all.q_hi = seq_q - 1, all.kv_hi = seq_k - 1, all.head = head;
      const double n = counter.count(all);
      budget = counter.budget;
      if (counter.spent)
        pairs = std::nullopt;
      else
        *pairs += n;
    }
  }
  if (pairs && !m->reads_head) *pairs *= static_cast<double>(p.heads);
  std::lock_guard<std::mutex> lock(mutex);
  counted.emplace(key, pairs);
  return pairs;
}

}  // namespace

double forward_flops(const Problem& p) {
  const double batches = p.packed() ? 1.0 : static_cast<double>(p.batch);
  if (!p.mask_mod.empty()) {
    if (const std::optional<double> pairs = masked_pairs(p))
      return 4.0 * batches * *pairs * static_cast<double>(p.head_dim);
  }
  const int64_t left = p.window_left, right = p.right();
  double pairs = 0;
  for (int64_t b = 0; b < (p.packed() ? p.batch : 1); ++b) {
    const int64_t seq_q = p.seq_q_of(b), seq_k = p.seq_k_of(b);
    if (left < 0 && right < 0) {
      pairs += static_cast<double>(seq_q) * static_cast<double>(seq_k);
    } else if (left < 0 && right == 0 && seq_q == seq_k) {
      pairs += 0.5 * static_cast<double>(seq_q) * static_cast<double>(seq_k);  // causal: half
    } else {
      // Row i sees keys [i + offset - left, i + offset + right] within [0, S_k).
      const int64_t offset = seq_k - seq_q;
      for (int64_t i = 0; i < seq_q; ++i) {
        const int64_t lo = left < 0 ? 0 : std::max<int64_t>(0, i + offset - left);
        const int64_t hi = right < 0 ? seq_k - 1 : std::min(seq_k - 1, i + offset + right);
        if (hi >= lo) pairs += static_cast<double>(hi - lo + 1);
      }
    }
  }
  return 4.0 * batches * static_cast<double>(p.heads) * pairs * p.head_dim;
}

namespace {

// Query rows [q_lo, q_hi] of a sequence: the key tiles [begin, end) between the
// built-in masks' edges (query i sees key j when j - i - (S_k - S_q) lies in
// [-window_left, right()]), as query_tiles_seeing / key_tiles_seen in the kernels.
std::pair<int64_t, int64_t> key_tiles_between_edges(const Problem& p, int64_t seq_q, int64_t seq_k,
                                                    int64_t q_lo, int64_t q_hi, int keys) {
  const int64_t offset = seq_k - seq_q;
  int64_t lo = 0, hi = seq_k - 1;
  if (p.window_left >= 0) lo = std::max<int64_t>(lo, q_lo + offset - p.window_left);
  if (p.right() >= 0) hi = std::min<int64_t>(hi, q_hi + offset + p.right());
  if (hi < lo) return {0, 0};
  return {lo / keys, hi / keys + 1};
}

// The tiles a kernel visits of one sequence, and all its tiles; `mask` (may be null)
// narrows the built-in range per query tile as narrow_tiles does.
std::pair<int64_t, int64_t> visited_tiles(const Problem& p, const Modifier* mask, int64_t seq_q,
                                          int64_t seq_k, int rows, int keys) {
  const int64_t q_tiles = (seq_q + rows - 1) / rows, k_tiles = (seq_k + keys - 1) / keys;
  int64_t visited = 0;
  for (int64_t i = 0; i < q_tiles; ++i) {
    TileBox box;
    box.q_lo = i * rows;
    box.q_hi = std::min<int64_t>(box.q_lo + rows, seq_q) - 1;
    auto [begin, end] = key_tiles_between_edges(p, seq_q, seq_k, box.q_lo, box.q_hi, keys);
    if (mask != nullptr) {
      auto kept = [&](int64_t j) {
        box.kv_lo = j * keys;
        box.kv_hi = std::min<int64_t>(box.kv_lo + keys, seq_k) - 1;
        return mask->tile(box) != TileState::None;
      };
      while (begin < end && !kept(begin)) ++begin;
      while (end > begin && !kept(end - 1)) --end;
    }
    visited += end - begin;
  }
  return {visited, q_tiles * k_tiles};
}

}  // namespace

double visited_tile_fraction(const Problem& p, int rows, int keys) {
  if (rows < 1 || keys < 1) return 1.0;
  std::shared_ptr<const Modifier> mask;
  if (!p.mask_mod.empty()) {
    mask = cached_mask_mod(p.mask_mod);
    for (const ModifierOperand& o : mask->operands)
      if (o.kind == ModifierOperandKind::PerHead) mask = nullptr;
  }
  if (mask == nullptr && p.window_left < 0 && p.right() < 0) return 1.0;
  if (mask != nullptr || !p.packed()) {
    const auto [visited, all] = visited_tiles(p, mask.get(), p.seq_q, p.seq_k, rows, keys);
    return all > 0 ? static_cast<double>(visited) / static_cast<double>(all) : 1.0;
  }
  // A packed batch, built-in masks only: each sequence's fraction, weighted by its
  // pairs (as flops() counts them without the masks).
  double visited_pairs = 0, pairs = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t seq_q = p.seq_q_of(b), seq_k = p.seq_k_of(b);
    if (seq_q < 1 || seq_k < 1) continue;
    const auto [visited, all] = visited_tiles(p, nullptr, seq_q, seq_k, rows, keys);
    const double sequence_pairs = static_cast<double>(seq_q) * static_cast<double>(seq_k);
    visited_pairs += sequence_pairs * static_cast<double>(visited) / static_cast<double>(all);
    pairs += sequence_pairs;
  }
  return pairs > 0 ? visited_pairs / pairs : 1.0;
}

double flops(const Problem& p) {
  return forward_flops(p) * (p.backward ? 2.5 : 1.0);
}

double unmasked_flops(const Problem& p) {
  Problem without_masks = p;
  without_masks.mask_mod.clear();
  without_masks.causal = false;
  without_masks.window_left = without_masks.window_right = -1;
  return flops(without_masks);
}

double visited_flops(const Problem& p, int rows, int keys) {
  return unmasked_flops(p) * visited_tile_fraction(p, rows, keys);
}

int64_t backward_workspace_rows(const Problem& p) {
  return p.heads * p.total_q();
}

int64_t backward_dq_accum_bytes(const Problem& p, const Config& c) {
  return c.atomic_dq ? backward_workspace_rows(p) * p.head_dim * 4 : 0;
}

namespace {

// Shared memory of the backward kernels (attention_backward.cuh's and
// attention_backward_sm90.cuh's kSharedBytes).
int backward_kv_shared_bytes(const Problem& p, const Config& c) {
  const int d = p.head_dim;
  if (c.wgmma)  // K, V, (dq=atomic) two dSᵀ tiles and two f32 dQ tiles, the stages, mbarriers
    return 1024 + 2 * 128 * d * 2 + (c.atomic_dq ? 2 * 128 * 128 + 2 * (64 * d * 4 + 16) : 0) +
           c.stages * (2 * c.bm * d * 2 + 2 * c.bm * 4) + 8 * (1 + 2 * c.stages);
  const int pitch = p.head_dim + 8;
  return (2 * c.bn * pitch + 2 * c.stages * c.bm * pitch) * 2 + c.stages * 2 * c.bm * 4;
}
int backward_q_shared_bytes(const Problem& p, const Config& c) {
  const int d = p.head_dim;
  if (c.wgmma) return 1024 + 2 * 128 * d * 2 + c.stages * 2 * c.bn * d * 2 + 8 * (1 + 2 * c.stages);
  const int pitch = p.head_dim + 8;
  return (2 * c.bm * pitch + 2 * c.stages * c.bn * pitch) * 2;
}

}  // namespace

int shared_bytes(const Problem& p, const Config& c) {
  if (p.backward)
    return c.atomic_dq ? backward_kv_shared_bytes(p, c)
                       : std::max(backward_kv_shared_bytes(p, c), backward_q_shared_bytes(p, c));
  if (c.wgmma) {  // alignment slack, Q, K and V per stage, mbarriers (attention_sm90.cuh)
    const int q_buffers = c.persistent ? 2 : 1;  // persistent: and q_empty per Q buffer
    return 1024 + q_buffers * c.bm * p.head_dim * 2 + c.stages * 2 * c.bn * p.head_dim * 2 +
           8 * ((c.persistent ? 2 : 1) * q_buffers + 4 * c.stages);
  }
  const int pitch = p.head_dim + 8;
  return (c.bm * pitch + 2 * c.stages * c.bn * pitch) * 2;
}

namespace {

// A modifier's text on one line (statements may be separated by newlines).
std::string one_line(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ';');
  return text;
}

bool has_modifiers(const Problem& p) {
  return !p.score_mod.empty() || !p.mask_mod.empty();
}

// Whether the forward kernels give the score modifier q_idx - kv_idx as a float
// (Modifier::relative): exact where every position a kernel evaluates, padded rows
// and keys of the last tiles included, is below 2^24.
bool relative_positions(const Problem& p) {
  constexpr int64_t kLastTilesPadding = 512;
  return !p.score_mod.empty() && cached_score_mod(p.score_mod)->relative &&
         std::max(p.seq_q, p.seq_k) + kLastTilesPadding <= kExactInFloat;
}

// The kernels' MOD policy (templates/attention.cuh, NoModifiers) around the fused
// modifier functions: each operand read from its slot of args.modifier_operands at
// the head or position it is indexed by (positions clamped to the tensors: padded
// rows and keys past a sequence evaluate the modifier too, and are masked after).
// Empty without modifiers.
std::string modifier_glue(const Problem& p) {
  if (!has_modifiers(p)) return "";
  std::string s = "#include \"kjit/math.cuh\"\n\n";
  int slot = 0;
  // ", operand values" for a modifier's function call; takes its slots in order.
  auto operand_arguments = [&](const Modifier& m) {
    std::string args;
    for (const ModifierOperand& o : m.operands) {
      const char* index = o.kind == ModifierOperandKind::PerHead    ? "head"
                          : o.kind == ModifierOperandKind::PerQuery ? "min(q_idx, args.seq_q - 1)"
                                                                    : "min(kv_idx, args.seq_k - 1)";
      const std::string element =
          fmt::format("static_cast<const {}*>(args.modifier_operands[{}])[{}]",
                      ir::storage_type(o.dtype), slot++, index);
      args += "," + std::string("\n        ") +
              (ir::is_floating(o.dtype) ? "kjit::to_f32(" + element + ")" : element);
    }
    return args;
  };
  std::string members;
  if (!p.score_mod.empty()) {
    const std::shared_ptr<const Modifier> m = cached_score_mod(p.score_mod);
    s += "// ---- the score modifier: " + m->text + " ----\n" + m->source + "\n";
    const std::string args = operand_arguments(*m);
    members += fmt::format(
        "  static constexpr bool kScore = true;\n"
        "  __device__ __forceinline__ static float score(const kjit::AttentionArgs& args, float "
        "s,\n"
        "                                                int q_idx, int kv_idx, int head) {{\n"
        "    return kjit_score_mod(s, q_idx, kv_idx, head{0});\n"
        "  }}\n"
        "  __device__ __forceinline__ static float score_grad(const kjit::AttentionArgs& args,\n"
        "                                                     float s, int q_idx, int kv_idx,\n"
        "                                                     int head) {{\n"
        "    return kjit_score_mod_grad(s, q_idx, kv_idx, head{0});\n"
        "  }}\n",
        args);
    members +=
        m->constant_grad
            ? "  // mod'(s) is a constant: the backward kernels keep none per score.\n"
              "  static constexpr bool kConstantGrad = true;\n"
            : "  // mod'(s) varies: the backward kernels keep it per score for the chain rule.\n"
              "  static constexpr bool kConstantGrad = false;\n";
    if (relative_positions(p))
      members += fmt::format(
          "  // The same over q_idx - kv_idx as a float (exact: every position of this\n"
          "  // problem is below 2^24): the kernels add a constant to it per score.\n"
          "  static constexpr bool kRelative = true;\n"
          "  __device__ __forceinline__ static float score_relative(const kjit::AttentionArgs& "
          "args,\n"
          "                                                         float s, float q_minus_kv,\n"
          "                                                         int head) {{\n"
          "    return kjit_score_mod_relative(s, q_minus_kv, head{0});\n"
          "  }}\n",
          args);
  }
  if (!p.mask_mod.empty()) {
    const std::shared_ptr<const Modifier> m = cached_mask_mod(p.mask_mod);
    s += "// ---- the mask modifier: " + m->text + " ----\n" + m->source + "\n";
    // The tile function takes the per-head operands only (positions range over the tile).
    std::string head_operands;
    int head_slot = slot;
    for (const ModifierOperand& o : m->operands) {
      if (o.kind == ModifierOperandKind::PerHead) {
        const std::string element =
            fmt::format("static_cast<const {}*>(args.modifier_operands[{}])[head]",
                        ir::storage_type(o.dtype), head_slot);
        head_operands +=
            ",\n        " + (ir::is_floating(o.dtype) ? "kjit::to_f32(" + element + ")" : element);
      }
      ++head_slot;
    }
    members += fmt::format(
        "  __device__ __forceinline__ static int tile(const kjit::AttentionArgs& args, int q_lo,\n"
        "                                             int q_hi, int kv_lo, int kv_hi, int head) "
        "{{\n"
        "    return kjit_mask_tile(q_lo, q_hi, kv_lo, kv_hi, head{});\n"
        "  }}\n",
        head_operands);
    members += fmt::format(
        "  static constexpr bool kMask = true;\n"
        "  __device__ __forceinline__ static bool keep(const kjit::AttentionArgs& args, int "
        "q_idx,\n"
        "                                              int kv_idx, int head) {{\n"
        "    return kjit_mask_mod(q_idx, kv_idx, head{});\n"
        "  }}\n",
        operand_arguments(*m));
  }
  s += "// The modifiers as the kernels call them (templates/attention.cuh, NoModifiers):\n"
       "// q_idx and kv_idx are positions in their sequences, head the query head; each\n"
       "// operand is read from its slot of args.modifier_operands.\n"
       "struct kjit_modifiers : kjit::attention::NoModifiers {\n" +
       members + "};\n\n";
  return s;
}

// The MOD argument of a kernel template, and a kernel name's suffix.
std::string modifier_argument(const Problem& p) {
  return has_modifiers(p) ? ", kjit_modifiers" : "";
}
std::string modifier_suffix(const Problem& p) {
  if (!has_modifiers(p)) return "";
  const std::string key = KeyHasher()
                              .add(p.score_mod.empty() ? "" : cached_score_mod(p.score_mod)->key)
                              .add(p.mask_mod.empty() ? "" : cached_mask_mod(p.mask_mod)->key)
                              .add(relative_positions(p) ? "relative" : "")
                              .hex();
  return "_mod" + key.substr(0, 8);
}

// The fields every attention kernel shares, and the first lines of its source.
KernelSource kernel_skeleton(const Problem& p, const Config& c, std::string name) {
  KernelSource out;
  out.family = "attention";
  out.problem = p.kernel_class();  // sizes, strides, masks and scale are arguments
  out.config = c.to_string();
  out.name = std::move(name);
  out.block_threads = c.threads();
  out.dynamic_shared_bytes = shared_bytes(p, c);
  out.arch_specific = c.wgmma;  // wgmma: sm_90a
  return out;
}

std::string source_header(const KernelSource& out) {
  std::string s;
  s += "// kjit attention, forward: O = softmax(scale * Q K^T + mask) V, and LSE per row\n";
  s += fmt::format("// generator: {} (compiler/lowering/attention.cpp)\n", kGeneratorVersion);
  s += "// problem:   " + out.problem + " (batch, heads, sequence lengths, masks, scale and\n";
  s += "//            strides are kernel arguments: one binary for every shape)\n";
  s += "// config:    " + out.config + "\n";
  return s;
}

// The modifiers as written, for the header of a kernel's source.
std::string modifier_lines(const Problem& p) {
  std::string s;
  if (!p.score_mod.empty())
    s += "// score_mod: " + one_line(p.score_mod) +
         "\n//            applied to s = scale * q.k before the masks; the softmax below then\n"
         "//            runs on the modified scores with scale 1 (log2 e in the exponent)\n";
  if (!p.mask_mod.empty()) s += "// mask_mod:  " + one_line(p.mask_mod) + "\n";
  return s;
}

KernelSource lower_wgmma(const Problem& p, const Config& c) {
  KernelSource out = kernel_skeleton(
      p, c,
      fmt::format("kjit_attention_fwd_{}_d{}_wgmma_{}x{}_s{}{}{}{}", dtype_name(p.dtype),
                  p.head_dim, c.bm, c.bn, c.stages, c.pingpong ? "_pingpong" : "",
                  c.persistent ? "_persistent" : "", modifier_suffix(p)));
  const char* type = dtype_name(p.dtype);
  std::string s = source_header(out) + modifier_lines(p);
  s += fmt::format(
      "// path:      flash attention on TMA + wgmma {} -> f32 (sm_90a): {} query rows per block\n"
      "//            in 2 consumer warpgroups + 1 producer, tiles of {} keys through {} TMA\n"
      "//            buffers, {} B of dynamic shared memory; S never leaves registers\n",
      type, c.bm, c.bn, c.stages, out.dynamic_shared_bytes);
  if (c.persistent)
    s += "// schedule:  persistent: one block per SM walks the (query tile, head, batch) items;\n"
         "//            the next item's Q (two buffers) and first K/V tiles load while this one\n"
         "//            computes; the next item's first scores go to the tensor cores with this\n"
         "//            one's last P V, and its O is written out under the next one's loads\n";
  s += "//\n";
  s += "// Per tile of keys, each consumer warpgroup (64 rows; templates/attention_sm90.cuh):\n";
  s += p.score_mod.empty()
           ? "//   S   = Q K^T                          wgmma, Q and K from shared memory\n"
           : "//   S   = score_mod(scale * Q K^T)       wgmma (Q, K from shared memory), then the "
             "modifier\n";
  // With a score modifier the scores are scaled (and modified) before the
  // softmax, which then runs with a scale of 1.
  const char* scale = p.score_mod.empty() ? " * scale" : "";
  s += "//   t   = rowmax S                       over the tile (4 lanes per row)\n";
  s += fmt::format(
      "//   m'  = t if (t - m){0} * log2 e > 8, else m: the running max moves only when a\n"
      "//         tile's exceeds it by 2^8 once scaled (lazy rescaling: every p below stays\n"
      "//         under 2^8, safe in fp32 and in 16-bit P; O / l at the end is still exact)\n",
      scale);
  s += fmt::format(
      "//   c   = 2^((m - m'){0} * log2 e)  what the old terms are worth now (1 when m' = m)\n",
      scale);
  s += fmt::format("//   P   = 2^((S - m'){0} * log2 e), rounded to 16 bits\n", scale);
  s += "//   l   = c * l + rowsum P;  O = c * O + P V   (wgmma, P straight from registers)\n";
  s += fmt::format("// and at the end O / l, LSE = m{0} + ln l.\n", scale);
  s += "#include \"kjit/attention_sm90.cuh\"\n\n";
  s += modifier_glue(p);
  s += fmt::format(
      "// S(64 x {0}) = Q(64 x 16) K^T(16 x {0}) per k step; Q and K K-major in shared memory.\n",
      c.bn);
  WgmmaInstruction scores;
  scores.name = "kjit_wgmma_scores";
  scores.n = c.bn;
  scores.type = type;
  scores.accumulate_argument = true;
  s += wgmma_struct(scores);
  s +=
      fmt::format("// O(64 x {0}) += P(64 x 16, registers) V(16 x {0}); V MN-major (transposed).\n",
                  p.head_dim);
  WgmmaInstruction values;
  values.name = "kjit_wgmma_values";
  values.n = p.head_dim;
  values.type = type;
  values.a_in_registers = true;
  values.transpose_b = 1;
  s += wgmma_struct(values);
  // Persistent: the modifiers' argument is spelled out (the default's) before the flag.
  const std::string mod_argument =
      c.persistent ? (has_modifiers(p) ? ", kjit_modifiers" : ", kjit::attention::NoModifiers") +
                         std::string(", true")
                   : modifier_argument(p);
  s += fmt::format(
      "typedef kjit::attention::FlashForwardSm90<kjit::{}, {}, {}, {}, {}, kjit_wgmma_scores,\n"
      "                                          kjit_wgmma_values{}>\n"
      "    kjit_attention_tile;\n\n",
      type, p.head_dim, c.bn, c.stages, c.pingpong ? "true" : "false", mod_argument);
  s += fmt::format(
      "static_assert(kjit_attention_tile::kSharedBytes == {},\n"
      "              \"the launch's dynamic shared memory (attention::shared_bytes)\");\n\n",
      out.dynamic_shared_bytes);
  s += c.persistent
           ? "// grid: (min(items, SMs), 1, 1); items: query tiles rounded up to pairs x heads\n"
             "// x batch; the tensor maps describe Q, K and V for the copy engine\n"
           : "// grid: (ceil(seq_q / 128), heads, batch); the tensor maps describe Q, K and V for\n"
             "// the copy engine (runtime/attention.cpp encodes them)\n";
  s += fmt::format("extern \"C\" __global__ void __launch_bounds__({}, 1)\n", c.threads());
  s += out.name + "(kjit::AttentionArgs args,\n";
  s += "    const __grid_constant__ kjit::TensorMap map_q,\n";
  s += "    const __grid_constant__ kjit::TensorMap map_k,\n";
  s += "    const __grid_constant__ kjit::TensorMap map_v) {\n";
  s += "  kjit_attention_tile::run(args, map_q, map_k, map_v);\n";
  s += "}\n";
  out.source = std::move(s);
  return out;
}

}  // namespace

KernelSource lower(const Problem& p, const Config& c) {
  if (p.backward)
    throw UserError(
        "attention::lower takes a forward problem; the backward pass has lower_backward");
  validate(p, c);
  if (c.wgmma) return lower_wgmma(p, c);
  KernelSource out =
      kernel_skeleton(p, c,
                      fmt::format("kjit_attention_fwd_{}_d{}_{}x{}_{}w_s{}{}", dtype_name(p.dtype),
                                  p.head_dim, c.bm, c.bn, c.warps(), c.stages, modifier_suffix(p)));
  std::string s = source_header(out) + modifier_lines(p);
  s += fmt::format(
      "// path:      flash attention with mma.sync m16n8k16 {} -> f32: {} query rows per block\n"
      "//            ({} warps of {}), tiles of {} keys through a {}-stage cp.async pipeline,\n"
      "//            {} B of dynamic shared memory; the S x S score matrix is never stored\n",
      dtype_name(p.dtype), c.bm, c.warps(), c.warp_rows, c.bn, c.stages, out.dynamic_shared_bytes);
  s += "//\n";
  s += "// The online softmax, per tile of keys, for each row r of a warp\n";
  s += "// (templates/attention.cuh, stages 3 to 6):\n";
  s += "//   s_j  = q_r . k_j                       scores, fp32 (mma.sync)\n";
  s += "//   m'   = max(m, max_j s_j)               the running max, over the tile\n";
  s += "//   c    = 2^((m - m') * scale * log2 e)   what the old terms are worth now\n";
  s += "//   p_j  = 2^(s_j * scale * log2 e - m' * scale * log2 e)\n";
  s += "//   l    = c * l + sum_j p_j               the running denominator\n";
  s += "//   o_r  = c * o_r + sum_j p_j v_j         p rounded to 16 bits, fp32 accumulation\n";
  s += "// and at the end o_r / l, LSE_r = m * scale + ln l.\n";
  s += "#include \"kjit/attention.cuh\"\n\n";
  s += modifier_glue(p);
  s += fmt::format("typedef kjit::attention::FlashForward<kjit::{}, {}, {}, {}, {}, {}{}>\n",
                   dtype_name(p.dtype), p.head_dim, c.bm, c.bn, c.warps(), c.stages,
                   modifier_argument(p));
  s += "    kjit_attention_tile;\n\n";
  s += "// grid: (ceil(seq_q / bm), heads, batch), one block per query tile of one head\n";
  s += fmt::format("extern \"C\" __global__ void __launch_bounds__({}, 1)\n", c.threads());
  s += out.name + "(kjit::AttentionArgs args) {\n";
  s += "  kjit_attention_tile::run(args);\n";
  s += "}\n";
  out.source = std::move(s);
  return out;
}

namespace {
// The backward prep kernel's grid and lanes (FlashBackwardPrep in
// templates/attention_backward.cuh): a row is d / 8 chunks of 16 bytes, one a lane,
// several rows a warp where the chunks divide 32, else a warp a row.
std::string prep_grid(int d) {
  const int chunks = d / 8;
  if (chunks == 32)
    return "(ceil(seq_q / 64), heads, batch), a warp a query row, a 16-byte chunk a lane";
  return 32 % chunks == 0 ? fmt::format(
                                "(ceil(seq_q / 64), heads, batch), {} lanes a query row ({} rows a "
                                "warp)",
                                chunks, 32 / chunks)
                          : fmt::format(
                                "(ceil(seq_q / 64), heads, batch), a warp a query row ({} of its "
                                "lanes loading a 16-byte chunk each)",
                                chunks);
}
}  // namespace

std::vector<BackwardKernel> lower_backward(const Problem& p, const Config& c) {
  if (!p.backward)
    throw UserError("attention::lower_backward takes a problem with backward = true");
  validate(p, c);
  const char* type = dtype_name(p.dtype);
  const int d = p.head_dim;
  auto header = [&](const KernelSource& out, const std::string& what) {
    std::string s;
    s += "// kjit attention, backward: " + what + "\n";
    s += fmt::format("// generator: {} (compiler/lowering/attention.cpp)\n", kGeneratorVersion);
    s += "// problem:   " + out.problem + " (batch, heads, sequence lengths, masks, scale and\n";
    s += "//            strides are kernel arguments: one binary for every shape)\n";
    s += "// config:    " + out.config + "\n";
    return s + modifier_lines(p);
  };
  auto skeleton = [&](const std::string& name, int threads, int shared) {
    KernelSource out;
    out.family = "attention";
    out.problem = p.kernel_class();
    out.config = c.to_string();
    out.name = name;
    out.block_threads = threads;
    out.dynamic_shared_bytes = shared;
    return out;
  };
  auto kernel = [&](KernelSource& out, const std::string& type_line, const std::string& grid,
                    bool modified) {
    out.source += "#include \"kjit/attention_backward.cuh\"\n\n";
    if (modified) out.source += modifier_glue(p);
    out.source += type_line + "\n\n";
    out.source += "// grid: " + grid + "\n";
    out.source +=
        fmt::format("extern \"C\" __global__ void __launch_bounds__({}, 1)\n", out.block_threads);
    out.source += out.name + "(kjit::AttentionBackwardArgs args) {\n";
    out.source += "  kjit_attention_step::run(args);\n";
    out.source += "}\n";
  };
  std::vector<BackwardKernel> kernels;

  // 1. D and LSE · log2 e per query row.
  {
    KernelSource out = skeleton(fmt::format("kjit_attention_bwd_prep_{}_d{}", type, d), 256, 0);
    out.source = header(out, "step 1 of 3, D_i = rowsum(dO * O) per query row");
    out.source +=
        "//\n"
        "// The softmax's backward needs, per query row i, D_i = sum_d dO_id * O_id (equal to\n"
        "// sum_j P_ij dP_ij: dS = P * (dP - D) then costs one subtraction per score). The\n"
        "// log-sum-exp the forward pass saved is rescaled to log2 units here, so the next\n"
        "// kernels recompute P_ij = 2^(s_ij * scale * log2 e - LSE_i * log2 e) with one FMA\n"
        "// and one exp2 (a row that saw no key gets +inf: every p of it is 0).\n";
    kernel(
        out,
        fmt::format("typedef kjit::attention::FlashBackwardPrep<kjit::{}, {}> kjit_attention_step;",
                    type, d),
        prep_grid(d), false);
    kernels.push_back({"prep", std::move(out)});
  }

  if (c.wgmma) {  // 2 and 3 on TMA + wgmma (templates/attention_backward_sm90.cuh)
    auto wgmma_kernel = [&](const std::string& role, int stream_rows) {
      const bool kv = role == "kv";
      KernelSource out = skeleton(
          fmt::format("kjit_attention_bwd_{}_{}_d{}_wgmma_{}_s{}{}{}{}", kv ? "dkdv" : "dq", type,
                      d, stream_rows, c.stages, c.pingpong ? "_pingpong" : "",
                      kv && c.atomic_dq ? "_dqatomic" : "", modifier_suffix(p)),
          384, kv ? backward_kv_shared_bytes(p, c) : backward_q_shared_bytes(p, c));
      out.arch_specific = true;
      out.source = header(out, !kv           ? "step 3 of 3, dQ for 128 queries per block"
                               : c.atomic_dq ? "step 2 of 3, dK and dV for 128 keys per block, "
                                               "and their share of dQ"
                                             : "step 2 of 3, dK and dV for 128 keys per block");
      out.source += fmt::format(
          "// path:      TMA + wgmma {} -> f32 (sm_90a): 2 consumer warpgroups of 64 {} + 1\n"
          "//            producer; tiles of {} {} through {} TMA buffers, {} B of dynamic shared\n"
          "//            memory\n",
          type, kv ? "keys" : "queries", stream_rows, kv ? "queries" : "keys", c.stages,
          out.dynamic_shared_bytes);
      out.source += "//\n";
      if (kv)
        out.source +=
            "// Per query tile, each consumer (templates/attention_backward_sm90.cuh):\n"
            "//   S^T  = K Q^T,  dP^T = V dO^T           wgmma, operands in shared memory\n"
            "//   P^T  = 2^(S^T * scale * log2 e - LSE * log2 e)   recomputed, never stored\n"
            "//   dV  += P^T dO                          P^T from registers\n"
            "//   dS^T = P^T * (dP^T - D)\n"
            "//   dK  += dS^T Q                          times scale once at the end\n";
      if (kv && c.atomic_dq)
        out.source +=
            "//   dQ  += dS K                            dS^T through shared memory (read\n"
            "//                                          transposed); the f32 tile added into\n"
            "//                                          the sums by the copy engine\n"
            "//                                          (cp.reduce.async.bulk.tensor .add) while\n"
            "//                                          the next fills a second tile: blocks\n"
            "//                                          of other keys add into the same rows\n"
            "//                                          (the order, and so the last bits,\n"
            "//                                          vary run to run)\n";
      if (!kv)
        out.source +=
            "// Per key tile, each consumer (templates/attention_backward_sm90.cuh):\n"
            "//   S   = Q K^T,  dP = dO V^T              wgmma, operands in shared memory\n"
            "//   P   = 2^(S * scale * log2 e - LSE * log2 e)\n"
            "//   dS  = P * (dP - D)\n"
            "//   dQ += dS K                             dS from registers; times scale at the "
            "end\n";
      out.source += "#include \"kjit/attention_backward_sm90.cuh\"\n\n";
      out.source += modifier_glue(p);
      out.source += fmt::format(
          "// {0}(64 x {1}) = A(64 x 16) B^T(16 x {1}) per k step, both K-major in shared "
          "memory.\n",
          kv ? "S^T, dP^T" : "S, dP", stream_rows);
      WgmmaInstruction scores;
      scores.name = "kjit_wgmma_scores";
      scores.n = stream_rows;
      scores.type = type;
      scores.accumulate_argument = true;
      out.source += wgmma_struct(scores);
      out.source += fmt::format(
          "// {0}(64 x {1}) += {2}(64 x 16, registers) {3}(16 x {1}); {3} MN-major (transposed).\n",
          kv ? "dV, dK" : "dQ", d, kv ? "P^T, dS^T" : "dS", kv ? "dO, Q" : "K");
      WgmmaInstruction gradient;
      gradient.name = "kjit_wgmma_gradient";
      gradient.n = d;
      gradient.type = type;
      gradient.a_in_registers = true;
      gradient.transpose_b = 1;
      out.source += wgmma_struct(gradient);
      std::string dq_argument;
      if (kv && c.atomic_dq) {
        out.source += fmt::format(
            "// dQ(64 x {0}) += dS(64 x 16) K(16 x {0}), each warpgroup half of the head dim; "
            "dS and K both MN-major (transposed) in shared memory.\n",
            d / 2);
        WgmmaInstruction dq_product;
        dq_product.name = "kjit_wgmma_dq";
        dq_product.n = d / 2;
        dq_product.type = type;
        dq_product.transpose_a = 1;
        dq_product.transpose_b = 1;
        dq_product.accumulate_argument = true;
        out.source += wgmma_struct(dq_product);
        dq_argument =
            fmt::format(",\n                                          {}, kjit_wgmma_dq",
                        has_modifiers(p) ? "kjit_modifiers" : "kjit::attention::NoModifiers");
      }
      out.source += fmt::format(
          "typedef kjit::attention::{}<kjit::{}, {}, {}, {}, {}, kjit_wgmma_scores,\n"
          "                                          kjit_wgmma_gradient{}>\n"
          "    kjit_attention_step;\n\n",
          kv ? "FlashBackwardKVSm90" : "FlashBackwardQSm90", type, d, stream_rows, c.stages,
          c.pingpong ? "true" : "false", dq_argument.empty() ? modifier_argument(p) : dq_argument);
      const bool dq_map = kv && c.atomic_dq;
      out.source +=
          kv ? "// grid: (ceil(seq_k / 128), kv_heads, batch); tensor maps of Q, K, V and dO\n"
             : "// grid: (ceil(seq_q / 128), heads, batch); tensor maps of Q, K, V and dO\n";
      if (dq_map)
        out.source += "// and of the f32 dQ sums (the copy engine adds each dQ tile into them)\n";
      out.source += "extern \"C\" __global__ void __launch_bounds__(384, 1)\n";
      out.source += out.name + "(kjit::AttentionBackwardArgs args,\n";
      out.source += "    const __grid_constant__ kjit::TensorMap map_q,\n";
      out.source += "    const __grid_constant__ kjit::TensorMap map_k,\n";
      out.source += "    const __grid_constant__ kjit::TensorMap map_v,\n";
      out.source += "    const __grid_constant__ kjit::TensorMap map_do";
      out.source += dq_map ? ",\n    const __grid_constant__ kjit::TensorMap map_dq) {\n" : ") {\n";
      out.source +=
          fmt::format("  kjit_attention_step::run(args, map_q, map_k, map_v, map_do{});\n",
                      dq_map ? ", &map_dq" : "");
      out.source += "}\n";
      kernels.push_back({role, std::move(out)});
    };
    wgmma_kernel("kv", c.bm);
    if (!c.atomic_dq) {
      wgmma_kernel("q", c.bn);
      return kernels;
    }
    // 3. The atomic dQ's sums, scaled and rounded.
    KernelSource out =
        skeleton(fmt::format("kjit_attention_bwd_dq_finish_{}_d{}", type, d), 256, 0);
    out.source = header(out, "step 3 of 3, dQ = scale * (the f32 sums of dS K) per query row");
    out.source +=
        "//\n"
        "// Step 2's blocks added their keys' dS K into f32 sums, one row of head_dim per\n"
        "// query row (zeroed by step 1). Here each is scaled once and rounded to the output\n"
        "// type.\n";
    kernel(out,
           fmt::format("typedef kjit::attention::FlashBackwardDqFinish<kjit::{}, {}> "
                       "kjit_attention_step;",
                       type, d),
           fmt::format("(ceil(seq_q / 64), heads, batch), a warp a query row, {} lanes of it "
                       "loading {} sums each",
                       std::min(d / 4, 32), d / std::min(d / 4, 32)),
           false);
    kernels.push_back({"q", std::move(out)});
    return kernels;
  }

  // 2. dK and dV, per tile of keys (head dim 256: dV, then dK, in two launches).
  const bool split = d > 128;
  for (const int outputs : split ? std::vector<int>{1, 2} : std::vector<int>{3}) {
    const std::string what = outputs == 3 ? "dK and dV" : outputs == 1 ? "dV" : "dK";
    const std::string suffix = outputs == 3 ? "dkdv" : outputs == 1 ? "dv" : "dk";
    KernelSource out = skeleton(fmt::format("kjit_attention_bwd_{}_{}_d{}_{}x{}_s{}{}", suffix,
                                            type, d, c.bn, c.bm, c.stages, modifier_suffix(p)),
                                c.bn / 16 * 32, backward_kv_shared_bytes(p, c));
    out.source = header(out, fmt::format("step 2 of 3, {} for {} keys per block", what, c.bn));
    out.source += fmt::format(
        "// path:      mma.sync m16n8k16 {} -> f32: {} warps, each owning 16 keys; query tiles\n"
        "//            of {} rows (of every query head sharing the K/V head) stream through a\n"
        "//            {}-stage cp.async pipeline, {} B of dynamic shared memory\n",
        type, c.bn / 16, c.bm, c.stages, out.dynamic_shared_bytes);
    out.source +=
        "//\n"
        "// Per query tile, each warp (templates/attention_backward.cuh, FlashBackwardKV):\n"
        "//   S^T  = K Q^T                              recomputed, fp32 (never stored)\n"
        "//   P^T  = 2^(S^T * scale * log2 e - LSE * log2 e)   exact: LSE is the final "
        "normalizer\n";
    if (outputs & 1)
      out.source += "//   dV  += P^T dO                               P^T from registers\n";
    if (outputs & 2)
      out.source +=
          "//   dP^T = V dO^T\n"
          "//   dS^T = P^T * (dP^T - D)                     the softmax's Jacobian\n"
          "//   dK  += dS^T Q                               times scale once at the end\n";
    out.source +=
        "// Accumulated in registers over every query tile: each key's rows are written\n"
        "// once, by one block (no atomics: the same bits every run).\n";
    kernel(out,
           fmt::format("typedef kjit::attention::FlashBackwardKV<kjit::{}, {}, {}, {}, {}, {}{}>\n"
                       "    kjit_attention_step;",
                       type, d, c.bm, c.bn, c.stages, outputs, modifier_argument(p)),
           fmt::format("(ceil(seq_k / {}), kv_heads, batch), one block per key tile of one K/V "
                       "head",
                       c.bn),
           true);
    kernels.push_back({"kv", std::move(out)});
  }

  // 3. dQ, per tile of queries.
  {
    KernelSource out = skeleton(fmt::format("kjit_attention_bwd_dq_{}_d{}_{}x{}_s{}{}", type, d,
                                            c.bm, c.bn, c.stages, modifier_suffix(p)),
                                c.bm / 16 * 32, backward_q_shared_bytes(p, c));
    out.source = header(out, fmt::format("step 3 of 3, dQ for {} queries per block", c.bm));
    out.source += fmt::format(
        "// path:      mma.sync m16n8k16 {} -> f32: {} warps of 16 query rows; tiles of {} keys\n"
        "//            through a {}-stage cp.async pipeline, {} B of dynamic shared memory\n",
        type, c.bm / 16, c.bn, c.stages, out.dynamic_shared_bytes);
    out.source +=
        "//\n"
        "// Per key tile, each warp (templates/attention_backward.cuh, FlashBackwardQ):\n"
        "//   S   = Q K^T,  P = 2^(S * scale * log2 e - LSE * log2 e)   recomputed\n"
        "//   dP  = dO V^T\n"
        "//   dS  = P * (dP - D)\n"
        "//   dQ += dS K                                  times scale once at the end\n";
    kernel(
        out,
        fmt::format("typedef kjit::attention::FlashBackwardQ<kjit::{}, {}, {}, {}, {}, {}{}>\n"
                    "    kjit_attention_step;",
                    type, d, c.bm, c.bn, c.bm / 16, c.stages, modifier_argument(p)),
        fmt::format("(ceil(seq_q / {}), heads, batch), one block per query tile of one head", c.bm),
        true);
    kernels.push_back({"q", std::move(out)});
  }
  return kernels;
}

}  // namespace kjit::attention
