"""kjit from Python: fused elementwise chains and tensor-core matmuls with fused
epilogues, compiled at run time, tuned per GPU, on PyTorch tensors without copies.

    import torch, kjit
    silu_gate = kjit.elementwise("y = x * sigmoid(x) * g")
    y = silu_gate(x=x, g=g)                       # one fused kernel, on the current stream
    c = kjit.matmul(a, b, epilogue="gelu(acc + bias)", bias=bias)
    print(kjit.emit("y = sin(x)^2 + cos(x)^2"))  # the CUDA C kjit generates (no GPU needed)

The ops are also registered with torch.library (kjit::elementwise, kjit::matmul),
so torch.compile'd functions call them without a graph break. Errors are
kjit.Error (kjit.UserError for bad input) with kjit's message.

The package wraps kjit's C API (libkjit_c, include/kjit/kjit_c.h) with ctypes; set
KJIT_LIBRARY to use another build of it.
"""
import ctypes
import math
import numbers
import os
import pathlib
import re
import threading

__all__ = ["Error", "UserError", "version", "emit", "compile", "elementwise", "matmul",
           "attention", "emit_attention", "Elementwise", "Matmul", "Attention",
           "AttentionBackward", "set_log"]


class Error(RuntimeError):
    """A kjit failure; `status` is the C API's kjit_status."""

    def __init__(self, message, status=1):
        super().__init__(message)
        self.status = status

    def __reduce__(self):  # pickled with its status (a worker process's error reaches its parent)
        return (type(self), (str(self), self.status))


class UserError(Error, ValueError):
    """Invalid input: the message says what is wrong and how to fix it."""


# ---- the shared library ---------------------------------------------------------

def _find_library():
    explicit = os.environ.get("KJIT_LIBRARY")
    if explicit:
        return explicit
    here = pathlib.Path(__file__).resolve().parent
    for candidate in (here / "libkjit_c.so",  # pip install: beside this file
                      here.parents[2] / "libkjit_c.so",  # cmake --install: <prefix>/lib
                      here.parents[1] / "build" / "release" / "runtime" / "libkjit_c.so"):
        if candidate.exists():
            return str(candidate)
    return "libkjit_c.so"


def _load_library():
    path = _find_library()
    try:
        return ctypes.CDLL(path)
    except OSError as error:
        raise ImportError(f"kjit cannot load its C library {path!r} ({error}); build it "
                          "(tools/quickstart.sh build), install it beside this package, or set "
                          "KJIT_LIBRARY to the path of libkjit_c.so") from error


_lib = _load_library()


class _Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_uint64), ("dtype", ctypes.c_int), ("rank", ctypes.c_int),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64))]


class _MatmulProblem(ctypes.Structure):
    _fields_ = [("m", ctypes.c_int64), ("n", ctypes.c_int64), ("k", ctypes.c_int64),
                ("batch", ctypes.c_int64), ("layout", ctypes.c_char_p), ("input", ctypes.c_int),
                ("output", ctypes.c_int), ("epilogue", ctypes.c_char_p)]


class _MatmulArgs(ctypes.Structure):
    _fields_ = [("a", ctypes.c_uint64), ("b", ctypes.c_uint64), ("c", ctypes.c_uint64),
                ("c0", ctypes.c_uint64), ("lda", ctypes.c_int64), ("ldb", ctypes.c_int64),
                ("ldc", ctypes.c_int64), ("ldc0", ctypes.c_int64), ("alpha", ctypes.c_float),
                ("beta", ctypes.c_float), ("extras", ctypes.POINTER(ctypes.c_uint64)),
                ("extra_count", ctypes.c_int)]


class _AttentionProblem(ctypes.Structure):
    _fields_ = [("batch", ctypes.c_int64), ("heads", ctypes.c_int64), ("kv_heads", ctypes.c_int64),
                ("seq_q", ctypes.c_int64), ("seq_k", ctypes.c_int64), ("head_dim", ctypes.c_int),
                ("dtype", ctypes.c_int), ("causal", ctypes.c_int), ("windowed", ctypes.c_int),
                ("window_left", ctypes.c_int64), ("window_right", ctypes.c_int64),
                ("scale", ctypes.c_double), ("seqlens_q", ctypes.POINTER(ctypes.c_int64)),
                ("seqlens_k", ctypes.POINTER(ctypes.c_int64)), ("sequences", ctypes.c_int),
                ("score_mod", ctypes.c_char_p), ("mask_mod", ctypes.c_char_p),
                ("deterministic", ctypes.c_int)]


class _AttentionStrides(ctypes.Structure):
    _fields_ = [("batch", ctypes.c_int64), ("seq", ctypes.c_int64), ("head", ctypes.c_int64)]


class _AttentionArgs(ctypes.Structure):
    _fields_ = [("q", ctypes.c_uint64), ("k", ctypes.c_uint64), ("v", ctypes.c_uint64),
                ("o", ctypes.c_uint64), ("lse", ctypes.c_uint64),
                ("q_strides", _AttentionStrides), ("k_strides", _AttentionStrides),
                ("v_strides", _AttentionStrides), ("o_strides", _AttentionStrides),
                ("modifier_operands", ctypes.POINTER(ctypes.c_uint64)),
                ("modifier_operand_count", ctypes.c_int)]


class _AttentionBackwardArgs(ctypes.Structure):
    _fields_ = ([(name, ctypes.c_uint64) for name in
                 ("q", "k", "v", "o", "lse", "d_o", "dq", "dk", "dv")] +
                [(name + "_strides", _AttentionStrides) for name in
                 ("q", "k", "v", "o", "do", "dq", "dk", "dv")] +
                [("modifier_operands", ctypes.POINTER(ctypes.c_uint64)),
                 ("modifier_operand_count", ctypes.c_int)])


_UNIT_STRIDE = (ctypes.c_int64 * 1)(1)


def _declare(name, restype, *argtypes):
    function = getattr(_lib, name)
    function.restype = restype
    function.argtypes = list(argtypes)
    return function


_P = ctypes.c_void_p
_last_error = _declare("kjit_last_error", ctypes.c_char_p)
_version = _declare("kjit_version", ctypes.c_char_p)
_free = _declare("kjit_free", None, _P)
_runtime_create = _declare("kjit_runtime_create", ctypes.c_int, ctypes.c_int, ctypes.POINTER(_P))
_ew_create = _declare("kjit_elementwise_create", ctypes.c_int, _P, ctypes.c_char_p, ctypes.c_int,
                      ctypes.POINTER(_P))
_ew_destroy = _declare("kjit_elementwise_destroy", None, _P)
_ew_inputs = _declare("kjit_elementwise_inputs", ctypes.c_int, _P)
_ew_outputs = _declare("kjit_elementwise_outputs", ctypes.c_int, _P)
_ew_input_name = _declare("kjit_elementwise_input_name", ctypes.c_char_p, _P, ctypes.c_int)
_ew_output_name = _declare("kjit_elementwise_output_name", ctypes.c_char_p, _P, ctypes.c_int)
_ew_input_dtype = _declare("kjit_elementwise_input_dtype", ctypes.c_int, _P, ctypes.c_int)
_ew_output_dtype = _declare("kjit_elementwise_output_dtype", ctypes.c_int, _P, ctypes.c_int)
_ew_launch = _declare("kjit_elementwise_launch", ctypes.c_int, _P, ctypes.POINTER(_Tensor),
                      ctypes.c_int, ctypes.POINTER(_Tensor), ctypes.c_int, _P)
_ew_launch_flat = _declare("kjit_elementwise_launch_flat", ctypes.c_int, _P,
                           ctypes.POINTER(ctypes.c_uint64), ctypes.c_int, ctypes.c_int64, _P)
_mm_create = _declare("kjit_matmul_create", ctypes.c_int, _P, ctypes.POINTER(_MatmulProblem),
                      ctypes.POINTER(_P))
_mm_destroy = _declare("kjit_matmul_destroy", None, _P)
_mm_operands = _declare("kjit_matmul_operands", ctypes.c_int, _P)
_mm_operand_name = _declare("kjit_matmul_operand_name", ctypes.c_char_p, _P, ctypes.c_int)
_mm_operand_kind = _declare("kjit_matmul_operand_kind", ctypes.c_char_p, _P, ctypes.c_int)
_mm_operand_dtype = _declare("kjit_matmul_operand_dtype", ctypes.c_int, _P, ctypes.c_int)
_mm_launch = _declare("kjit_matmul_launch", ctypes.c_int, _P, ctypes.POINTER(_MatmulArgs), _P)
_at_create = _declare("kjit_attention_create", ctypes.c_int, _P, ctypes.POINTER(_AttentionProblem),
                      ctypes.POINTER(_P))
