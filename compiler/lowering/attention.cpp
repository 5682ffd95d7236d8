#include "kjit/compiler/lowering/attention.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <limits>

#include "kjit/support/error.h"
#include "kjit/support/key_values.h"

namespace kjit::attention {

namespace {

constexpr int64_t kMax32 = std::numeric_limits<int32_t>::max();

const char* dtype_name(ir::DType dtype) {
  return dtype == ir::DType::F16 ? "f16" : "bf16";
}

std::string window_text(int64_t left, int64_t right) {
  auto side = [](int64_t v) { return v < 0 ? std::string("inf") : std::to_string(v); };
  return side(left) + ":" + side(right);
}

}  // namespace

double Problem::softmax_scale() const {
  return scale > 0 ? scale : 1.0 / std::sqrt(static_cast<double>(head_dim));
}

std::string Problem::kernel_class() const {
  return fmt::format("dtype={},d={}", dtype_name(dtype), head_dim);
}

std::string Problem::to_string() const {
  return fmt::format(
             "batch={},heads={},kv_heads={},seq_q={},seq_k={},causal={},window={},scale={},", batch,
             heads, kv_heads, seq_q, seq_k, causal ? 1 : 0, window_text(window_left, window_right),
             softmax_scale()) +
         kernel_class();
}

std::string Config::to_string() const {
  return fmt::format("bm={},bn={},stages={},warp_rows={}", bm, bn, stages, warp_rows);
}

Config Config::parse(const std::string& text) {
  static const char* kValidKeys = "valid keys: bm, bn, stages, warp_rows";
  Config config;
  for (const auto& [key, value] :
       split_key_values(text, "attention config",
                        std::string("write e.g. bm=64,bn=64,stages=2; ") + kValidKeys)) {
    char* end = nullptr;
    const long parsed = std::strtol(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0' || parsed < 1 || parsed > 1 << 20)
      throw UserError(
          "attention config value '" + value + "' for '" + key + "' is not a positive integer",
          "e.g. bm=64");
    const int v = static_cast<int>(parsed);
    if (key == "bm") {
      config.bm = v;
    } else if (key == "bn") {
      config.bn = v;
    } else if (key == "stages") {
      config.stages = v;
    } else if (key == "warp_rows") {
      config.warp_rows = v;
    } else {
      throw UserError("attention config has no key '" + key + "'", kValidKeys);
    }
  }
  return config;
}

void validate_problem(const Problem& p) {
  auto positive = [](const char* name, int64_t v) {
    if (v < 1 || v > kMax32)
      throw UserError(fmt::format("attention {} is {}; it must be in [1, {}]", name, v, kMax32));
  };
  positive("batch", p.batch);
  positive("heads", p.heads);
  positive("kv_heads", p.kv_heads);
  positive("seq_q", p.seq_q);
  positive("seq_k", p.seq_k);
  if (p.batch > 65535 || p.heads > 65535)
    throw UserError(fmt::format("attention batch {} or heads {} is over 65535 (a grid dimension)",
                                p.batch, p.heads),
                    "fold batch into heads, or split the call");
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
                    "each side is a number of keys >= 0, or -1 for unbounded");
  if (!(std::isfinite(p.scale) && p.scale >= 0))
    throw UserError(fmt::format("attention scale {} is not a positive finite number", p.scale),
                    "0 means 1 / sqrt(head dim)");
}

void validate(const Problem& p, const Config& c) {
  validate_problem(p);
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
  if (c.stages < 2 || c.stages > 4)
    throw UserError(fmt::format("attention config stages={} is not in [2, 4]", c.stages));
}

int shared_bytes(const Problem& p, const Config& c) {
  const int pitch = p.head_dim + 8;
  return (c.bm * pitch + 2 * c.stages * c.bn * pitch) * 2;
}

KernelSource lower(const Problem& p, const Config& c) {
  validate(p, c);
  KernelSource out;
  out.family = "attention";
  out.problem = p.kernel_class();  // sizes, strides, masks and scale are arguments
  out.config = c.to_string();
  out.name = fmt::format("kjit_attention_fwd_{}_d{}_{}x{}_{}w_s{}", dtype_name(p.dtype), p.head_dim,
                         c.bm, c.bn, c.warps(), c.stages);
  out.block_threads = c.threads();
  out.dynamic_shared_bytes = shared_bytes(p, c);

  std::string s;
  s += "// kjit attention, forward: O = softmax(scale * Q K^T + mask) V, and LSE per row\n";
  s += fmt::format("// generator: {} (compiler/lowering/attention.cpp)\n", kGeneratorVersion);
  s += "// problem:   " + out.problem + " (batch, heads, sequence lengths, masks, scale and\n";
  s += "//            strides are kernel arguments: one binary for every shape)\n";
  s += "// config:    " + out.config + "\n";
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
  s += fmt::format("typedef kjit::attention::FlashForward<kjit::{}, {}, {}, {}, {}, {}>\n",
                   dtype_name(p.dtype), p.head_dim, c.bm, c.bn, c.warps(), c.stages);
  s += "    kjit_attention_tile;\n\n";
  s += "// grid: (ceil(seq_q / bm), heads, batch), one block per query tile of one head\n";
  s += fmt::format("extern \"C\" __global__ void __launch_bounds__({}, 1)\n", c.threads());
  s += out.name + "(kjit::AttentionArgs args) {\n";
  s += "  kjit_attention_tile::run(args);\n";
  s += "}\n";
  out.source = std::move(s);
  return out;
}

}  // namespace kjit::attention
