// Attention numeric tests against an fp64 CPU reference (runtime/attention_check.h):
// Q, K, V rounded to their dtype, O poisoned with 0xFF (NaN) so an unwritten row
// fails, LSE checked too; every head dim, sequence lengths that are not multiples
// of a tile, S_q != S_k, causal and sliding windows (bottom-right aligned), rows
// that see no key (O = 0, LSE = -inf), GQA / MQA, BHSD strides, f16, on every
// engine (mma.sync with 16 and 32 rows per warp, TMA + wgmma on sm_90), and every
// config of the tuner's space. The backward pass (dQ, dK, dV) on the same kinds of
// cases, against the fp64 gradients, and the same bits on every run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "kjit/runtime/attention.h"
#include "kjit/runtime/attention_check.h"
#include "kjit/runtime/cuda/memory.h"
#include "kjit/runtime/cuda/stream.h"
#include "kjit/support/error.h"
#include "kjit/support/half.h"
#include "kjit/tuner/attention_space.h"
#include "tests/support/gpu_test.h"

namespace kjit::attention {
namespace {

struct Case {
  Problem problem;
  std::optional<Config> config;  // empty: the tuner's default
  bool bhsd = false;             // Q, K, V, O laid out [batch, heads, seq, D]
  float spread = 1.0f;
  // Dimensions of one element (one batch, one head, one position) get strides past
  // 2^40 bytes: never stepped, so any value is valid (PyTorch leaves any there).
  bool far_unit_strides = false;
  // Rewrites the random inputs (values are rounded to the dtype afterwards).
  std::function<void(HostAttention&)> inputs;
};

// Rounds every value to what the dtype stores, so the reference sees the GPU's inputs.
void round_to_dtype(matmul::HostTensor& t) {
  for (float& x : t.values)
    x = t.dtype == matmul::DType::F16 ? f16_to_f32(f32_to_f16(x)) : bf16_to_f32(f32_to_bf16(x));
}

std::string name_of(const Case& c) {
  return c.problem.to_string() + (c.config ? " config " + c.config->to_string() : "") +
         (c.bhsd ? " BHSD" : "");
}

// BSHD host values -> the device layout of the case.
std::vector<unsigned char> layout_bytes(const matmul::HostTensor& t, const Problem& p,
                                        int64_t heads, int64_t seq, bool bhsd) {
  std::vector<unsigned char> packed = t.bytes();
  if (!bhsd) return packed;
  std::vector<unsigned char> out(packed.size());
  const int64_t row = p.head_dim * 2;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t s = 0; s < seq; ++s)
      for (int64_t h = 0; h < heads; ++h)
        std::memcpy(out.data() + (((b * heads + h) * seq + s) * row),
                    packed.data() + (((b * seq + s) * heads + h) * row), static_cast<size_t>(row));
  return out;
}

Strides strides_of(const Problem& p, int64_t heads, int64_t seq, bool bhsd,
                   bool far_unit_strides = false) {
  if (!bhsd && !far_unit_strides) return {};  // packed BSHD defaults
  const int64_t d = p.head_dim;
  Strides s = bhsd ? Strides{heads * seq * d, d, seq * d} : Strides{seq * heads * d, heads * d, d};
  if (far_unit_strides) {
    const int64_t far = int64_t{1} << 41;  // elements
    if (p.batch == 1 && !p.packed()) s.batch = far;
    if (seq == 1 && !p.packed()) s.seq = far + 8;
    if (heads == 1) s.head = far + 16;
  }
  if (p.packed()) s.batch = 0;
  return s;
}

class AttentionTest : public testing::GpuTest {
 protected:
  void run_case(const Case& c) {
    SCOPED_TRACE(name_of(c));
    const Problem& p = c.problem;
    Attention attention = c.config ? Attention(runtime(), p, *c.config) : Attention(runtime(), p);
    HostAttention host = make_host_attention(p, 1234, c.spread);
    if (c.inputs) {
      c.inputs(host);
      round_to_dtype(host.q);
      round_to_dtype(host.k);
      round_to_dtype(host.v);
    }
    cuda::DeviceBuffer q =
        cuda::DeviceBuffer::from(layout_bytes(host.q, p, p.heads, p.seq_q, c.bhsd));
    cuda::DeviceBuffer k =
        cuda::DeviceBuffer::from(layout_bytes(host.k, p, p.kv_heads, p.seq_k, c.bhsd));
    cuda::DeviceBuffer v =
        cuda::DeviceBuffer::from(layout_bytes(host.v, p, p.kv_heads, p.seq_k, c.bhsd));
    const auto o_count = static_cast<size_t>(p.total_q() * p.heads * p.head_dim);
    cuda::DeviceBuffer o(o_count * 2);
    o.fill_bytes(0xFF);
    cuda::DeviceBuffer lse(static_cast<size_t>(p.total_q() * p.heads) * 4);
    lse.fill_bytes(0xFF);
    const DeviceOperands operands = upload_operands(host);
    Tensors t{.q = q.get(),
              .k = k.get(),
              .v = v.get(),
              .o = o.get(),
              .lse = lse.get(),
              .modifier_operands = operands.pointers()};
    t.q_strides = t.o_strides = strides_of(p, p.heads, p.seq_q, c.bhsd, c.far_unit_strides);
    t.k_strides = t.v_strides = strides_of(p, p.kv_heads, p.seq_k, c.bhsd, c.far_unit_strides);
    cuda::Stream stream;
    attention.launch(t, stream.get());
    stream.synchronize();
    const std::vector<double> got =
        matmul::to_doubles(host_dtype(p), o.to_host<unsigned char>(), o_count);
    const std::vector<float> got_lse = lse.to_host<float>();
    const Tensors resolved = resolve(p, t);
    const AttentionCheck check =
        check_attention(host, got, resolved.o_strides, got_lse, samples_to_check(p, 99));
    EXPECT_TRUE(check.ok(check_tolerance(p)))
        << check.describe() << " (config " << attention.config().to_string() << ")";
  }