_at_destroy = _declare("kjit_attention_destroy", None, _P)
_at_launch = _declare("kjit_attention_launch", ctypes.c_int, _P, ctypes.POINTER(_AttentionArgs), _P)
_ab_create = _declare("kjit_attention_backward_create", ctypes.c_int, _P,
                      ctypes.POINTER(_AttentionProblem), ctypes.POINTER(_P))
_ab_destroy = _declare("kjit_attention_backward_destroy", None, _P)
_ab_launch = _declare("kjit_attention_backward_launch", ctypes.c_int, _P,
                      ctypes.POINTER(_AttentionBackwardArgs), _P)
# The modifiers' operands of a forward (_at_) or backward (_ab_) handle.
_at_operands = {
    "count": _declare("kjit_attention_operands", ctypes.c_int, _P),
    "name": _declare("kjit_attention_operand_name", ctypes.c_char_p, _P, ctypes.c_int),
    "kind": _declare("kjit_attention_operand_kind", ctypes.c_char_p, _P, ctypes.c_int),
    "dtype": _declare("kjit_attention_operand_dtype", ctypes.c_int, _P, ctypes.c_int)}
_ab_operands = {
    "count": _declare("kjit_attention_backward_operands", ctypes.c_int, _P),
    "name": _declare("kjit_attention_backward_operand_name", ctypes.c_char_p, _P, ctypes.c_int),
    "kind": _declare("kjit_attention_backward_operand_kind", ctypes.c_char_p, _P, ctypes.c_int),
    "dtype": _declare("kjit_attention_backward_operand_dtype", ctypes.c_int, _P, ctypes.c_int)}
_at_emit = _declare("kjit_attention_emit", ctypes.c_int, ctypes.POINTER(_AttentionProblem),
                    ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p))
_emit = _declare("kjit_emit", ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_int64,
                 ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p))
_compile = _declare("kjit_compile", ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_int64,
                    ctypes.c_char_p, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int))

_LOG_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_void_p)
_set_log_callback = _declare("kjit_set_log_callback", None, _LOG_CALLBACK, _P)
_set_log_topics = _declare("kjit_set_log_topics", None, ctypes.c_char_p)
_log_callback = None  # the ctypes callback in use, kept alive


_KEEP = object()  # set_log's "leave the callback as it is"


def set_log(topics=None, callback=_KEEP):
    """What kjit logs and where: `topics` "" (warnings only), "none", "all" or a
    comma-separated list of config, tune, launch and passes ("config,tune"; None: leave them
    as they are); `callback(line)` receives each line, None sends them to stderr, and
    leaving it out keeps the one set before. Lines may arrive from any thread."""
    global _log_callback
    if topics is not None:
        _set_log_topics(_text_arg("set_log topics", topics))
    if callback is _KEEP:
        return
    if callback is not None and not callable(callback):
        raise UserError(f"set_log callback must be callable (it gets each line) or None; got "
                        f"{callback!r}", 1)
    # The C side first: it returns once no call of the old callback is under way, and
    # only then may the old one be freed (freed first, a thread inside kjit called
    # freed memory).
    fresh = None if callback is None else \
        _LOG_CALLBACK(lambda line, user: callback(line.decode("utf-8", "replace")))
    _set_log_callback(_LOG_CALLBACK() if fresh is None else fresh, None)
    _log_callback = fresh


_DTYPES = {"f32": 0, "f16": 1, "bf16": 2, "i32": 3, "bool": 4}
_NAMES = {v: k for k, v in _DTYPES.items()}


def _check(status):
    if status != 0:
        message = _last_error().decode("utf-8", "replace")
        raise (UserError if status == 1 else Error)(message, status)


def _dtype_code(dtype):
    if isinstance(dtype, str) and dtype in _DTYPES:
        return _DTYPES[dtype]
    raise UserError(f"unknown dtype {dtype!r}; the dtypes are {', '.join(_DTYPES)}", 1)


# ---- arguments, checked before they reach C (ctypes wraps an int that does not fit
# and cuts a string at its first NUL, silently) --------------------------------------

_INT64_MAX = (1 << 63) - 1
_INT32_MAX = (1 << 31) - 1


def _int_arg(name, value, low=1, high=_INT64_MAX):
    """`value` as an int in [low, high], else a UserError naming it."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise UserError(f"{name} must be an integer; got {value!r}", 1)
    if not low <= value <= high:
        raise UserError(f"{name} is {int(value)}; it must be in [{low}, {high}]", 1)
    return int(value)


def _text_arg(name, value, optional=False):
    """`value` (a str; None too when optional) as bytes for C, else a UserError."""
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise UserError(f"{name} must be a string; got {value!r}", 1)
    if "\0" in value:
        raise UserError(f"{name} holds a NUL character at {value.index(chr(0))} (C would end "
                        f"the text there)", 1)
    try:
        return value.encode()
    except UnicodeEncodeError as e:  # a lone surrogate, e.g. from a bytes path decoded loosely
        raise UserError(f"{name} is not valid Unicode at {e.start} ({value[e.start]!r} has no "
                        f"UTF-8 form)", 1) from None


def _bool_arg(name, value):
    if isinstance(value, bool) or (isinstance(value, numbers.Integral) and value in (0, 1)):
        return bool(value)
    raise UserError(f"{name} must be True or False; got {value!r}", 1)


def _window_arg(window):
    """None, or (left, right): keys before and after the diagonal, each an int >= 0 or
    None (unbounded), as a tuple."""
    if window is None:
        return None
    if isinstance(window, (str, bytes)) or not hasattr(window, "__len__") or len(window) != 2:
        raise UserError(f"window is (left, right), each a number of keys or None; got "
                        f"{window!r}", 1)
    return tuple(None if side is None else _int_arg(f"window {label}", side, 0, _INT32_MAX)
                 for label, side in zip(("left", "right"), window))


def version():
    """kjit's version and its generator's ("0.1.0 (kjit-gen-2)")."""
    return _version().decode()


def emit(expression, dtype="f32", n=1 << 20, gpu=None):
    """The CUDA C kjit generates for `expression` over n elements, with the tuner's
    config for `gpu` ("h200", "h100", "a100"; None: GPU 0, else an H200). No GPU needed.
    `n` sizes the one dim named n: an expression with other dims (x:f32[m,n]) is
    refused here; `kjit emit EXPR --m M --n N` plans those, and kjit.elementwise runs
    them on tensors of any shape."""
    source = ctypes.c_void_p()
    _check(_emit(_text_arg("expression", expression), _dtype_code(dtype), _int_arg("n", n),
                 _text_arg("gpu", gpu, optional=True), ctypes.byref(source)))
    try:
        return ctypes.string_at(source).decode()
    finally:
        _free(source)


def compile(expression, dtype="f32", n=1 << 20, arch="sm_90"):  # noqa: A001 (kjit's verb)
    """NVRTC-compiles the kernel of `expression` for `arch` (sm_80, sm_86, sm_87, sm_89,
    sm_90 or sm_90a: the GPUs kjit plans for); returns its registers and spilled bytes.
    No GPU needed. One dim named n, as for emit()."""
    registers, spills = ctypes.c_int(0), ctypes.c_int(0)
    _check(_compile(_text_arg("expression", expression), _dtype_code(dtype), _int_arg("n", n),
                    _text_arg("arch", arch), ctypes.byref(registers), ctypes.byref(spills)))
    return {"registers": registers.value, "spill_bytes": spills.value}


def _seqlens_arg(name, lengths):
    """Per-sequence lengths of a packed batch (a list or tuple of ints, or a 1-D integer
    tensor on any device) as a tuple of ints >= 1, else a UserError naming them."""
    if hasattr(lengths, "tolist") and hasattr(lengths, "dim"):  # a tensor
        if lengths.dim() != 1 or lengths.dtype.is_floating_point or lengths.is_complex():
            raise UserError(f"{name} must be a 1-D integer tensor or a list of ints; got a "
                            f"{lengths.dim()}-D {lengths.dtype} tensor", 1)
        lengths = lengths.tolist()
    if isinstance(lengths, (str, bytes)) or not hasattr(lengths, "__len__") or not lengths:
        raise UserError(f"{name} must be a non-empty list of sequence lengths; got "
                        f"{lengths!r}", 1)
    return tuple(_int_arg(f"{name}[{i}]", n, 1, _INT32_MAX) for i, n in enumerate(lengths))


def _packed_lengths(seqlens_q, seqlens_k):
    """(lengths of q, lengths of k) of a packed batch, or None when seqlens_q is None."""
    if seqlens_q is None:
        if seqlens_k is not None:
            raise UserError("seqlens_k is given without seqlens_q (a packed batch gives "
                            "seqlens_q, and seqlens_k where the keys' lengths differ)", 1)
        return None
    lq = _seqlens_arg("seqlens_q", seqlens_q)
    lk = lq if seqlens_k is None else _seqlens_arg("seqlens_k", seqlens_k)
    if len(lk) != len(lq):
        raise UserError(f"seqlens_q holds {len(lq)} sequences but seqlens_k {len(lk)}", 1)
    return lq, lk


def _attention_problem(batch, heads, kv_heads, seq_q, seq_k, head_dim, dtype, causal, window,
                       scale, score_mod=None, mask_mod=None, packed=None):
    """The C problem; `packed`: (lengths of q, lengths of k) of a packed batch, which
    then set batch, seq_q and seq_k (those given must agree)."""
    problem = _AttentionProblem()
    if packed is not None:
        lq, lk = packed
        for name, given, value in (("batch", batch, len(lq)), ("seq_q", seq_q, max(lq)),
                                   ("seq_k", seq_k, max(lk))):
            if given is not None and given != value:
                raise UserError(f"{name} is {given!r} but the packed lengths give {value} "
                                f"(leave it out with seqlens_q)", 1)
        batch, seq_q, seq_k = len(lq), max(lq), max(lk)
        arrays = ((ctypes.c_int64 * len(lq))(*lq), (ctypes.c_int64 * len(lk))(*lk))
        problem.seqlens_q = ctypes.cast(arrays[0], ctypes.POINTER(ctypes.c_int64))
        problem.seqlens_k = ctypes.cast(arrays[1], ctypes.POINTER(ctypes.c_int64))
        problem.sequences = _int_arg("sequences", len(lq), 1, _INT32_MAX)
        problem._arrays = arrays  # alive while the problem is (C copies them at create)
    problem.batch, problem.heads = _int_arg("batch", batch), _int_arg("heads", heads)
    problem.kv_heads = problem.heads if kv_heads is None else _int_arg("kv_heads", kv_heads)
    problem.seq_q = _int_arg("seq_q", seq_q)
    problem.seq_k = problem.seq_q if seq_k is None else _int_arg("seq_k", seq_k)
    problem.head_dim = _int_arg("head_dim", head_dim, 1, _INT32_MAX)
    if dtype not in ("bf16", "f16"):
        raise UserError(f"attention dtype {dtype!r} is not bf16 or f16", 1)
    problem.dtype = _dtype_code(dtype)
    problem.causal = 1 if _bool_arg("causal", causal) else 0
    window = _window_arg(window)
    if window is not None:
        left, right = window
        problem.windowed = 1
        problem.window_left = -1 if left is None else left
        problem.window_right = -1 if right is None else right
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, numbers.Real) or
                              not math.isfinite(scale) or scale <= 0):
        raise UserError(f"scale must be a positive finite number (None: 1/sqrt(head_dim)); got "
                        f"{scale!r}", 1)
    problem.scale = scale or 0.0
    problem.score_mod = _text_arg("score_mod", score_mod, optional=True) or None
    problem.mask_mod = _text_arg("mask_mod", mask_mod, optional=True) or None
    return problem


def emit_attention(seq_q, heads=1, head_dim=128, batch=1, kv_heads=None, seq_k=None,
                   dtype="bf16", causal=False, window=None, scale=None, gpu=None,
                   score_mod=None, mask_mod=None):
    """The CUDA C of the flash-attention kernel kjit runs for this problem on `gpu`
    ("h200", "h100", "a100"; None: GPU 0, else an H200). `window`: (left, right) keys
    around the diagonal, None for unbounded. `score_mod`, `mask_mod`: modifiers in
    kjit's IR (e.g. "tanh(s / 50) * 50", "kv_idx <= q_idx"). No GPU needed."""
    problem = _attention_problem(batch, heads, kv_heads, seq_q, seq_k, head_dim, dtype, causal,
                                 window, scale, score_mod, mask_mod)
    source = ctypes.c_void_p()
    _check(_at_emit(ctypes.byref(problem), _text_arg("gpu", gpu, optional=True),
                    ctypes.byref(source)))
    try:
        return ctypes.string_at(source).decode()
    finally:
        _free(source)


