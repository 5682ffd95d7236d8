"""kjit's Python API as a careless caller meets it: every bad argument is a kjit.UserError
(a ValueError) naming the value and what is allowed, before anything reaches C (ctypes
wraps an int that does not fit and cuts a string at its first NUL, silently).

    KJIT_LIBRARY=build/release/runtime/libkjit_c.so PYTHONPATH=python \
        python3 tests/python/api_test.py

The first part needs neither a GPU nor PyTorch (CI runs it). The second part (the
tensor checks of matmul and attention) runs where PyTorch sees a CUDA device, and is
reported as skipped elsewhere. Exit 0 when everything that ran passed.
"""
import os
import subprocess
import sys

import kjit

failures = []


def check(condition, what):
    print(("ok:   " if condition else "FAIL: ") + what)
    if not condition:
        failures.append(what)


def refused(call, *words):
    """Whether call() raises kjit.UserError whose message holds every word."""
    try:
        call()
    except kjit.UserError as error:
        message = str(error)
        missing = [w for w in words if w not in message]
        if missing:
            print(f"      message {message!r} lacks {missing}")
        return not missing
    except Exception as error:  # noqa: BLE001 (the point: which kind of error)
        print(f"      raised {type(error).__name__}: {error}")
        return False
    print("      accepted")
    return False


# ---- without a GPU or PyTorch -------------------------------------------------------

check("__global__" in kjit.emit("y = x * 2", n=1024, gpu="h200"), "emit works")
check(refused(lambda: kjit.emit("y = x", n=2**64 + 5, gpu="h200"), "n is",
              "9223372036854775807"),
      "emit: n past int64 is refused (it wrapped to 5)")
check(refused(lambda: kjit.emit("y = x", n=0, gpu="h200"), "n is 0"), "emit: n = 0")
check(refused(lambda: kjit.emit("y = x", n=1.5, gpu="h200"), "n must be an integer"),
      "emit: a float n")
check(refused(lambda: kjit.emit(123, gpu="h200"), "expression must be a string"),
      "emit: an int expression (AttributeError before)")
check(refused(lambda: kjit.emit("y = x\x00 + junk", gpu="h200"), "NUL character at 5"),
      "emit: a NUL (C emitted 'y = x')")
check(refused(lambda: kjit.emit("y = x", gpu=90), "gpu must be a string"), "emit: gpu=90")
check(refused(lambda: kjit.compile("y = x", arch="sm_90\x00junk"), "arch holds a NUL"),
      "compile: a NUL in arch")
check(refused(lambda: kjit.compile("y = x", arch="sm_80a"), "'sm_80a' does not exist"),
      "compile: sm_80a (NVRTC's flag error before)")

at = dict(seq_q=128, head_dim=64, gpu="h200")
check("FlashForward" in kjit.emit_attention(**at), "emit_attention works")
check("FlashForward" in kjit.emit_attention(**at, window=[16, 0]), "a window as a list")
for name, value, words in (("heads", 0, ("heads is 0",)),
                           ("batch", -2, ("batch is -2",)),
                           ("head_dim", 2**32 + 64, ("head_dim is 4294967360",)),
                           ("seq_k", 2**64 + 7, ("seq_k is",)),
                           ("window", (2**64, 0), ("window left is",)),
                           ("window", 16, ("window is (left, right)",)),
                           ("window", (1, 2, 3), ("window is (left, right)",)),
                           ("causal", "no", ("causal must be True or False",)),
                           ("scale", 0.0, ("scale must be a positive finite number",)),
                           ("scale", float("nan"), ("scale must be",)),
                           ("scale", 1e39, ("scale 1e+39 is outside",)),
                           ("score_mod", "s\udc80", ("score_mod is not valid Unicode at 1",)),
                           ("score_mod", 5, ("score_mod must be a string",)),
                           ("mask_mod", "kv_idx <= q_idx\x00junk", ("mask_mod holds a NUL",)),
                           ("dtype", "f64", ("attention dtype 'f64' is not bf16 or f16",)),
                           ("dtype", "f32", ("attention dtype 'f32' is not bf16 or f16",))):
    check(refused(lambda: kjit.emit_attention(**{**at, name: value}), *words),
          f"emit_attention: {name}={value!r}")