  // The forward pass with the tuner's config, then the backward pass (`config`, or
  // the tuner's), checked against the fp64 gradients; a second backward run must
  // give the same bits (dq=atomic: dK and dV; dQ within the tolerance again).
  void run_backward(const Case& c, std::optional<Config> config = std::nullopt) {
    if (!config) {  // the tuner's choice, then each engine and dQ mode it did not pick
      Problem p = c.problem;
      p.backward = true;
      const Config chosen = tuner::attention_default(p, device());
      run_backward(c, chosen);
      const std::vector<Config> space = tuner::attention_space(p, device());
      for (const Config& other :
           {Config::parse("bm=32,bn=32"), Config::parse("mma=wgmma,bm=64,bn=64,stages=2"),
            Config::parse("mma=wgmma,bm=64,bn=128,stages=2,dq=atomic")})
        if ((other.wgmma != chosen.wgmma || other.atomic_dq != chosen.atomic_dq) &&
            std::find(space.begin(), space.end(), other) != space.end())
          run_backward(c, other);
      return;
    }
    const Problem& p = c.problem;
    SCOPED_TRACE("backward " + name_of(c) + (config ? " config " + config->to_string() : ""));
    Problem forward_problem = p;
    forward_problem.backward = false;
    Attention forward(runtime(), forward_problem);
    AttentionBackward backward(runtime(), p, *config);
    HostAttention host = make_host_attention(p, 4321, c.spread);
    const matmul::HostTensor d_o =
        matmul::random_tensor(host_dtype(p), host.q.size(), 8765, -1.0f, 1.0f);
    auto upload = [&](const matmul::HostTensor& t, int64_t heads, int64_t seq) {
      return cuda::DeviceBuffer::from(layout_bytes(t, p, heads, seq, c.bhsd));
    };
    cuda::DeviceBuffer q = upload(host.q, p.heads, p.seq_q),
                       k = upload(host.k, p.kv_heads, p.seq_k),
                       v = upload(host.v, p.kv_heads, p.seq_k), g = upload(d_o, p.heads, p.seq_q);
    const auto q_count = static_cast<size_t>(p.total_q() * p.heads * p.head_dim);
    const auto kv_count = static_cast<size_t>(p.total_k() * p.kv_heads * p.head_dim);
    cuda::DeviceBuffer o(q_count * 2), lse(static_cast<size_t>(p.total_q() * p.heads) * 4);
    cuda::DeviceBuffer dq(q_count * 2), dk(kv_count * 2), dv(kv_count * 2);
    for (cuda::DeviceBuffer* b : {&dq, &dk, &dv}) b->fill_bytes(0xFF);
    const Strides qs = strides_of(p, p.heads, p.seq_q, c.bhsd, c.far_unit_strides);
    const Strides ks = strides_of(p, p.kv_heads, p.seq_k, c.bhsd, c.far_unit_strides);
    const DeviceOperands operands = upload_operands(host);
    Tensors t{.q = q.get(),
              .k = k.get(),
              .v = v.get(),
              .o = o.get(),
              .lse = lse.get(),
              .modifier_operands = operands.pointers()};
    t.q_strides = t.o_strides = qs;
    t.k_strides = t.v_strides = ks;
    BackwardTensors bt{.q = q.get(),
                       .k = k.get(),
                       .v = v.get(),
                       .o = o.get(),
                       .lse = lse.get(),
                       .d_o = g.get(),
                       .dq = dq.get(),
                       .dk = dk.get(),
                       .dv = dv.get(),
                       .modifier_operands = operands.pointers()};
    bt.q_strides = bt.o_strides = bt.do_strides = bt.dq_strides = qs;
    bt.k_strides = bt.v_strides = bt.dk_strides = bt.dv_strides = ks;
    cuda::Stream stream;
    forward.launch(t, stream.get());
    backward.launch(bt, stream.get());
    stream.synchronize();
    const std::vector<unsigned char> dq_bytes = dq.to_host<unsigned char>(),
                                     dk_bytes = dk.to_host<unsigned char>(),
                                     dv_bytes = dv.to_host<unsigned char>();
    const BackwardCheck check =
        check_backward(host, d_o, matmul::to_doubles(host_dtype(p), dq_bytes, q_count),
                       matmul::to_doubles(host_dtype(p), dk_bytes, kv_count),
                       matmul::to_doubles(host_dtype(p), dv_bytes, kv_count), resolve(p, bt),
                       gradient_groups_to_check(p, 77));
    EXPECT_TRUE(check.ok(backward_tolerance(p)))
        << check.describe() << " (config " << backward.config().to_string() << ")";
    // Deterministic: again, the same bits. The atomic dQ's sums are added in whatever
    // order the blocks finish: its dQ is checked against the reference again.
    for (cuda::DeviceBuffer* b : {&dq, &dk, &dv}) b->fill_bytes(0xFF);
    backward.launch(bt, stream.get());
    stream.synchronize();
    EXPECT_TRUE(dk.to_host<unsigned char>() == dk_bytes && dv.to_host<unsigned char>() == dv_bytes)
        << "a second backward run gave other bits for dK or dV";
    const std::vector<unsigned char> dq_again = dq.to_host<unsigned char>();
    if (!config->atomic_dq) {
      EXPECT_TRUE(dq_again == dq_bytes) << "a second backward run gave other bits for dQ";
    } else {
      const BackwardCheck again =
          check_backward(host, d_o, matmul::to_doubles(host_dtype(p), dq_again, q_count),
                         matmul::to_doubles(host_dtype(p), dk_bytes, kv_count),
                         matmul::to_doubles(host_dtype(p), dv_bytes, kv_count), resolve(p, bt),
                         gradient_groups_to_check(p, 77));
      EXPECT_TRUE(again.ok(backward_tolerance(p))) << "again: " << again.describe();
    }
  }