# ---- on the GPU, with PyTorch -------------------------------------------------------

_runtimes = {}
_lock = threading.Lock()


def _runtime(device):
    with _lock:
        if device not in _runtimes:
            handle = ctypes.c_void_p()
            _check(_runtime_create(device, ctypes.byref(handle)))
            _runtimes[device] = handle
        return _runtimes[device]


_torch_module = None
_dtype_codes = {}  # torch dtype -> kjit_dtype


def _torch():
    """torch, imported when first needed: emit() and compile() work without it."""
    global _torch_module
    if _torch_module is None:
        try:
            import torch
        except ImportError as error:
            raise ImportError("kjit's tensor API (elementwise, matmul, attention and their "
                              "classes) needs PyTorch: pip install torch. emit, compile and "
                              "emit_attention work without it.") from error
        _dtype_codes.update({torch.float32: 0, torch.float16: 1, torch.bfloat16: 2,
                             torch.int32: 3, torch.bool: 4})
        _torch_module = torch
    return _torch_module


def _torch_dtype(code):
    torch = _torch()
    return {0: torch.float32, 1: torch.float16, 2: torch.bfloat16, 3: torch.int32,
            4: torch.bool}[code]


def _code_of_dtype(dtype):
    _torch()
    code = _dtype_codes.get(dtype)
    if code is None:
        raise UserError(f"kjit takes float32, float16, bfloat16, int32 or bool tensors; got "
                        f"{dtype}", 1)
    return code


def _device_index(device):
    """A CUDA device index from None (the current device), an int, "cuda:1" or a
    torch.device."""
    torch = _torch()
    if isinstance(device, numbers.Integral) and not isinstance(device, bool):
        return _int_arg("device", device, 0, _INT32_MAX)
    if device is not None:
        device = torch.device(device)
        if device.type != "cuda":
            raise UserError(f"kjit runs on CUDA devices; got {device}", 1)
        if device.index is not None:
            return device.index
    # The current device: a CPU-only PyTorch (or no driver) raised its own error here.
    if not torch.cuda.is_available():
        raise Error("no CUDA device: torch.cuda.is_available() is False (a CPU-only PyTorch, "
                    "or no NVIDIA driver)", 3)
    return torch.cuda.current_device()


_current_raw_stream = None  # torch's accessor of a device's current CUstream, found once


def _raw_stream_on(device):
    """The current torch stream of CUDA device `device` (an index), as a CUstream (an int)."""
    global _current_raw_stream
    if _current_raw_stream is None:
        torch = _torch()
        _current_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or \
            (lambda device: torch.cuda.current_stream(device).cuda_stream)
    return _current_raw_stream(device)


def _raw_stream(tensor):
    """The current torch stream of the tensor's device, as a CUstream (an int)."""
    return _raw_stream_on(tensor.get_device())


def _code_of(tensor):
    return _code_of_dtype(tensor.dtype)


def _describe(tensor, keep):
    """A kjit_tensor over a torch tensor (no copy); `keep` holds the arrays alive."""
    if not tensor.is_cuda:
        raise UserError(f"kjit runs on CUDA tensors; this one is on {tensor.device}", 1)
    shape = (ctypes.c_int64 * max(tensor.dim(), 1))(*tensor.shape)
    strides = (ctypes.c_int64 * max(tensor.dim(), 1))(*tensor.stride())
    keep.extend((shape, strides))
    return _Tensor(tensor.data_ptr(), _code_of(tensor), tensor.dim(), shape, strides)


def _expect_tensor(name, value):
    """`value` must be a torch.Tensor (numpy arrays and scalars are not)."""
    torch = _torch()
    if not isinstance(value, torch.Tensor):
        raise UserError(f"{name} must be a torch.Tensor on a CUDA device; got "
                        f"{type(value).__name__}", 1)
    return value


def _expect_on(name, tensor, device):
    """`tensor` must be a CUDA tensor on cuda:`device` (the kernel's)."""
    if not tensor.is_cuda:
        raise UserError(f"kjit runs on CUDA tensors; {name} is on {tensor.device}", 1)
    if tensor.get_device() != device:
        raise UserError(f"{name} is on {tensor.device} but this kernel was made for "
                        f"cuda:{device}", 1)


def _expect_shape(name, shape, expected):
    """`shape` (a tuple of ints) must be `expected`; a UserError naming both."""
    if tuple(shape) != tuple(expected):
        raise UserError(f"{name} has shape {tuple(shape)}; this problem takes "
                        f"{tuple(expected)}", 1)


def _expect_dtype(name, tensor, dtype):
    if tensor.dtype != dtype:
        raise UserError(f"{name} is {tensor.dtype}; this problem takes {dtype}", 1)


