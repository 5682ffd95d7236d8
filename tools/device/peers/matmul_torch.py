#!/usr/bin/env python3
"""Peers for kjit's matmuls: eager PyTorch (cuBLAS) and static torch.compile.

    python3 tools/device/peers/matmul_torch.py [--shapes 4097x4097x4097,...]
                                               [--epilogue none|gelu_bias|both]
                                               [--out FILE.json]

A shape is MxNxK, bf16, both operands row-major (kjit's layout nn): C = A (M x K)
times B (K x N). With `gelu_bias` the function is gelu(A @ B + bias), bias a
length-N vector, erf-based gelu (kjit's `gelu(acc + bias)`). torch.compile runs
as a user would run it on a fixed shape: torch._dynamo.reset() per shape and
dynamic=False, so Inductor sees the real sizes and pads misaligned matmuls
(a dynamic-shape recompile does not pad and is not the peer). Times are
triton.testing.do_bench medians (L2 cleared before every run); every output is
checked against float64 first. TFLOP/s count 2 M N K.
"""
import argparse
import json
import sys

import torch
import triton.testing

# The shapes the matmul issue names: misaligned, short K, skinny, aligned.
DEFAULT_SHAPES = [
    (4097, 4097, 4097), (2048, 50257, 768), (4096, 4096, 4096), (8192, 8192, 8192),
    (4096, 11008, 4096), (32000, 4096, 768), (16384, 8192, 1024), (4096, 128, 16384),
    (16, 4096, 4096), (64, 11008, 4096), (3072, 3072, 4096),
]


def median_ms(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")


def parse_shapes(text):
    shapes = []
    for item in text.split(","):
        parts = item.lower().split("x")
        if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise SystemExit(f"matmul_torch.py: bad shape '{item}': expected MxNxK, e.g. 4097x4097x4097")
        shapes.append(tuple(int(p) for p in parts))
    return shapes


def plain(a, b):
    return a @ b


def gelu_bias(a, b, bias):
    return torch.nn.functional.gelu(a @ b + bias)


def relative_l2(got, want):
    return ((got.double() - want).norm() / want.norm()).item()


def measure(shape, epilogue):
    m, n, k = shape
    a = torch.rand(m, k, device="cuda", dtype=torch.bfloat16) * 2 - 1
    b = torch.rand(k, n, device="cuda", dtype=torch.bfloat16) * 2 - 1
    args = [a, b]
    fn = plain
    if epilogue == "gelu_bias":
        args.append(torch.rand(n, device="cuda", dtype=torch.bfloat16) * 2 - 1)
        fn = gelu_bias
    want = fn(*[x.double() for x in args])
    torch._dynamo.reset()
    compiled = torch.compile(fn, dynamic=False)
    compiled_out = compiled(*args)
    compiled_error = relative_l2(compiled_out, want)
    # Inductor pads a misaligned product and may hand back a view into the padded
    # result: rows of C longer than N (stride[0] > N), not a packed C.
    compiled_stride = list(compiled_out.stride())
    del compiled_out
    eager_error = relative_l2(fn(*args), want)
    eager_ms = median_ms(lambda: fn(*args))
    compiled_ms = median_ms(lambda: compiled(*args))
    flops = 2.0 * m * n * k
    row = dict(m=m, n=n, k=k, epilogue=epilogue, eager_ms=eager_ms,
               eager_tflops=flops / eager_ms / 1e9, compile_ms=compiled_ms,
               compile_tflops=flops / compiled_ms / 1e9, compile_out_stride=compiled_stride,
               eager_rel_l2=eager_error,
               compile_rel_l2=compiled_error)
    a = b = args = want = None  # free them before the next shape
    torch.cuda.empty_cache()
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default=None, help="comma-separated MxNxK (default: the issue's)")
    parser.add_argument("--epilogue", choices=["none", "gelu_bias", "both"], default="both")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    shapes = parse_shapes(args.shapes) if args.shapes else DEFAULT_SHAPES
    epilogues = ["none", "gelu_bias"] if args.epilogue == "both" else [args.epilogue]
    results = [measure(s, e) for s in shapes for e in epilogues]
    print(f"{'shape':<18} {'epilogue':<10} {'eager TF/s':>10} {'compile TF/s':>12} {'rel l2':>9}"
          f"  compiled C's strides")
    for r in results:
        print(f"{r['m']}x{r['n']}x{r['k']:<8} {r['epilogue']:<10} {r['eager_tflops']:10.1f} "
              f"{r['compile_tflops']:12.1f} {r['compile_rel_l2']:9.2e}  {r['compile_out_stride']}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__,
                           results=results), f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