  // Each problem's backward with the atomic dQ (wgmma, 64-query tiles); skipped on a
  // GPU without it.
  void run_backward_atomic(std::vector<Problem> problems) {
    const Config atomic = Config::parse("mma=wgmma,bm=64,bn=128,stages=2,dq=atomic");
    for (Problem& p : problems) {
      p.backward = true;
      const std::vector<Config> space = tuner::attention_space(p, device());
      if (std::find(space.begin(), space.end(), atomic) == space.end())
        GTEST_SKIP() << "no atomic dQ on this GPU (" << device().arch() << ")";
      run_backward({p}, atomic);
    }
  }

  // The case with the tuner's config, and again on each engine it would not pick:
  // mma.sync (16 and 32 rows per warp) and, on sm_90 at head dims 64 and 128, the
  // TMA + wgmma engine.
  void run_engines(Case c) {
    run_case(c);
    if (c.config) return;
    const Config chosen = tuner::attention_default(c.problem, device());
    std::vector<Config> others = {Config::parse("bm=64,bn=64,warp_rows=16"),
                                  Config::parse("bm=128,bn=32,warp_rows=32")};
    if (device().cc_major == 9 && (c.problem.head_dim == 64 || c.problem.head_dim == 128)) {
      others.push_back(Config::parse("mma=wgmma,bn=64"));
      others.push_back(Config::parse("mma=wgmma,bn=128,stages=2,pingpong=1,persistent=1"));
    }
    for (const Config& other : others) {
      if (other == chosen) continue;
      const std::vector<Config> space = tuner::attention_space(c.problem, device());
      if (std::find(space.begin(), space.end(), other) == space.end()) continue;
      Case again = c;
      again.config = other;
      run_case(again);
    }
  }
};

Problem shape(int64_t seq_q, int64_t seq_k, int d, int64_t heads = 2, int64_t batch = 1) {
  Problem p;
  p.batch = batch;
  p.heads = heads;
  p.kv_heads = heads;
  p.seq_q = seq_q;
  p.seq_k = seq_k;
  p.head_dim = d;
  return p;
}

TEST_F(AttentionTest, EveryHeadDimAndSequenceLength) {
  for (const int d : {64, 96, 128, 256}) {
    for (const int64_t s : {1, 17, 127, 128, 129, 1000, 4097}) {
      run_engines({shape(s, s, d)});
      Problem causal = shape(s, s, d);
      causal.causal = true;
      run_engines({causal});
    }
  }
}

TEST_F(AttentionTest, QueryAndKeyLengthsDiffer) {
  // Bottom-right alignment: with S_q > S_k and a causal mask, the first S_q - S_k
  // rows see no key at all (O = 0, LSE = -inf).
  for (const auto& [sq, sk] : std::vector<std::pair<int64_t, int64_t>>{
           {17, 1000}, {1000, 17}, {129, 4097}, {4097, 129}, {1, 300}, {300, 1}}) {
    for (const bool causal : {false, true}) {
      Problem p = shape(sq, sk, 128);
      p.causal = causal;
      run_engines({p});
      p.head_dim = 64;
      run_engines({p});
    }
  }
}

// Sides of 2^31 - 1 ("no bound", as a caller may spell it) bound nothing: the
// kernels' 32-bit key ranges overflowed and masked every key (O = 0) before.
TEST_F(AttentionTest, SlidingWindows) {
  for (const auto& [left, right] :
       std::vector<std::pair<int64_t, int64_t>>{{100, 0},
                                                {64, 32},
                                                {0, 0},
                                                {0, -1},
                                                {-1, 5},
                                                {1, 1},
                                                {300, 300},
                                                {2147483647, 2147483647},
                                                {2147483647, 0}}) {
    for (const auto& [sq, sk] :
         std::vector<std::pair<int64_t, int64_t>>{{1000, 1000}, {129, 700}, {700, 129}}) {
      Problem p = shape(sq, sk, 128);
      p.window_left = left;
      p.window_right = right;
      run_engines({p});
    }
  }
}

TEST_F(AttentionTest, GroupedAndMultiQuery) {
  Problem gqa = shape(513, 513, 128, 8, 2);
  gqa.kv_heads = 2;
  run_engines({gqa});
  gqa.causal = true;
  run_engines({gqa});
  Problem mqa = shape(300, 1100, 64, 4, 3);
  mqa.kv_heads = 1;
  run_engines({mqa});
}

// One batch, one key/value head, one query: those dimensions' strides are never
// stepped and may be anything, even past the copy engine's 2^40 bytes (its tensor
// maps take the packed stride there; before, encoding the map failed with a CUDA error).
TEST_F(AttentionTest, DimensionsOfOneElementTakeAnyStride) {
  Problem mqa = shape(300, 700, 128, 4, 1);
  mqa.kv_heads = 1;
  Case c{mqa};
  c.far_unit_strides = true;
  run_engines(c);
  run_backward(c);
  c.bhsd = true;
  run_engines(c);
  Problem decode = shape(1, 1000, 64, 1, 1);
  Case one{decode};
  one.far_unit_strides = true;
  run_engines(one);
}

TEST_F(AttentionTest, HeadsMajorStridesAndF16) {
  Problem p = shape(777, 777, 128, 3, 2);
  run_engines({p, std::nullopt, true});
  p.causal = true;
  p.kv_heads = 1;
  run_engines({p, std::nullopt, true});
  Problem f16 = shape(1000, 1000, 64, 2, 2);
  f16.dtype = ir::DType::F16;
  run_engines({f16});
  f16.head_dim = 256;
  f16.causal = true;
  run_engines({f16, std::nullopt, true});
}

TEST_F(AttentionTest, PeakySoftmaxAndScale) {
  // Large scores: the running max changes often and rescaling matters.
  Problem p = shape(1000, 1000, 128);
  run_engines({p, std::nullopt, false, 4.0f});
  p.scale = 0.5;
  p.causal = true;
  run_engines({p, std::nullopt, false, 2.0f});
}

// Scores that rise along the keys: every row's max keeps moving, tile after tile,
// by small steps (the wgmma engine defers rescaling O until its max has moved by
// 2^8) and by large ones (rescaled every tile).
TEST_F(AttentionTest, RisingMaxRescales) {
  for (const float slope : {0.5f, 40.0f}) {
    for (const int d : {64, 128}) {
      Problem p = shape(1000, 1000, d);
      Case c{p};
      c.inputs = [slope](HostAttention& host) {
        const Problem& q = host.problem;
        for (float& x : host.q.values) x = std::abs(x);  // q . k grows with k's scale
        for (int64_t b = 0; b < q.batch; ++b)
          for (int64_t j = 0; j < q.seq_k; ++j)
            for (int64_t h = 0; h < q.kv_heads; ++h)
              for (int64_t e = 0; e < q.head_dim; ++e) {
                float& x = host.k.values[static_cast<size_t>(
                    ((b * q.seq_k + j) * q.kv_heads + h) * q.head_dim + e)];
                x = std::abs(x) * slope * static_cast<float>(j) / static_cast<float>(q.seq_k);
              }
      };
      run_engines(c);
      c.problem.causal = true;
      run_engines(c);
    }
  }
}

// Packed variable-length batches: lengths {1, 7, 300, 2049}, the same or other key
// lengths, GQA, causal and windows, each head dim, on every engine.
TEST_F(AttentionTest, PackedVariableLengths) {
  for (const int d : {64, 96, 128, 256}) {
    for (const bool causal : {false, true}) {
      Problem p = shape(1, 1, d, 4);
      p.kv_heads = 2;
      p.causal = causal;
      p.set_lengths({1, 7, 300, 2049});
      run_engines({p});
      p.set_lengths({1, 7, 300, 2049}, {5, 7, 1000, 17});
      run_engines({p});
    }
  }
  Problem window = shape(1, 1, 128, 2);
  window.set_lengths({300, 1, 2049, 64}, {2049, 300, 7, 64});
  window.window_left = 64;
  window.window_right = 0;
  run_engines({window});
}

TEST_F(AttentionTest, EveryConfigOfTheSpace) {
  for (const int d : {64, 96, 128, 256}) {
    for (const bool causal : {false, true}) {
      Problem p = shape(301, 517, d, 2, 2);
      p.causal = causal;
      for (const Config& c : tuner::attention_space(p, device())) run_case({p, c});
    }
  }
}

// Score and mask modifiers written in the IR, fused into the kernel and checked
// against their fp64 twins: soft-capping, ALiBi (a per-head slope), operands per
// query and per key position, a sliding window and a per-head limit as mask
// modifiers, rows a mask leaves without keys (O = 0, LSE = -inf), lengths that are
// not multiples of a tile, S_q != S_k, GQA, packed batches, on every engine.
const char* const kSoftCap = "tanh(s / 50) * 50";
const char* const kAlibi = "slope:f32[heads]; s - slope * abs(q_idx - kv_idx)";
const char* const kSlidingWindow = "(kv_idx <= q_idx) * (q_idx - kv_idx < 100)";

// Persistent blocks (wgmma forward): more items than SMs (132 on an H200), so
// blocks walk two or three items, through both Q buffers and across the K/V
// stages' phases: causal (items of every length), a window, a packed batch whose
// short sequences leave items empty or without keys, a mask modifier that skips
// tiles. Every persistent config of the space on the causal problems, the
// ping-pong and plain ones on the others.
TEST_F(AttentionTest, PersistentBlocksWalkManyItems) {
  if (device().cc_major != 9) GTEST_SKIP() << "the persistent schedule is the wgmma engine's";
  struct Walk {
    Problem problem;
    bool every_config;
  };
  std::vector<Walk> walks;
  for (const int d : {64, 128}) {
    Problem causal = shape(1100, 1100, d, 16, 2);  // 9 x 16 x 2 = 288 items
    causal.causal = true;
    walks.push_back({causal, true});
  }
  Problem window = shape(1000, 1000, 128, 24, 2);  // 8 x 24 x 2 = 384 items
  window.window_left = 64;
  window.window_right = 0;
  walks.push_back({window, false});
  Problem packed = shape(1, 1, 128, 40);  // 17 x 40 x 4 items, most past their sequence
  packed.kv_heads = 10;
  packed.causal = true;  // query 2049 of 17 keys: its first 2032 rows see none
  packed.set_lengths({1, 7, 300, 2049}, {5, 7, 1000, 17});
  walks.push_back({packed, false});
  Problem modified = shape(1000, 1300, 128, 24, 2);  // 384 items
  modified.kv_heads = 8;
  modified.score_mod = kAlibi;
  modified.mask_mod = kSlidingWindow;
  walks.push_back({modified, false});
  for (const Walk& walk : walks) {
    std::vector<bool> pingpong_seen;
    for (const Config& c : tuner::attention_space(walk.problem, device())) {
      if (!c.persistent) continue;
      if (!walk.every_config &&
          (c.bn != 128 || std::find(pingpong_seen.begin(), pingpong_seen.end(), c.pingpong) !=
                              pingpong_seen.end()))
        continue;
      pingpong_seen.push_back(c.pingpong);
      run_case({walk.problem, c});
    }
    EXPECT_GE(pingpong_seen.size(), 2u) << walk.problem.to_string();
  }
}

TEST_F(AttentionTest, ScoreAndMaskModifiers) {
  struct Modifiers {
    const char* score;
    const char* mask;
  };
  const Modifiers all[] = {
      {kSoftCap, ""},
      {kAlibi, ""},
      {"a:f32[q]; b:bf16[kv]; s * (1 + a) - 4 * b", ""},
      {"", kSlidingWindow},
      {"", "limit:i32[heads]; kv_idx < limit"},  // limit in [0, S]: a head may see nothing
      {kAlibi, kSlidingWindow},
      {kSoftCap, "kv_idx >= q_idx + 100000"},  // every key masked: O = 0, LSE = -inf
  };
  for (const Modifiers& m : all) {
    for (const int d : {64, 128}) {
      for (const auto& [seq_q, seq_k] :
           {std::pair<int64_t, int64_t>{1, 1}, {17, 17}, {129, 129}, {1000, 1000}, {127, 300}}) {
        Problem p = shape(seq_q, seq_k, d, 4);
        p.kv_heads = 2;
        p.score_mod = m.score;
        p.mask_mod = m.mask;
        run_engines({p, std::nullopt, false, 4.0f});  // peaky: the max moves
      }
    }
  }
  // A mask whose whole key tiles change after an item's first 32 (the wgmma kernel
  // analyses its tiles 32 at a time): keys [4150, 4180 + q_idx) masked, every other
  // key kept, so tiles before 4096 and after 4380 are whole, those between are not.
  Problem band = shape(200, 5000, 128, 2);
  band.mask_mod = "(kv_idx < 4150) + (kv_idx >= 4180 + q_idx)";
  run_engines({band});
  if (device().cc_major == 9)
    run_case({band, Config::parse("mma=wgmma,bm=128,bn=64,stages=3,pingpong=1,persistent=1")});
  // With the built-in masks, BHSD strides, f16, a packed batch.
  Problem p = shape(300, 300, 128, 2);
  p.causal = true;
  p.score_mod = kAlibi;
  p.mask_mod = "(kv_idx < q_idx - 40) + (kv_idx > q_idx - 20)";  // a band cut out
  run_engines({p, std::nullopt, true});
  p.dtype = ir::DType::F16;
  p.set_lengths({1, 7, 300, 2049});
  run_engines({p});
}

TEST_F(AttentionTest, BackwardWithModifiers) {
  // 4 query heads over 2 K/V heads, the max moving (spread 3).
  auto check = [&](int d, const char* score, const char* mask, int64_t seq_q, int64_t seq_k) {
    Problem p = shape(seq_q, seq_k, d, 4);
    p.kv_heads = 2;
    p.backward = true;
    p.score_mod = score;
    p.mask_mod = mask;
    run_backward({p, std::nullopt, false, 3.0f});
  };
  for (const char* score : {kSoftCap, kAlibi, ""}) {
    for (const char* mask : {"", kSlidingWindow}) {
      if (*score == '\0' && *mask == '\0') continue;
      for (const int d : {64, 128})
        for (const auto& [seq_q, seq_k] :
             {std::pair<int64_t, int64_t>{17, 17}, {129, 129}, {1000, 1000}, {127, 300}})
          check(d, score, mask, seq_q, seq_k);
    }
  }
  // Head dims 96 and 256 (the mma.sync kernels alone): until 2026-12-06 the register
  // estimate left the head dim 256 backward with a modifier no config at all.
  for (const int d : {96, 256})
    for (const auto& [score, mask] :
         {std::pair<const char*, const char*>{kSoftCap, kSlidingWindow}, {kAlibi, ""}})
      for (const auto& [seq_q, seq_k] : {std::pair<int64_t, int64_t>{129, 129}, {127, 300}})
        check(d, score, mask, seq_q, seq_k);
  // gelu in a score modifier: kjit::gelu_for_16bit (the fast math), and in the
  // gradient gelu' = Phi + s phi with Phi from gelu(s) / s.
  for (const auto& [seq_q, seq_k] : {std::pair<int64_t, int64_t>{129, 129}, {127, 300}}) {
    Problem p = shape(seq_q, seq_k, 128, 4);
    p.kv_heads = 2;
    p.backward = true;
    p.score_mod = "gelu(s)";
    run_backward({p, std::nullopt, false, 3.0f});
  }
  // A score modifier whose mod' is a constant (ALiBi, a scaled score plus a bias)
  // tests the built-in masks' edges in a loop of its own, as without a modifier:
  // causal, windows on either side, lengths that differ, keys past the sequence.
  for (const char* score : {kAlibi, "s * 0.5 + kv_idx * 0.01"})
    for (const auto& [left, right] : {std::pair<int64_t, int64_t>{-1, 0}, {100, 0}, {64, 32}})
      for (const auto& [seq_q, seq_k] : {std::pair<int64_t, int64_t>{129, 700}, {700, 129}}) {
        Problem p = shape(seq_q, seq_k, 128, 4);
        p.kv_heads = 2;
        p.backward = true;
        p.score_mod = score;
        p.causal = left < 0;
        if (!p.causal) {
          p.window_left = left;
          p.window_right = right;
        }
        run_backward({p, std::nullopt, false, 3.0f});
      }
  Problem packed = shape(1, 1, 64, 2);
  packed.backward = true;
  packed.score_mod = kSoftCap;
  packed.mask_mod = kSlidingWindow;
  packed.set_lengths({1, 7, 300, 2049});
  run_backward({packed});
}

// A score modifier whose derivative is infinite where the mask hides the score
// (s / (q_idx - kv_idx) on the diagonal, which `kv_idx < q_idx` leaves out): the
// gradients are those of the visible scores alone, 0 where P is 0 whatever mod' is
// there, on every engine and dQ mode. And past the end of a packed batch's first
// sequence (300 queries), where s / (300 - q_idx) divides by zero: the queries a
// tile brings along from the next sequence change nothing. Before the fix, dS was
// 0 x inf = NaN there, and NaN reached dQ and dK (and dV through P past the end).
TEST_F(AttentionTest, BackwardModifierInfiniteWhereMasked) {
  for (const int d : {64, 128}) {
    Problem p = shape(129, 129, d, 4);
    p.kv_heads = 2;
    p.backward = true;
    p.score_mod = "s / (q_idx - kv_idx)";
    p.mask_mod = "kv_idx < q_idx";
    run_backward({p});
  }
  Problem packed = shape(1, 1, 128, 2);
  packed.backward = true;
  packed.score_mod = "s / (300 - q_idx)";
  packed.set_lengths({300, 7, 129});
  run_backward({packed});
}

TEST_F(AttentionTest, ModifierOperandsAreChecked) {
  Problem p = shape(64, 64, 64);
  p.score_mod = kAlibi;
  Attention attention(runtime(), p);
  cuda::DeviceBuffer buffer(64 * 2 * 64 * 2 + 64);
  const CUdeviceptr base = buffer.get();
  Tensors none{.q = base, .k = base, .v = base, .o = base};
  try {
    attention.launch(none, nullptr);
    ADD_FAILURE() << "a missing operand was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("slope"), std::string::npos) << e.what();
  }
  Tensors misaligned = none;
  misaligned.modifier_operands = {base + 2};
  EXPECT_THROW(attention.launch(misaligned, nullptr), UserError);
  Tensors null = none;
  null.modifier_operands = {0};
  EXPECT_THROW(attention.launch(null, nullptr), UserError);
}

TEST_F(AttentionTest, BadTensorsAreUserErrors) {
  Problem p = shape(64, 64, 64);
  Attention attention(runtime(), p);
  cuda::DeviceBuffer buffer(64 * 2 * 64 * 2 + 64);
  const CUdeviceptr base = buffer.get();
  Tensors misaligned{.q = base + 2, .k = base, .v = base, .o = base};
  EXPECT_THROW(attention.launch(misaligned, nullptr), UserError);
  Tensors odd_stride{.q = base, .k = base, .v = base, .o = base};
  odd_stride.q_strides.seq = 100;
  EXPECT_THROW(attention.launch(odd_stride, nullptr), UserError);
  Tensors missing{.q = base, .k = 0, .v = base, .o = base};
  EXPECT_THROW(attention.launch(missing, nullptr), UserError);
  // A packed problem's tensors have no batch stride.
  Problem packed = p;
  packed.set_lengths({16, 48});
  Attention packed_attention(runtime(), packed);
  Tensors batched{.q = base, .k = base, .v = base, .o = base};
  batched.q_strides.batch = 64 * 64;
  EXPECT_THROW(packed_attention.launch(batched, nullptr), UserError);
}

// ---- the backward pass ----

TEST_F(AttentionTest, BackwardEveryHeadDimAndSequenceLength) {
  for (const int d : {64, 96, 128, 256}) {
    for (const int64_t s : {1, 17, 127, 128, 129, 1000, 4097}) {
      run_backward({shape(s, s, d)});
      Problem causal = shape(s, s, d);
      causal.causal = true;
      run_backward({causal});
    }
  }
}

TEST_F(AttentionTest, BackwardLengthsDifferAndWindows) {
  for (const auto& [sq, sk] : std::vector<std::pair<int64_t, int64_t>>{
           {17, 1000}, {1000, 17}, {129, 4097}, {4097, 129}, {1, 300}, {300, 1}}) {
    for (const bool causal : {false, true}) {
      Problem p = shape(sq, sk, 128);
      p.causal = causal;
      run_backward({p});
      p.head_dim = 64;
      run_backward({p});
    }
  }
  for (const auto& [left, right] : std::vector<std::pair<int64_t, int64_t>>{
           {100, 0}, {64, 32}, {0, 0}, {-1, 5}, {300, 300}, {2147483647, 2147483647}}) {
    for (const auto& [sq, sk] :
         std::vector<std::pair<int64_t, int64_t>>{{1000, 1000}, {129, 700}, {700, 129}}) {
      Problem p = shape(sq, sk, 128);
      p.window_left = left;
      p.window_right = right;
      run_backward({p});
    }
  }
}

TEST_F(AttentionTest, BackwardGroupedStridesF16AndPacked) {
  Problem gqa = shape(513, 513, 128, 8, 2);
  gqa.kv_heads = 2;
  run_backward({gqa});
  gqa.causal = true;
  run_backward({gqa});
  Problem mqa = shape(300, 1100, 64, 4, 3);
  mqa.kv_heads = 1;
  run_backward({mqa});
  Problem bhsd = shape(777, 777, 128, 3, 2);
  bhsd.causal = true;
  run_backward({bhsd, std::nullopt, true});
  Problem f16 = shape(1000, 1000, 64, 2, 2);
  f16.dtype = ir::DType::F16;
  run_backward({f16});
  f16.head_dim = 256;
  run_backward({f16, std::nullopt, true});
  Problem peaky = shape(1000, 1000, 128);
  run_backward({peaky, std::nullopt, false, 4.0f});
  for (const int d : {64, 96, 128, 256}) {
    Problem p = shape(1, 1, d, 4);
    p.kv_heads = 2;
    p.causal = true;
    p.set_lengths({1, 7, 300, 2049});
    run_backward({p});
    p.causal = false;
    p.set_lengths({1, 7, 300, 2049}, {5, 7, 1000, 17});
    run_backward({p});
  }
}

// Asked for the same bits every run, the tuner leaves out the atomic dQ: the checks
// above then compare dQ's bytes too (the default on an H200 is dq=atomic).
TEST_F(AttentionTest, BackwardDeterministicProblemsGiveTheSameBits) {
  for (const int d : {64, 128}) {
    Problem p = shape(1000, 1000, d, 4, 2);
    p.kv_heads = 2;
    p.causal = true;
    p.backward = p.deterministic = true;
    const Config chosen = tuner::attention_default(p, device());
    EXPECT_FALSE(chosen.atomic_dq) << chosen.to_string();
    run_backward({p}, chosen);
  }
}

// The atomic dQ adds every block's share into f32 sums that must start at zero on
// every launch, also in the query tiles no dK/dV block reaches (their queries see no
// key: dQ = 0 there). So the memory is left full of NaN bits first (a large buffer
// filled and freed just before the backward's workspace is allocated: the driver
// may hand that memory out again, as it usually does), and run_backward's second
// launch starts from the first one's sums. (A version in which the first block to
// reach a tile stored its share instead of the prep kernel zeroing the sums passed
// this too, and was slower: docs/perf/2026-12-04-h200-dq-sums-first-store.md.)
TEST_F(AttentionTest, BackwardAtomicDqOverStaleMemory) {
  const Config atomic = Config::parse("mma=wgmma,bm=64,bn=128,stages=2,dq=atomic");
  for (const int d : {64, 128}) {
    for (const auto& [sq, sk, left] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
             {1000, 17, -1}, {700, 129, -1}, {1000, 1000, 100}, {333, 2000, 0}}) {
      Problem p = shape(sq, sk, d, 3, 2);
      p.causal = true;  // bottom-right: with S_q > S_k the first queries see no key
      p.window_left = left;
      p.backward = true;
      const std::vector<Config> space = tuner::attention_space(p, device());
      if (std::find(space.begin(), space.end(), atomic) == space.end())
        GTEST_SKIP() << "no atomic dQ on this GPU (" << device().arch() << ")";
      {
        cuda::DeviceBuffer stale(size_t{512} << 20);
        stale.fill_bytes(0xFF);
      }
      run_backward({p}, atomic);
    }
  }
}