def _without_broadcast(name, tensor, output=False):
    """`tensor`, copied where a dimension of more than one element has stride 0 (an
    expand()ed view): the C API reads a stride of 0 as "packed", so a broadcast head or
    batch would be read as distinct memory, past the end of the real one. An output
    may not be broadcast at all."""
    if any(size > 1 and stride == 0 for size, stride in zip(tensor.shape, tensor.stride())):
        if output:
            raise UserError(f"{name} is a broadcast view (strides {tensor.stride()}); an output "
                            "needs an element of its own per position", 1)
        return tensor.contiguous()
    return tensor


def _matmul_shapes(m, n, k, batch, layout, batched):
    """The stored shapes of a, b and c for kjit.Matmul (layout "t": transposed, stored
    row-major; batched: a leading batch dimension)."""
    lead = (batch,) if batched else ()
    a = (m, k) if layout[0] == "n" else (k, m)
    b = (k, n) if layout[1] == "n" else (n, k)
    return lead + a, lead + b, lead + (m, n)


def _matmul_operand_shape(kind, m, n):
    """The shape an epilogue operand of this kind takes (one array for every batch)."""
    return {"row": (m,), "column": (n,), "tensor": (m, n)}[kind]


def _attention_shapes(batch, heads, kv_heads, seq_q, seq_k, head_dim, layout, packed=None):
    """The shapes of q (and o, d_o), of k and v, and of the LSE, in `layout`; for a
    packed batch (`packed`: the lengths of q and of k) [tokens, heads, D] and an LSE of
    [heads, tokens]."""
    if layout not in ("bshd", "bhsd"):
        raise UserError(f"layout {layout!r} is not 'bshd' or 'bhsd'", 1)
    if packed is not None:
        if layout != "bshd":
            raise UserError("a packed batch is [tokens, heads, D] (layout 'bshd' without the "
                            "batch); layout 'bhsd' does not apply", 1)
        total_q, total_k = sum(packed[0]), sum(packed[1])
        return ((total_q, heads, head_dim), (total_k, kv_heads, head_dim), (heads, total_q))
    order = (lambda b, s, h, d: (b, s, h, d)) if layout == "bshd" else \
        (lambda b, s, h, d: (b, h, s, d))
    return (order(batch, seq_q, heads, head_dim), order(batch, seq_k, kv_heads, head_dim),
            (batch, heads, seq_q))


class _Compiled:
    """One kjit_elementwise handle: its inputs and outputs, by name and dtype."""

    def __init__(self, device, text, default):
        handle = ctypes.c_void_p()
        _check(_ew_create(_runtime(device), text.encode(), default, ctypes.byref(handle)))
        self.handle = handle
        self.inputs = [_ew_input_name(handle, i).decode() for i in range(_ew_inputs(handle))]
        self.outputs = [_ew_output_name(handle, i).decode() for i in range(_ew_outputs(handle))]
        self.input_codes = [_ew_input_dtype(handle, i) for i in range(len(self.inputs))]
        self.output_codes = [_ew_output_dtype(handle, i) for i in range(len(self.outputs))]
        self.input_dtypes = [_torch_dtype(c) for c in self.input_codes]
        self.output_dtypes = [_torch_dtype(c) for c in self.output_codes]
        self.input_array = _Tensor * max(len(self.inputs), 1)
        self.output_array = _Tensor * max(len(self.outputs), 1)
        self.pointer_array = ctypes.c_uint64 * (len(self.inputs) + len(self.outputs))
        self._scratch = threading.local()
        self._device = device
        self._templates = None

    def templates(self):
        """An empty tensor per output, of its dtype on this kernel's device: new outputs
        come from their new_empty(shape), which takes dtype and device from them (the
        same call with dtype= costs twice as much; docs/perf/2026-12-05-h200-strides-and-python.md)."""
        if self._templates is None:
            torch = _torch()
            self._templates = [torch.empty(0, dtype=d, device=f"cuda:{self._device}")
                               for d in self.output_dtypes]
        return self._templates

    def pointers(self):
        """This thread's array of addresses for kjit_elementwise_launch_flat (inputs,
        then outputs), made once."""
        array = getattr(self._scratch, "pointers", None)
        if array is None:
            array = self._scratch.pointers = self.pointer_array()
        return array

    def flat_arrays(self):
        """This thread's (inputs, outputs, [n]) kjit_tensor arrays for a flat launch,
        made once: a call fills in the pointers and n (the C call reads them while
        the GIL is released, so each thread has its own)."""
        arrays = getattr(self._scratch, "flat", None)
        if arrays is None:
            dims = (ctypes.c_int64 * 1)(0)
            ins = self.input_array(*[_Tensor(0, c, 1, dims, _UNIT_STRIDE) for c in self.input_codes])
            outs = self.output_array(*[_Tensor(0, c, 1, dims, _UNIT_STRIDE)
                                       for c in self.output_codes])
            arrays = self._scratch.flat = (ins, outs, dims)
        return arrays

    def __del__(self):
        if getattr(self, "handle", None):
            _ew_destroy(self.handle)


class Elementwise:
    """An elementwise expression fused into one kernel; call it on tensors.

    Tensors of one shape, contiguous, run as flat vectors (the fast path), whatever
    their rank. Other calls (strided views, broadcasting between shapes, dtypes other
    than `dtype`) get a kernel with the inputs' dtypes and shapes declared
    ("x:bf16[d0,d1]; b:bf16[1,d1]; ..."), one per pattern, compiled on first use; such
    kernels take outputs of rank 2 at most (reshape a [batch, seq, hidden] view to
    [batch * seq, hidden] first). Inputs are read in place, outputs are new contiguous
    tensors."""

    def __init__(self, expression, dtype=None, device=None):
        _text_arg("expression", expression)
        self.expression = expression
        self.device = _device_index(device)
        self._default = _dtype_code(dtype or "f32")
        self._flat = _Compiled(self.device, expression, self._default)
        self._variants = {}
        self._by_dtypes = {}  # input dtypes -> the flat kernel for them
        # An expression that declares its own shapes ("b:f32[1,n]; y = x + b") takes
        # tensors of those shapes as they are.
        self._declares = any(re.match(r"\s*[A-Za-z_]\w*\s*:", statement)
                             for statement in re.split(r"[;\n]", expression))
        self.inputs = self._flat.inputs
        if not self.inputs:
            raise UserError(f"the expression {expression!r} reads no input; kjit.elementwise "
                            "takes the outputs' shape and device from its input tensors", 1)
        self.outputs = self._flat.outputs
        self.input_dtypes = self._flat.input_dtypes
        self.output_dtypes = self._flat.output_dtypes

    def _variant(self, key, dims):
        """A kernel with each input's dtype and dims declared (compiled once per key)."""
        if key not in self._variants:
            declarations = [f"{name}:{_NAMES[_code_of_dtype(dtype)]}[{d}]"
                            for name, dtype, d in zip(self.inputs, key[1], dims)]
            text = "; ".join(declarations) + "; " + self.expression
            self._variants[key] = _Compiled(self.device, text, self._default)
        return self._variants[key]

    def _plan(self, tensors):
        """(kernel, output shape, flat): which kernel runs these tensors, and whether
        they run as flat vectors."""
        torch = _torch()
        if self._declares:
            return self._flat, torch.broadcast_shapes(*[t.shape for t in tensors]), False
        first = tensors[0].shape
        if all(t.shape == first and t.is_contiguous() for t in tensors):
            dtypes = tuple(t.dtype for t in tensors)
            kernel = self._by_dtypes.get(dtypes)
            if kernel is None:
                for t in tensors:
                    _code_of(t)  # a clear error for an unsupported dtype
                kernel = self._flat if list(dtypes) == self._flat.input_dtypes else \
                    self._variant(("flat", dtypes), ["n"] * len(tensors))
                self._by_dtypes[dtypes] = kernel
            return kernel, first, True
        shape = torch.broadcast_shapes(*[t.shape for t in tensors])
        rank = len(shape)
        ones = tuple(tuple(shape[d] != 1 and (d < rank - t.dim() or t.shape[d - rank + t.dim()] == 1)
                           for d in range(rank)) for t in tensors)
        key = ("shaped", tuple(t.dtype for t in tensors), ones)
        dims = [",".join("1" if one else f"d{d}" for d, one in enumerate(o)) for o in ones]
        return self._variant(key, dims), shape, False

    def output_dtypes_for(self, tensors):
        """The output dtypes for these inputs (what a call would return)."""
        return list(self._plan(tensors)[0].output_dtypes)

    def _bind(self, args, kwargs):
        """The input tensors in the kernel's order, from positional and named arguments."""
        if not kwargs and len(args) == len(self.inputs):
            return args
        if not args and len(kwargs) == len(self.inputs):  # every input by name
            try:
                return [kwargs[name] for name in self.inputs]
            except KeyError:
                pass  # a name that is no input: the checks below say which
        if len(args) > len(self.inputs):
            raise UserError(f"the expression takes {len(self.inputs)} input(s) "
                            f"({', '.join(self.inputs)}); got {len(args)}", 1)
        tensors = list(args) + [None] * (len(self.inputs) - len(args))
        for name, value in kwargs.items():
            if name not in self.inputs:
                raise UserError(f"the expression has no input {name!r}; its inputs are "
                                f"{', '.join(self.inputs)}", 1)
            if tensors[self.inputs.index(name)] is not None:
                raise UserError(f"input {name!r} is given twice (by position and by name)", 1)
            tensors[self.inputs.index(name)] = value
        missing = [n for n, t in zip(self.inputs, tensors) if t is None]
        if missing:
            raise UserError(f"missing input(s) {', '.join(missing)}", 1)
        return tensors

    def __call__(self, *args, **kwargs):
        tensors = args if not kwargs and len(args) == len(self.inputs) else \
            self._bind(args, kwargs)
        # The fast path: tensors of one shape, contiguous, on this kernel's device,
        # with dtypes seen before. Two C calls' worth of Python: the output, the
        # addresses, kjit_elementwise_launch_flat.
        first = tensors[0]
        try:
            kernel = None if self._declares else \
                self._by_dtypes.get(tuple([t.dtype for t in tensors]))
        except AttributeError:  # not a tensor: _call says which
            kernel = None
        if kernel is not None:
            shape, device = first.shape, self.device
            for t in tensors:
                if not (t.shape == shape and t.is_cuda and t.get_device() == device and
                        t.is_contiguous()):
                    break
            else:
                outs = [t.new_empty(shape) for t in kernel.templates()]
                pointers = kernel.pointers()
                i = 0
                for t in tensors:
                    pointers[i] = t.data_ptr()
                    i += 1
                for o in outs:
                    pointers[i] = o.data_ptr()
                    i += 1
                status = _ew_launch_flat(kernel.handle, pointers, i, first.numel(),
                                         _raw_stream_on(device))
                if status:
                    _check(status)
                return outs[0] if len(outs) == 1 else tuple(outs)
        return self._call(tensors)

    def _call(self, tensors):
        """Every other call: checks, picks (and compiles) the kernel for the pattern."""
        for name, t in zip(self.inputs, tensors):
            _expect_on(f"input {name!r}", _expect_tensor(f"input {name!r}", t), self.device)
        kernel, shape, flat = self._plan(tensors)
        first = tensors[0]
        outs = [first.new_empty(shape, dtype=d) for d in kernel.output_dtypes]
        if flat:  # every tensor as a vector of numel elements, in this thread's arrays
            ins, outputs, dims = kernel.flat_arrays()
            dims[0] = first.numel()
            for slot, t in zip(ins, tensors):
                slot.data = t.data_ptr()
            for slot, o in zip(outputs, outs):
                slot.data = o.data_ptr()
            keep = None
        else:  # lower-rank inputs get leading 1s (a view)
            views = [t.reshape((1,) * (len(shape) - t.dim()) + tuple(t.shape)) for t in tensors]
            keep = []
            ins = kernel.input_array(*[_describe(t, keep) for t in views])
            outputs = kernel.output_array(*[_describe(o, keep) for o in outs])
        _check(_ew_launch(kernel.handle, ins, len(tensors), outputs, len(outs),
                          _raw_stream(first)))
        del keep
        return outs[0] if len(outs) == 1 else tuple(outs)