# causal with a window's right side above 0: the C API dropped that side (the CLI
# refused it); and a length within 1023 of 2^31 wrapped the kernels' tile counts.
check(refused(lambda: kjit.emit_attention(**at, causal=True, window=(16, 5)),
              "causal with window 16:5"), "emit_attention: causal with window (16, 5)")
check("FlashForward" in kjit.emit_attention(**at, causal=True, window=(16, 0)),
      "emit_attention: causal with window (16, 0)")
check(refused(lambda: kjit.emit_attention(**{**at, "seq_k": 2**31 - 1}), "2147482624"),
      "emit_attention: seq_k 2^31 - 1")

# The argument checks of the tensor API's helpers, which need no tensors.
check(kjit._matmul_shapes(3, 5, 7, 2, "tn", True) == ((2, 7, 3), (2, 7, 5), (2, 3, 5)),
      "matmul shapes per layout")
check(kjit._attention_shapes(2, 8, 2, 100, 50, 64, "bhsd") ==
      ((2, 8, 100, 64), (2, 2, 50, 64), (2, 8, 100)), "attention shapes, bhsd")
check(refused(lambda: kjit._attention_shapes(1, 1, 1, 1, 1, 64, "BHSD"), "layout 'BHSD'"),
      "attention layout is checked (anything but bshd read as bhsd)")
check(kjit._window_arg([None, 0]) == (None, 0), "a window side may be None")
# Packed batches: lengths as ints >= 1, q's and k's of one count; shapes per token.
check(kjit._packed_lengths([3, 1], None) == ((3, 1), (3, 1)), "packed: k's lengths as q's")
check(kjit._packed_lengths((2,), [5]) == ((2,), (5,)), "packed: k's lengths of their own")
check(kjit._packed_lengths(None, None) is None, "not packed")
try:
    kjit.emit("y = x +", gpu="h200")
except kjit.UserError as error:
    import copy
    import pickle
    again = pickle.loads(pickle.dumps(error))
    check(type(again) is kjit.UserError and str(again) == str(error) and
          again.status == error.status and copy.copy(error).status == error.status,
          "a kjit error pickles and copies (a worker's error reached its parent as a TypeError)")
for args, words in ((([], None), ("non-empty list",)), (([3, 0], None), ("seqlens_q[1] is 0",)),
                    (([2, 1.5], None), ("seqlens_q[1] must be an integer",)),
                    (([2, 2], [2]), ("2 sequences but seqlens_k 1",)),
                    ((None, [4]), ("seqlens_k is given without seqlens_q",)),
                    (("12", None), ("list of sequence lengths",))):
    check(refused(lambda: kjit._packed_lengths(*args), *words), f"packed lengths {args!r}")
check(kjit._attention_shapes(2, 8, 2, 5, 7, 64, "bshd", ((2, 5), (7, 3))) ==
      ((7, 8, 64), (10, 2, 64), (8, 7)), "attention shapes, packed")
check(refused(lambda: kjit._attention_shapes(2, 8, 2, 5, 7, 64, "bhsd", ((2, 5), (7, 3))),
              "layout 'bhsd' does not apply"), "attention shapes: packed takes no bhsd")
check(refused(lambda: kjit._attention_problem(3, 4, 4, None, None, 64, "bf16", False, None, None,
                                              packed=((2, 5), (2, 5))),
              "batch is 3 but the packed lengths give 2"), "attention: batch against the lengths")
problem = kjit._attention_problem(None, 4, 2, None, None, 64, "bf16", False, None, None,
                                  packed=((2, 5), (7, 3)))
check((problem.batch, problem.seq_q, problem.seq_k, problem.sequences) == (2, 5, 7, 2) and
      problem.seqlens_k[1] == 3, "attention problem, packed: batch, longest lengths, offsets")

# set_log: the callback must be callable; topics alone keep it; unknown topics warn.
lines = []
check(refused(lambda: kjit.set_log("all", "str"), "callback must be callable"),
      "set_log: a non-callable callback (a TypeError per line before)")
kjit.set_log("none", lines.append)
kjit.set_log("conifg")  # no callback given: the one above stays
check(any("no log topic 'conifg'" in line for line in lines),
      "set_log: an unknown topic warns, through the callback kept")
kjit.set_log("", None)