// The atomic dQ where queries see no key: a mask modifier that keeps no score of
// whole query tiles (queries 128 .. 255 alone see keys here), a causal mask with
// S_q > S_k (the first queries see none), a grouped packed batch whose sequences end
// inside a tile (a tile's box adds its rows past the end, as zeros, into the next
// sequence's sums), and a window over many query tiles (S = 4097): dQ = 0 where no
// key is seen, in both of run_backward's launches (the sums start at zero again).
TEST_F(AttentionTest, BackwardAtomicDqWhereQueriesSeeNoKey) {
  std::vector<Problem> problems;
  for (const int d : {64, 128}) {
    Problem rows = shape(700, 300, d, 4);
    rows.kv_heads = 2;
    rows.mask_mod = "(q_idx >= 128) * (q_idx < 256)";
    problems.push_back(rows);
    Problem early = shape(1000, 130, d, 2, 2);
    early.causal = true;  // bottom-right: the first 870 queries see no key
    problems.push_back(early);
  }
  Problem packed = shape(1, 1, 128, 4);
  packed.kv_heads = 1;
  packed.causal = true;
  packed.set_lengths({1, 7, 300, 2049}, {5, 200, 300, 100});
  problems.push_back(packed);
  Problem long_window = shape(4097, 4097, 128, 2);
  long_window.window_left = 300;
  long_window.window_right = 0;
  problems.push_back(long_window);
  run_backward_atomic(problems);
}