# Kernels kept per cache (elementwise, matmul, attention): keys hold shapes,
# expressions and a packed batch's lengths, so a loop over ever new ones would
# otherwise keep a handle, and its device memory, for each.
_CACHE_LIMIT = 256
_cache_lock = threading.Lock()


def _cached(cache, key, make):
    """cache[key], made by make() when missing; the oldest entry goes past the limit."""
    kernel = cache.get(key)
    if kernel is None:
        kernel = make()  # outside the lock: it may compile
        with _cache_lock:
            kept = cache.get(key)
            if kept is not None:  # another thread made it meanwhile
                return kept
            if len(cache) >= _CACHE_LIMIT:
                del cache[next(iter(cache))]
            cache[key] = kernel
    return kernel


_elementwise_cache = {}


def elementwise(expression, dtype=None, device=None):
    """The fused kernel of `expression` (cached per expression, dtype and device;
    device None: the current CUDA device)."""
    device = _device_index(device)
    return _cached(_elementwise_cache, (expression, dtype, device),
                   lambda: Elementwise(expression, dtype, device))


class Matmul:
    """C = epilogue(a @ b, operands) for one problem (sizes, layout, dtype, epilogue).
    `operands` lists the epilogue's extra operands in the order __call__ takes them.
    Its scratch (padding, split-K partials) serves one stream at a time: threads may
    share a Matmul on one stream, but streams that run at once need one each
    (kjit.matmul keeps one per stream)."""

    def __init__(self, m, n, k, batch=1, layout="nn", dtype="bf16", out=None, epilogue=None,
                 device=None):
        self.device = _device_index(device)
        m, n, k, batch = (_int_arg(name, value) for name, value in
                          (("m", m), ("n", n), ("k", k), ("batch", batch)))
        if layout not in ("nn", "nt", "tn", "tt"):
            raise UserError(f"layout {layout!r} is not nn, nt, tn or tt", 1)
        problem = _MatmulProblem(m, n, k, batch, layout.encode(), _dtype_code(dtype),
                                 _dtype_code(out or dtype),
                                 _text_arg("epilogue", epilogue, optional=True) or None)
        handle = ctypes.c_void_p()
        _check(_mm_create(_runtime(self.device), ctypes.byref(problem), ctypes.byref(handle)))
        self._handle = handle
        self.shape = (m, n, k, batch)
        self.layout = layout
        self.dtype = _torch_dtype(_dtype_code(dtype))
        self.out_dtype = _torch_dtype(_dtype_code(out or dtype))
        self.operands = [_mm_operand_name(handle, i).decode() for i in range(_mm_operands(handle))]
        self._operand_names = dict.fromkeys(self.operands).keys()  # compared with **operands
        self.operand_kinds = [_mm_operand_kind(handle, i).decode()
                              for i in range(len(self.operands))]
        self.operand_dtypes = [_torch_dtype(_mm_operand_dtype(handle, i))
                               for i in range(len(self.operands))]
        # What __call__ checks: the stored shapes of a, b and c (not batched, batched),
        # and each operand's name, kind, dtype and shape.
        self._stored_shapes = {batched: _matmul_shapes(m, n, k, batch, layout, batched)
                               for batched in (False, True)}
        self._operand_specs = [(name, kind, dtype, _matmul_operand_shape(kind, m, n))
                               for name, kind, dtype in zip(self.operands, self.operand_kinds,
                                                            self.operand_dtypes)]
        self._extras_type = ctypes.c_uint64 * max(len(self.operands), 1)
        self._scratch = threading.local()
        self._c_template = None  # an empty C on the device, made at the first call

    def __del__(self):
        handle = getattr(self, "_handle", None)
        if handle:
            _mm_destroy(handle)

    def __call__(self, a, b, *operands, out=None):
        """a and b as stored (layout "t": the transposed matrix, row-major), batched ones
        3-D; `out` (optional) [batch,] m x n with unit-stride rows (a 2-D one may have a
        leading dimension); each operand as its kind says: "row" m values, "column" n,
        "tensor" m x n, one array for every batch (see `operands`, `operand_kinds` and
        `operand_dtypes`)."""
        batch = self.shape[3]
        if len(operands) != len(self.operands):
            raise UserError(f"the epilogue takes {len(self.operands)} operand(s) "
                            f"({', '.join(self.operands) or 'none'}); got {len(operands)}", 1)
        tensor, device, dtype = _torch_module.Tensor, self.device, self.dtype
        batched = batch > 1 or (isinstance(a, tensor) and a.dim() == 3)
        a_shape, b_shape, c_shape = self._stored_shapes[batched]
        # One test for the usual call (right shapes and dtypes, on this kernel's device);
        # the checks one by one only when it fails, to say what is wrong.
        if not (isinstance(a, tensor) and isinstance(b, tensor) and a.shape == a_shape and
                b.shape == b_shape and a.dtype == dtype and b.dtype == dtype and a.is_cuda and
                b.is_cuda and a.get_device() == device and b.get_device() == device):
            for name, t, shape in (("a", a, a_shape), ("b", b, b_shape)):
                _expect_on(name, _expect_tensor(name, t), device)
                _expect_shape(name, t.shape, shape)
                _expect_dtype(name, t, dtype)
        c = out
        if out is not None:
            _expect_on("out", _expect_tensor("out", c), device)
            _expect_shape("out", c.shape, c_shape)
            _expect_dtype("out", c, self.out_dtype)
            if c.stride(-1) != 1 or (batched and not c.is_contiguous()):
                packed = " and packed batches" if batched else ""
                raise UserError(f"out needs unit-stride rows{packed}; its strides are "
                                f"{c.stride()}", 1)
            if c.shape[-2] > 1 and c.stride(-2) == 0:  # the C API reads 0 as "packed"
                raise UserError(f"out is broadcast (its rows share memory: strides "
                                f"{c.stride()}); give a tensor with a row of its own per row",
                                1)
        return self._run(a, b, operands, c, batched)

    def _run(self, a, b, operands, c, batched, stream=None):
        """The launch, `a` and `b` checked (`c`: out, checked, or None for a new one;
        `stream`: the current raw stream, when the caller has it): checks the operands,
        copies what the C API cannot read in place."""
        m, n = self.shape[0], self.shape[1]
        if c is None:  # new_empty on an empty C takes its dtype and device (no dtype=)
            template = self._c_template
            if template is None:
                template = self._c_template = a.new_empty(0, dtype=self.out_dtype)
            c = template.new_empty(self._stored_shapes[batched][2])
        tensor, device = _torch_module.Tensor, self.device
        for t, (name, kind, operand_dtype, expected) in zip(operands, self._operand_specs):
            if not (isinstance(t, tensor) and t.shape == expected and
                    t.dtype == operand_dtype and t.is_cuda and t.get_device() == device):
                label = f"operand {name!r}"
                _expect_on(label, _expect_tensor(label, t), device)
                # A row or column may come as any shape of its length ([1, n] too).
                if t.shape != expected and not (kind != "tensor" and t.numel() == expected[0]
                                                and t.dim() >= 1 and max(t.shape) == t.numel()):
                    raise UserError(f"{label} ({kind}) has shape {tuple(t.shape)}; this "
                                    f"problem takes {expected}", 1)
                _expect_dtype(label, t, operand_dtype)
        if batched:  # packed batches: the C API takes no batch strides
            a, b = a.contiguous(), b.contiguous()
        else:  # rows must be unit-stride (a leading dimension is fine, 0 is not: the
            # C API reads a leading dimension of 0 as "packed", so a broadcast row,
            # expand(m, k), is copied)
            a = a if a.stride(-1) == 1 and (a.stride(-2) != 0 or a.shape[-2] == 1) \
                else a.contiguous()
            b = b if b.stride(-1) == 1 and (b.stride(-2) != 0 or b.shape[-2] == 1) \
                else b.contiguous()
        args = getattr(self._scratch, "args", None)  # this thread's arguments, made once
        if args is None:
            args = self._scratch.args = _MatmulArgs()
            args.extras = self._scratch.extras = self._extras_type()
            args.extra_count, args.alpha = len(self.operands), 1.0
        extras, held = self._scratch.extras, []  # held: contiguous copies, alive to the launch
        for i, t in enumerate(operands):
            if not t.is_contiguous():
                t = t.contiguous()
                held.append(t)
            extras[i] = t.data_ptr()
        args.a, args.b, args.c = a.data_ptr(), b.data_ptr(), c.data_ptr()
        # Padded rows keep their stride; a single row's stride is arbitrary (torch's
        # (1, 1) for a [k, 1] tensor transposed) and is passed as 0, "packed".
        args.lda = a.stride(-2) if a.shape[-2] > 1 else 0
        args.ldb = b.stride(-2) if b.shape[-2] > 1 else 0
        # A 2-D out may have padded rows (a size-1 dimension's stride is arbitrary).
        args.ldc = 0 if batched else (c.stride(-2) if m > 1 else n)
        status = _mm_launch(self._handle, ctypes.byref(args),
                            _raw_stream(a) if stream is None else stream)
        del held
        if status:
            _check(status)
        return c