# A callback may call kjit (it deadlocked on the log's lock), and swapping callbacks
# while other threads log frees none in use (a segfault within seconds before: the
# old callback was freed before the C side let go of it). In a child process: a
# crash or a hang fails the check instead of the test.
race = """
import threading, time, kjit
kjit.set_log("", lambda line: kjit.set_log(None, None))
kjit.set_log("conifg")  # warns through the callback, which replaces itself
stop = False
def log():
    while not stop:
        kjit._set_log_topics(b"bogus")  # a warning through the current callback
threads = [threading.Thread(target=log, daemon=True) for _ in range(4)]
kjit.set_log(None, lambda line: None)
for t in threads:
    t.start()
start = time.time()
while time.time() - start < 4:
    kjit.set_log(None, lambda line: None)
stop = True
for t in threads:
    t.join()
print("swapped")
"""
try:
    result = subprocess.run([sys.executable, "-c", race], capture_output=True, text=True,
                            timeout=60)
    check(result.returncode == 0 and "swapped" in result.stdout,
          f"set_log: callbacks that call kjit, swapped while threads log (exit "
          f"{result.returncode}: {result.stderr[-300:]})")
except subprocess.TimeoutExpired:
    check(False, "set_log: a callback that calls kjit hung")

# The kernel caches keep at most _CACHE_LIMIT handles, the oldest going first.
cache = {}
for i in range(kjit._CACHE_LIMIT + 44):
    kjit._cached(cache, i, lambda: object())
check(len(cache) == kjit._CACHE_LIMIT and 0 not in cache and kjit._CACHE_LIMIT + 43 in cache,
      "kernel caches are bounded (elementwise and matmul grew without bound before)")

# A CPU-only PyTorch: the current device is a kjit.Error, not torch's own (a stub
# torch in a child process, so this process keeps the real one, if any).
stub = '''
import sys, types
torch = types.ModuleType("torch")
torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.bool = range(5)
torch.cuda = types.SimpleNamespace(is_available=lambda: False,
                                   current_device=lambda: (_ for _ in ()).throw(
                                       AssertionError("Torch not compiled with CUDA enabled")))
sys.modules["torch"] = torch
import kjit
try:
    kjit._device_index(None)
except kjit.Error as e:
    print("kjit.Error", e.status, e)
'''
result = subprocess.run([sys.executable, "-c", stub], capture_output=True, text=True)
check(result.stdout.startswith("kjit.Error 3 no CUDA device"),
      "a CPU-only PyTorch: no CUDA device is a kjit.Error (" +
      (result.stdout + result.stderr).strip()[-120:] + ")")

# The library's path in the error when it cannot be loaded.
env = dict(os.environ, KJIT_LIBRARY="/nonexistent/libkjit_c.so")
result = subprocess.run([sys.executable, "-c", "import kjit"], env=env, capture_output=True,
                        text=True)
check(result.returncode != 0 and "KJIT_LIBRARY" in result.stderr and
      "ImportError" in result.stderr, "a missing library names KJIT_LIBRARY")

# ---- tensors: PyTorch with a CUDA device -------------------------------------------

try:
    import torch
    have_cuda = torch.cuda.is_available()
except ImportError:
    torch, have_cuda = None, False
    try:
        kjit.elementwise("y = x")
        check(False, "elementwise without PyTorch")
    except ImportError as error:
        check("pip install torch" in str(error), "elementwise without PyTorch says what to install")

if not have_cuda:
    print("skipped: the tensor checks need PyTorch and a CUDA device")