// Many more dK/dV blocks than SMs (on a 132-SM GPU), of unequal work: windows, a
// mask modifier with ALiBi, grouped heads, and a packed batch whose short sequences
// leave most key blocks empty. (Written for a persistent dK/dV kernel whose blocks
// walked these units, carrying their pipelines' phases from one to the next; that
// kernel was slower and was not kept:
// docs/perf/2026-12-07-h100-persistent-dkdv-and-pingpong-descriptors.md.)
TEST_F(AttentionTest, BackwardManyBlocksOfUnequalWork) {
  std::vector<Problem> problems;
  for (const int d : {64, 128}) {
    problems.push_back(shape(1000, 1000, d, 16, 4));  // 8 x 16 x 4 = 512 blocks
    Problem grouped = shape(1500, 1700, d, 32, 2);    // 14 x 8 x 2 = 224 blocks
    grouped.kv_heads = 8;
    grouped.window_left = 200;
    grouped.window_right = 0;
    problems.push_back(grouped);
  }
  Problem modified = shape(2000, 2000, 128, 8, 4);  // 16 x 8 x 4 = 512 blocks
  modified.score_mod = kAlibi;
  modified.mask_mod = kSlidingWindow;
  problems.push_back(modified);
  Problem packed = shape(1, 1, 128, 24);  // 17 x 8 x 5 = 680 blocks, most of them empty
  packed.kv_heads = 8;
  packed.set_lengths({1, 7, 300, 2049, 513});
  problems.push_back(packed);
  run_backward_atomic(problems);
}