_matmul_cache = {}


class Attention:
    """Flash attention, forward, for one problem: O = softmax(scale * Q K^T + mask) V and
    the log-sum-exp of every row (float32 [batch, heads, seq_q]). A packed batch of
    sequences of different lengths (FlashAttention's "varlen"): seqlens_q (and
    seqlens_k where the keys' lengths differ) instead of batch and seq_q; q, k, v and o
    are then [tokens, heads, D], sequence after sequence, and the LSE [heads, tokens]."""

    def __init__(self, batch, heads, seq_q, head_dim, kv_heads=None, seq_k=None, dtype="bf16",
                 causal=False, window=None, scale=None, device=None, score_mod=None,
                 mask_mod=None, seqlens_q=None, seqlens_k=None):
        self.device = _device_index(device)
        self._packed = _packed_lengths(seqlens_q, seqlens_k)
        problem = _attention_problem(batch, heads, kv_heads, seq_q, seq_k, head_dim, dtype, causal,
                                     window, scale, score_mod, mask_mod, self._packed)
        handle = ctypes.c_void_p()
        _check(_at_create(_runtime(self.device), ctypes.byref(problem), ctypes.byref(handle)))
        self._handle = handle
        self.shape = (problem.batch, heads, problem.seq_q, head_dim)
        # (batch, heads, kv_heads, seq_q, seq_k, head_dim) as checked, and the dtype.
        self._dims = (problem.batch, problem.heads, problem.kv_heads, problem.seq_q,
                      problem.seq_k, problem.head_dim)
        self.dtype = _torch_dtype(problem.dtype)
        # [(name, shape, dtype)] of the modifiers' operands, in the order calls take them.
        self.operands = _modifier_operands(_at_operands, handle, self._dims)

    def __del__(self):
        handle = getattr(self, "_handle", None)
        if handle:
            _at_destroy(handle)

    def __call__(self, q, k, v, layout="bshd", out=None, lse=None, operands=()):
        """q [batch, seq_q, heads, D], k and v [batch, seq_k, kv_heads, D] (layout "bhsd":
        heads before the sequence, as SDPA takes them), any strides with the head dim
        contiguous. `operands`: the modifiers' (see attention()). Returns (o, lse), o
        shaped and laid out like q. A packed batch: q [tokens, heads, D], k and v
        [tokens, kv_heads, D]."""
        torch = _torch()
        q_shape, kv_shape, lse_shape = _attention_shapes(*self._dims, layout, self._packed)
        given = {"q": q, "k": k, "v": v, "out": out, "lse": lse}
        for name, t in given.items():
            if t is not None:
                _expect_on(name, _expect_tensor(name, t), self.device)
        for name, shape in (("q", q_shape), ("k", kv_shape), ("v", kv_shape), ("out", q_shape)):
            if given[name] is not None:
                _expect_shape(name, given[name].shape, shape)
                _expect_dtype(name, given[name], self.dtype)
        q, k, v = (_without_broadcast(name, t) for name, t in (("q", q), ("k", k), ("v", v)))
        if out is not None:
            _without_broadcast("out", out, output=True)
        o = out if out is not None else torch.empty_like(q)
        if lse is not None:
            _expect_shape("lse", lse.shape, lse_shape)
            _expect_dtype("lse", lse, torch.float32)
            if not lse.is_contiguous():
                raise UserError(f"lse must be contiguous; its strides are {lse.stride()}", 1)
        else:
            lse = torch.empty(lse_shape, dtype=torch.float32, device=q.device)
        strides = _strides_of(layout, self._packed)

        _check_modifier_operands(self.operands, operands, self.device)
        pointers = _operand_pointers(operands)
        args = _AttentionArgs(q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
                              lse.data_ptr(), strides(q), strides(k), strides(v), strides(o),
                              pointers, len(operands))
        _check(_at_launch(self._handle, ctypes.byref(args), _raw_stream(q)))
        return o, lse