else:
    cuda = dict(device="cuda", dtype=torch.bfloat16)
    q = torch.randn(2, 64, 4, 64, **cuda)
    k = torch.randn(1, 64, 4, 32, **cuda)
    check(refused(lambda: kjit.attention(q, k, k), "batch and head dim differ"),
          "attention: k's batch and head dim against q's (read out of bounds before)")
    kernel = kjit.Attention(2, 4, 64, 64)
    k = torch.randn(2, 32, 4, 64, **cuda)
    check(refused(lambda: kernel(q, k, k), "k has shape (2, 32, 4, 64)", "(2, 64, 4, 64)"),
          "Attention(): k of another sequence length")
    check(refused(lambda: kernel(q, q, q, layout="BHSD"), "layout 'BHSD'"),
          "Attention(): the layout")
    check(refused(lambda: kernel(q, q, q, lse=torch.empty(2, 4, 63, device="cuda")),
                  "lse has shape"), "Attention(): lse of the wrong shape")
    # A broadcast (expand()ed) K shares one head: read as four (past its end) before.
    k1 = torch.randn(2, 64, 1, 64, **cuda)
    o_expanded, _ = kjit.attention(q, k1.expand(2, 64, 4, 64), k1.expand(2, 64, 4, 64))
    o_copied, _ = kjit.attention(q, k1.expand(2, 64, 4, 64).contiguous(),
                                 k1.expand(2, 64, 4, 64).contiguous())
    check(torch.equal(o_expanded, o_copied), "attention: an expand()ed k and v")
    # Packed batches: 3-D tensors, tokens as the lengths add up, no bhsd.
    check(refused(lambda: kjit.attention(q, q, q, seqlens_q=[64, 64]), "are 3-D"),
          "attention, packed: 4-D q refused")
    packed = torch.randn(100, 4, 64, **cuda)
    check(refused(lambda: kjit.attention(packed, packed, packed, seqlens_q=[60, 30]),
                  "q has shape (100, 4, 64)", "(90, 4, 64)"),
          "attention, packed: tokens against the lengths")
    check(refused(lambda: kjit.attention(packed, packed, packed, seqlens_q=[60, 40],
                                         layout="bhsd"), "layout 'bhsd' does not apply"),
          "attention, packed: no bhsd")
    o_packed, lse_packed = kjit.attention(packed, packed, packed, seqlens_q=[60, 40])
    o_first, _ = kjit.attention(packed[None, :60], packed[None, :60], packed[None, :60])
    # (Its config may differ from the packed problem's: the same values, to rounding.)
    check(tuple(lse_packed.shape) == (4, 100) and
          torch.allclose(o_packed[:60].float(), o_first[0].float(), atol=2e-2, rtol=2e-2),
          "attention, packed: the first sequence as a batch of its own")
    check(refused(lambda: kernel(q, q, q, out=torch.empty(2, 64, 1, 64, **cuda).expand(2, 64, 4,
                                                                                         64)),
                  "out is a broadcast view"), "Attention(): a broadcast out")
    # The modifiers' operands: a slope per head, f32 (the kernel read 4 from a shorter
    # array, and a bf16 one as f32, before).
    alibi = "slope:f32[heads]; s - slope * abs(q_idx - kv_idx)"
    slopes = torch.rand(4, device="cuda")
    kjit.attention(q, q, q, score_mod=alibi, operands=(slopes,))
    check(refused(lambda: kjit.attention(q, q, q, score_mod=alibi, operands=(slopes[:2],)),
                  "operand 'slope' has shape (2,)", "4 values"), "attention: a short operand")
    check(refused(lambda: kjit.attention(q, q, q, score_mod=alibi,
                                         operands=(slopes.bfloat16(),)),
                  "operand 'slope' is torch.bfloat16"), "attention: an operand's dtype")
    check(refused(lambda: kjit.attention(q, q, q, score_mod=alibi), "read 1 operand(s) (slope)"),
          "attention: a missing operand")
    check(refused(lambda: kjit.attention(q.cpu(), q, q), "q is on cpu"),
          "attention: a CPU tensor ('device -1 does not exist' before)")
    a, b = torch.randn(64, 32, **cuda), torch.randn(32, 48, **cuda)
    bias = torch.zeros(3, **cuda)
    plans = len(kjit._matmul_cache)
    check(refused(lambda: kjit.matmul(a, b, epilogue="acc + bias", bias=bias),
                  "operand 'bias' (column) has shape (3,)", "(48,)"),
          "matmul: a bias of the wrong length (read out of bounds before)")
    # A plan is kept only after a call with it passed every check: a call refused by
    # the kernel's checks (b on another GPU: the second such call launched before)
    # keeps none, so the same call is refused again.
    check(len(kjit._matmul_cache) == plans, "matmul: a refused call keeps no plan")
    if torch.cuda.device_count() > 1:
        other = b.to("cuda:1")
        for attempt in (1, 2):
            check(refused(lambda: kjit.matmul(a, other), "b is on cuda:1"),
                  f"matmul: b on another GPU, call {attempt}")
    mm = kjit.Matmul(64, 48, 32)
    check(refused(lambda: mm(a, torch.randn(32, 40, **cuda)), "b has shape (32, 40)"),
          "Matmul(): b of the wrong shape")
    padded = torch.empty(64, 64, **cuda)[:, :48]
    c = mm(a, b, out=padded)
    check(torch.allclose(c.float(), (a.float() @ b.float()), atol=0.5, rtol=0.02),
          "Matmul(): an out with padded rows is written row by row (packed before)")
    # A leading dimension of 0 means "packed" to the C API: a broadcast row (expand)
    # read 64 rows from one before, and a broadcast out wrote 64 rows into one.
    row = torch.randn(1, 32, **cuda)
    c = mm(row.expand(64, 32), b)
    check(torch.allclose(c.float(), (row.float() @ b.float()).expand(64, 48), atol=0.5,
                         rtol=0.02), "Matmul(): a broadcast a (expand) is read as its rows")
    column = torch.randn(32, 1, **cuda)
    c = kjit.matmul(a, column.expand(32, 48))
    check(torch.allclose(c.float(), (a.float() @ column.float()).expand(64, 48), atol=0.5,
                         rtol=0.02), "matmul: a broadcast b (expand) is read as its rows")
    check(refused(lambda: mm(a, b, out=torch.empty(1, 48, **cuda).expand(64, 48)),
                  "out is broadcast"), "Matmul(): a broadcast out (written out of bounds before)")
    check(refused(lambda: kjit.matmul(1, b), "a must be a torch.Tensor"),
          "matmul: not a tensor (AttributeError before)")
    # A planned call launches without the first call's checks: what its key does not
    # hold (CPU or numpy arrays of a planned call's shape, operands) is still refused.
    kjit.matmul(a, b)
    check(refused(lambda: kjit.matmul(a.cpu(), b), "a is on cpu"),
          "matmul: a on the CPU, shaped as a planned call's")
    check(refused(lambda: kjit.matmul(a, b.cpu()), "b is on cpu"),
          "matmul: b on the CPU, shaped as a planned call's")
    check(refused(lambda: kjit.matmul(a, b.float().numpy(force=True)),
                  "b must be a torch.Tensor"), "matmul: a numpy b, shaped as a planned call's")
    check(refused(lambda: kjit.matmul(a, b, bias=bias), "unknown ['bias']"),
          "matmul: an operand the epilogue does not read, on the planned path")
    ew = kjit.elementwise("y = x + g")
    x = torch.randn(8, **cuda)
    check(refused(lambda: ew(x, x, g=x), "given twice"), "elementwise: an input given twice")
    check(refused(lambda: ew(x, 1), "input 'g' must be a torch.Tensor"),
          "elementwise: not a tensor (AttributeError before)")
    check(refused(lambda: ew(x=x, h=x), "no input 'h'"),
          "elementwise: every input by name, one of them misspelt")
    minus = kjit.elementwise("y = x - g", "bf16")
    check(torch.equal(minus(g=x, x=2 * x), minus(2 * x, x)),
          "elementwise: inputs by name in another order than the expression's")
    # New outputs come from empty tensors of their dtype on the kernel's device.
    wide = kjit.matmul(a, b, out_dtype=torch.float32)
    again = kjit.matmul(a, b, out_dtype=torch.float32)  # the planned path
    check(wide.dtype == again.dtype == torch.float32 and wide.shape == (64, 48) and
          torch.equal(wide, again), "matmul: a float32 out from bf16 inputs, twice")
    two = kjit.elementwise("y = x * g; m = x > g", "bf16")
    y, mask = two(x, 2 * x)
    check(y.dtype == torch.bfloat16 and mask.dtype == torch.bool and mask.shape == x.shape and
          y.device == x.device, "elementwise: two outputs of their own dtypes")
    biased = kjit.Matmul(64, 48, 32, epilogue="acc + bias")
    bias = torch.randn(48, **cuda)
    check(torch.equal(biased(a, b, bias.view(1, 48)), biased(a, b, bias)),
          "Matmul(): a column operand of shape (1, n)")
    check(refused(lambda: biased(a, b, bias.float()), "operand 'bias' is torch.float32"),
          "Matmul(): an operand's dtype")
    check(refused(lambda: biased(a, b, bias.cpu()), "operand 'bias' is on cpu"),
          "Matmul(): an operand on the CPU")
    check(refused(lambda: biased(a.cpu(), b, bias), "a is on cpu"), "Matmul(): a on the CPU")
    check(refused(lambda: biased(a.float(), b, bias), "a is torch.float32"),
          "Matmul(): a's dtype")
    check(refused(lambda: biased(a, b, bias, out=torch.empty(64, 48, device="cuda")),
                  "out is torch.float32"), "Matmul(): out's dtype")

print(f"{len(failures)} failed" if failures else "all passed")
sys.exit(1 if failures else 0)