TEST_F(AttentionTest, BackwardEveryConfigOfTheSpace) {
  for (const int d : {64, 96, 128, 256}) {
    for (const bool causal : {false, true}) {
      Problem p = shape(301, 517, d, 2, 2);
      p.causal = causal;
      p.backward = true;
      for (const Config& c : tuner::attention_space(p, device())) run_backward({p}, c);
    }
  }
}

TEST_F(AttentionTest, BackwardBadTensorsAreUserErrors) {
  Problem p = shape(64, 64, 64);
  AttentionBackward backward(runtime(), p);
  cuda::DeviceBuffer buffer(64 * 2 * 64 * 2 + 64);
  const CUdeviceptr base = buffer.get();
  BackwardTensors no_lse{
      .q = base, .k = base, .v = base, .o = base, .d_o = base, .dq = base, .dk = base, .dv = base};
  EXPECT_THROW(backward.launch(no_lse, nullptr), UserError);
  BackwardTensors misaligned = no_lse;
  misaligned.lse = base;
  misaligned.dk = base + 2;
  EXPECT_THROW(backward.launch(misaligned, nullptr), UserError);
  EXPECT_THROW(AttentionBackward(runtime(), p, Config::parse("mma=wgmma,stages=4")), UserError);
  Problem d96 = p;
  d96.head_dim = 96;
  EXPECT_THROW(AttentionBackward(runtime(), d96, Config::parse("mma=wgmma")), UserError);
}

}  // namespace
}  // namespace kjit::attention