class AttentionBackward:
    """Flash attention, backward, for one problem: dq, dk, dv from do, recomputing P from
    the forward's log-sum-exp. `deterministic`: the same bits every run (dq in a kernel of
    its own); otherwise the tuner may pick a config that sums dq with atomics (its last
    bits then vary from run to run). Its workspace serves one stream at a time: streams
    that run at once need one each (kjit.attention's autograd keeps one per stream)."""

    def __init__(self, batch, heads, seq_q, head_dim, kv_heads=None, seq_k=None, dtype="bf16",
                 causal=False, window=None, scale=None, device=None, score_mod=None,
                 mask_mod=None, deterministic=False, seqlens_q=None, seqlens_k=None):
        self.device = _device_index(device)
        self._packed = _packed_lengths(seqlens_q, seqlens_k)
        problem = _attention_problem(batch, heads, kv_heads, seq_q, seq_k, head_dim, dtype, causal,
                                     window, scale, score_mod, mask_mod, self._packed)
        problem.deterministic = 1 if _bool_arg("deterministic", deterministic) else 0
        handle = ctypes.c_void_p()
        _check(_ab_create(_runtime(self.device), ctypes.byref(problem), ctypes.byref(handle)))
        self._handle = handle
        self._dims = (problem.batch, problem.heads, problem.kv_heads, problem.seq_q,
                      problem.seq_k, problem.head_dim)
        self.dtype = _torch_dtype(problem.dtype)
        self.operands = _modifier_operands(_ab_operands, handle, self._dims)

    def __del__(self):
        handle = getattr(self, "_handle", None)
        if handle:
            _ab_destroy(handle)

    def __call__(self, q, k, v, o, lse, d_o, layout="bshd", operands=()):
        """The forward's q, k, v, o and lse (and modifier operands) and the gradient d_o
        (laid out like o). Returns (dq, dk, dv), laid out like q, k, v."""
        torch = _torch()
        q_shape, kv_shape, lse_shape = _attention_shapes(*self._dims, layout, self._packed)
        expected = (("q", q, q_shape, self.dtype), ("k", k, kv_shape, self.dtype),
                    ("v", v, kv_shape, self.dtype), ("o", o, q_shape, self.dtype),
                    ("d_o", d_o, q_shape, self.dtype), ("lse", lse, lse_shape, torch.float32))
        for name, t, shape, dtype in expected:
            _expect_on(name, _expect_tensor(name, t), self.device)
            _expect_shape(name, t.shape, shape)
            _expect_dtype(name, t, dtype)
        if not lse.is_contiguous():
            raise UserError(f"lse must be contiguous; its strides are {lse.stride()}", 1)

        def usable(t):  # the head dim contiguous, the other strides whole 16-byte rows
            if t.stride(-1) != 1 or any(x % 8 for x in t.stride()[:-1]):
                return t.contiguous()
            return t

        # A gradient from autograd may be an expand()ed view (stride 0), and so may
        # inputs sharing a head or batch: copied, since C reads a 0 stride as packed.
        q, k, v, o, d_o = (_without_broadcast(name, t) for name, t in
                           (("q", q), ("k", k), ("v", v), ("o", o), ("d_o", d_o)))
        d_o = usable(d_o)
        dq, dk, dv = (torch.empty_like(t) for t in (q, k, v))
        strides = _strides_of(layout, self._packed)

        _check_modifier_operands(self.operands, operands, self.device)
        tensors = (q, k, v, o, d_o, dq, dk, dv)
        args = _AttentionBackwardArgs(q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
                                      lse.data_ptr(), d_o.data_ptr(), dq.data_ptr(),
                                      dk.data_ptr(), dv.data_ptr(), *(strides(t) for t in tensors),
                                      _operand_pointers(operands), len(operands))
        _check(_ab_launch(self._handle, ctypes.byref(args), _raw_stream(q)))
        return dq, dk, dv


def _strides_of(layout, packed):
    """A function of a tensor to its _AttentionStrides (batch, seq, head), in elements:
    layout "bshd" or "bhsd"; a packed batch's [tokens, heads, D] has no batch stride."""
    axes = (None, 0, 1) if packed is not None else \
        (0, 1, 2) if layout == "bshd" else (0, 2, 1)

    def strides(t):
        if t.stride(-1) != 1:
            raise UserError("kjit attention needs the head dim contiguous (stride 1)", 1)
        return _AttentionStrides(*(0 if axis is None else t.stride(axis) for axis in axes))

    return strides


def _modifier_operands(functions, handle, dims):
    """[(name, shape, torch dtype)] of a handle's modifier operands, in launch order:
    one value per query head ("heads"), per query position ("q") or per key position
    ("kv"). `dims`: (batch, heads, kv_heads, seq_q, seq_k, head_dim)."""
    lengths = {"heads": dims[1], "q": dims[3], "kv": dims[4]}
    return [(functions["name"](handle, i).decode(),
             (lengths[functions["kind"](handle, i).decode()],),
             _torch_dtype(functions["dtype"](handle, i)))
            for i in range(functions["count"](handle))]


def _check_modifier_operands(specs, operands, device):
    """The modifiers' operands against their specs: count, length, dtype, device."""
    if len(operands) != len(specs):
        names = ", ".join(name for name, _, _ in specs) or "none"
        raise UserError(f"the modifiers read {len(specs)} operand(s) ({names}); got "
                        f"{len(operands)}", 1)
    for (name, shape, dtype), t in zip(specs, operands):
        _expect_on(f"operand {name!r}", _expect_tensor(f"operand {name!r}", t), device)
        if t.numel() != shape[0] or (t.dim() > 0 and max(t.shape) != t.numel()):
            raise UserError(f"operand {name!r} has shape {tuple(t.shape)}; the modifiers read "
                            f"{shape[0]} values", 1)
        _expect_dtype(f"operand {name!r}", t, dtype)


def _operand_pointers(operands):
    """The modifiers' operands (CUDA tensors, one per operand the modifiers name, the
    score modifier's first, each contiguous and of its declared dtype) as the C API's
    array of device pointers."""
    for i, t in enumerate(operands):
        _expect_tensor(f"operand {i}", t)
        if not t.is_cuda or not t.is_contiguous():
            raise UserError("attention modifier operands are contiguous CUDA tensors", 1)
    return (ctypes.c_uint64 * max(len(operands), 1))(*(t.data_ptr() for t in operands))


_attention_cache = {}
_attention_backward_cache = {}


def _attention_function():
    """torch.autograd.Function over kjit's forward and backward kernels (made on first
    use: importing kjit imports torch only where it is installed, to register kjit's ops)."""
    global _AttentionFunction
    if _AttentionFunction is not None:
        return _AttentionFunction
    torch = _torch()

    class AttentionFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, key, layout, operands, deterministic, kernel):
            o, lse = kernel(q, k, v, layout, operands=operands)
            ctx.save_for_backward(q, k, v, o, lse)
            ctx.key, ctx.layout, ctx.operands = key, layout, operands
            ctx.deterministic = deterministic
            ctx.mark_non_differentiable(lse)
            return o, lse

        @staticmethod
        def backward(ctx, d_o, _d_lse):
            q, k, v, o, lse = ctx.saved_tensors
            # Per stream too: the backward's workspace serves one stream at a time.
            key = ctx.key + (ctx.deterministic, _raw_stream(d_o))
            batch, heads, kv_heads, seq_q, seq_k, head_dim, dtype, causal, window, scale, \
                device, score_mod, mask_mod, packed = ctx.key
            kernel = _cached(_attention_backward_cache, key, lambda: AttentionBackward(
                batch, heads, seq_q, head_dim, kv_heads, seq_k, dtype, causal, window, scale,
                device, score_mod, mask_mod, ctx.deterministic, *(packed or (None, None))))
            dq, dk, dv = kernel(q, k, v, o, lse, d_o, ctx.layout, ctx.operands)
            return dq, dk, dv, None, None, None, None, None

    _AttentionFunction = AttentionFunction
    return _AttentionFunction


_AttentionFunction = None


def attention(q, k, v, causal=False, window=None, scale=None, layout="bshd", score_mod=None,
              mask_mod=None, operands=(), deterministic=None, seqlens_q=None, seqlens_k=None):
    """Flash attention (forward) of bfloat16/float16 q, k, v: layout "bshd" ([batch, seq,
    heads, D], the default) or "bhsd" ([batch, heads, seq, D], as SDPA); fewer K/V heads
    than query heads is grouped-query attention. `window`: (left, right) keys around the
    diagonal (None: unbounded). `score_mod`, `mask_mod`: modifiers in kjit's IR, e.g.
    score_mod="slope:f32[heads]; s - slope * abs(q_idx - kv_idx)" with
    operands=(slopes,), a float32 CUDA tensor of one slope per head (the score modifier's
    operands first, in the order it names them). Returns (o, lse). When q, k or v
    requires grad, o is differentiable: backward runs kjit's backward kernels, through
    the score modifier's derivative. `deterministic`: True gives the same bits every run;
    False lets dq be summed with atomics (at head dim 128 the tuner's choice: faster, its
    last bits varying); None (the default) follows torch.use_deterministic_algorithms,
    as PyTorch's own kernels do.

    A packed batch of sequences of different lengths (FlashAttention's "varlen"):
    `seqlens_q`, the length of each sequence (a list of ints or a 1-D integer tensor),
    and `seqlens_k` where the keys' lengths differ; q is then [tokens, heads, D], k and v
    [tokens, kv_heads, D], sequence after sequence, and lse [heads, tokens]. The masks
    and modifiers' positions count within each sequence."""
    if layout not in ("bshd", "bhsd"):
        raise UserError(f"layout '{layout}' is not bshd or bhsd", 1)
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not _expect_tensor(name, t).is_cuda:
            raise UserError(f"kjit.attention runs on CUDA tensors; {name} is on {t.device}", 1)
    window = _window_arg(window)  # a tuple: part of the kernel cache's key
    packed = _packed_lengths(seqlens_q, seqlens_k)  # tuples: part of the key too
    if packed is not None:
        if q.dim() != 3 or k.dim() != 3 or v.dim() != 3:
            raise UserError("with seqlens_q, q, k and v are 3-D: [tokens, heads, D]", 1)
        if layout != "bshd":
            raise UserError("with seqlens_q, q, k and v are [tokens, heads, D]; layout 'bhsd' "
                            "does not apply", 1)
        batch, seq_q, seq_k = None, None, None
        heads, head_dim, kv_heads = q.shape[1], q.shape[2], k.shape[1]
    else:
        if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
            raise UserError("q, k and v are 4-D: [batch, seq, heads, D] (or bhsd); a packed "
                            "batch of 3-D [tokens, heads, D] gives seqlens_q", 1)
        seq_axis, head_axis = (1, 2) if layout == "bshd" else (2, 1)
        batch, seq_q, heads, head_dim = (q.shape[0], q.shape[seq_axis], q.shape[head_axis],
                                         q.shape[3])
        seq_k, kv_heads = k.shape[seq_axis], k.shape[head_axis]
    if v.shape != k.shape:
        raise UserError(f"v has shape {tuple(v.shape)} but k {tuple(k.shape)}", 1)
    if packed is None and (k.shape[0] != batch or k.shape[3] != head_dim):
        raise UserError(f"k has shape {tuple(k.shape)} but q {tuple(q.shape)}: their batch and "
                        f"head dim differ", 1)
    dtype = {2: "bf16", 1: "f16"}.get(_code_of(q))
    if dtype is None or k.dtype != q.dtype or v.dtype != q.dtype:
        raise UserError("kjit.attention takes bfloat16 or float16 q, k and v of one dtype", 1)
    key = (batch, heads, kv_heads, seq_q, seq_k, head_dim, dtype, causal, window, scale,
           q.get_device(), score_mod, mask_mod, packed)
    kernel = _cached(_attention_cache, key, lambda: Attention(
        batch, heads, seq_q, head_dim, kv_heads, seq_k, dtype, causal, window, scale,
        q.get_device(), score_mod, mask_mod, *(packed or (None, None))))
    operands = tuple(operands)
    torch = _torch()
    if deterministic is None:
        deterministic = torch.are_deterministic_algorithms_enabled()
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        # Differentiable: the backward kernels give dq, dk, dv (lse and the modifiers'
        # operands are not differentiated).
        return _attention_function().apply(q, k, v, key, layout, operands, deterministic,
                                           kernel)
    return kernel(q, k, v, layout, operands=operands)


def matmul(a, b, epilogue=None, out_dtype=None, **operands):
    """a @ b (bfloat16/float16/float32; batched with 3-D tensors) with an optional
    fused epilogue in kjit's IR over `acc` and named operands, e.g.
    matmul(a, b, epilogue="gelu(acc + bias)", bias=bias)."""
    # The kernel, and how to read a and b, per shapes, strides, dtypes, epilogue,
    # devices and stream (a Matmul's scratch serves one stream at a time). A plan is
    # kept only after a call with it passed every check of a, b and its operands: a
    # later call with the same key launches at once (the checks of the operands,
    # which the key does not hold, run in _run).
    try:
        device = a.get_device()
        key = (a.shape, b.shape, a.stride(), b.stride(), a.dtype, b.dtype, epilogue, out_dtype,
               device, b.get_device())
        # get_device() numbers other accelerators too
        plannable = a.is_cuda and b.is_cuda and device >= 0
    except (AttributeError, TypeError):  # not tensors: the checks below say so
        plannable = False
    plan = None
    if plannable:
        stream = _raw_stream_on(device)
        key = key + (stream,)
        plan = _matmul_cache.get(key)
    checked = plan is not None
    if not checked:
        for name, t in (("a", a), ("b", b)):
            if not _expect_tensor(name, t).is_cuda:
                raise UserError(f"kjit.matmul runs on CUDA tensors; {name} is on {t.device}", 1)
        plan = _plan_matmul(a, b, epilogue, out_dtype)
    kernel, transpose_a, transpose_b = plan
    _expect_operand_names(kernel, operands)
    a = a.transpose(-1, -2) if transpose_a else a
    b = b.transpose(-1, -2) if transpose_b else b
    ordered = [operands[name] for name in kernel.operands]
    if checked:
        return kernel._run(a, b, ordered, None, a.dim() == 3, stream)
    c = kernel(a, b, *ordered)  # every check
    if plannable:
        _cached(_matmul_cache, key, lambda: plan)
    return c


def _expect_operand_names(kernel, operands):
    """The epilogue's operands by name, each once, none unknown."""
    if operands.keys() != kernel._operand_names:
        unknown = sorted(set(operands) - set(kernel.operands))
        missing = [name for name in kernel.operands if name not in operands]
        raise UserError(f"the epilogue reads {', '.join(kernel.operands) or 'no operands'}; "
                        f"missing {missing or 'none'}, unknown {unknown or 'none'}", 1)


def _plan_matmul(a, b, epilogue, out_dtype):
    """(Matmul, transpose a, transpose b) for these tensors: checks them and picks the
    layout, so that a column-major view (a .t()) is read in place."""
    torch = _torch()
    if a.dim() != b.dim() or a.dim() not in (2, 3):
        raise UserError("kjit.matmul takes two 2-D or two 3-D (batched) tensors", 1)
    if a.shape[-1] != b.shape[-2] or (a.dim() == 3 and a.shape[0] != b.shape[0]):
        raise UserError(f"kjit.matmul: shapes {tuple(a.shape)} and {tuple(b.shape)} do not "
                        f"multiply", 1)
    if a.dtype != b.dtype:
        raise UserError(f"kjit.matmul: a is {a.dtype} but b is {b.dtype}", 1)
    dtype = {torch.bfloat16: "bf16", torch.float16: "f16", torch.float32: "f32"}.get(a.dtype)
    if dtype is None:
        raise UserError(f"kjit.matmul takes bfloat16, float16 or float32; got {a.dtype}", 1)
    out = {None: None, torch.float32: "f32", a.dtype: dtype}.get(out_dtype, "?")
    if out == "?":
        raise UserError(f"kjit.matmul: out_dtype is {a.dtype} or float32; got {out_dtype}", 1)
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    batch = a.shape[0] if a.dim() == 3 else 1

    def column_major(t):  # a .t() of a row-major matrix (not batched: those are packed)
        return t.dim() == 2 and t.stride(-1) != 1 and t.stride(-2) == 1
    transpose_a, transpose_b = column_major(a), column_major(b)
    layout = ("t" if transpose_a else "n") + ("t" if transpose_b else "n")
    kernel = Matmul(m, n, k, batch, layout, dtype, out, epilogue=epilogue, device=a.get_device())
    return kernel, transpose_a, transpose_b


# ---- torch.library: the ops inside torch.compile, without graph breaks ------------

def _register_torch_ops():
    try:
        import torch
        from typing import List
    except ImportError:
        return
    if not hasattr(torch, "library") or not hasattr(torch.library, "custom_op"):
        return

    def one_output(kernel):
        # The op returns one tensor: the other outputs were dropped without a word.
        if len(kernel.outputs) != 1:
            raise UserError(f"torch.ops.kjit.elementwise returns one tensor; "
                            f"{kernel.expression!r} has {len(kernel.outputs)} outputs "
                            f"({', '.join(kernel.outputs)}): call kjit.elementwise(...) for "
                            f"them all, or write one expression per output", 1)
        return kernel

    @torch.library.custom_op("kjit::elementwise", mutates_args=())
    def _elementwise_op(expression: str, dtype: str, inputs: List[torch.Tensor]) -> torch.Tensor:
        kernel = one_output(elementwise(expression, dtype or None, inputs[0].get_device()))
        result = kernel(*inputs)
        return result if isinstance(result, torch.Tensor) else result[0]

    @_elementwise_op.register_fake
    def _(expression, dtype, inputs):
        kernel = one_output(elementwise(expression, dtype or None, inputs[0].get_device()))
        shape = torch.broadcast_shapes(*[t.shape for t in inputs])
        return inputs[0].new_empty(shape, dtype=kernel.output_dtypes_for(inputs)[0])

    @torch.library.custom_op("kjit::matmul", mutates_args=())
    def _matmul_op(a: torch.Tensor, b: torch.Tensor, epilogue: str, names: str,
                   operands: List[torch.Tensor]) -> torch.Tensor:
        # names: the operands' names, comma separated ("bias,r"), in `operands` order
        return matmul(a, b, epilogue or None,
                      **dict(zip([n for n in names.split(",") if n], operands)))

    @_matmul_op.register_fake
    def _(a, b, epilogue, names, operands):
        return a.new_empty((*a.shape[:-1], b.shape[-1]))


_register_torch_ops()
