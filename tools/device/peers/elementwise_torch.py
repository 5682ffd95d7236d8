#!/usr/bin/env python3
"""Peers for kjit's elementwise chains: eager PyTorch and torch.compile.

    python3 tools/device/peers/elementwise_torch.py [--n 268435456] [--out FILE.json]

The chains are the elementwise benchmark's (tools/device/bench_elementwise.sh runs
the same ones through kjit): three from the first measurements, a one-input
activation, a three-input f32 chain and a 2-D broadcast with a per-row and a
per-column operand. torch.compile is compiled per chain with static shapes
(torch._dynamo.reset(), dynamic=False), as a user would. Times are
triton.testing.do_bench medians (L2 cleared between runs); the output of
torch.compile is checked against eager in float64 first; a device-to-device copy
of the same bytes gives the bandwidth ceiling.
"""
import argparse
import json
import math
import sys

import torch
import triton.testing

# name -> (kjit expression, dtype, [(input, shape kind)], torch function). Shape
# kinds: "n" a vector of n; "mn" the m x n matrix; "m1" per row; "1n" per column.
CHAINS = {
    "sin(x)^2 + cos(x)^2": ("y = sin(x)^2 + cos(x)^2", torch.float32, [("x", "n")],
                            lambda x: torch.sin(x) ** 2 + torch.cos(x) ** 2),
    "x * sigmoid(x) * g": ("y = x * sigmoid(x) * g", torch.bfloat16, [("x", "n"), ("g", "n")],
                           lambda x, g: x * torch.sigmoid(x) * g),
    "a * b + c": ("y = a * b + c", torch.float16, [("a", "n"), ("b", "n"), ("c", "n")],
                  lambda a, b, c: a * b + c),
    "gelu(x)": ("y = gelu(x)", torch.bfloat16, [("x", "n")],
                lambda x: torch.nn.functional.gelu(x)),
    "exp(a) * b + c (f32)": ("y = exp(a) * b + c", torch.float32,
                             [("a", "n"), ("b", "n"), ("c", "n")],
                             lambda a, b, c: torch.exp(a) * b + c),
    "x * r + c (2-D)": ("x:bf16[m,n]; r:bf16[m,1]; c:bf16[n]; y = x * r + c", torch.bfloat16,
                        [("x", "mn"), ("r", "m1"), ("c", "1n")], lambda x, r, c: x * r + c),
}


def median_ms(fn):
    return triton.testing.do_bench(fn, warmup=50, rep=300, return_mode="median")


def shape_of(kind, n, rows):
    cols = n // rows
    return {"n": (n,), "mn": (rows, cols), "m1": (rows, 1), "1n": (cols,)}[kind]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1 << 28)
    parser.add_argument("--rows", type=int, default=1 << 14, help="m of the 2-D chain")
    parser.add_argument("--out", default=None)
    parser.add_argument("--only", default=None, help="comma-separated chain names")
    args = parser.parse_args()
    n = args.n
    results = []
    for name, (expr, dtype, inputs, fn) in CHAINS.items():
        if args.only and name not in args.only.split(","):
            continue
        tensors = [(torch.rand(shape_of(kind, n, args.rows), device="cuda", dtype=dtype) * 2 - 1)
                   for _, kind in inputs]
        torch._dynamo.reset()
        compiled = torch.compile(fn, dynamic=False)
        want = fn(*[t.double() for t in tensors])
        got = compiled(*tensors).double()
        error = ((got - want).norm() / want.norm()).item()
        bytes_moved = sum(t.numel() * t.element_size() for t in tensors) + \
            math.prod(want.shape) * tensors[0].element_size()
        source = torch.empty(bytes_moved // 2, dtype=torch.uint8, device="cuda")
        target = torch.empty_like(source)
        copy_ms = median_ms(lambda: target.copy_(source))
        eager_ms = median_ms(lambda: fn(*tensors))
        compiled_ms = median_ms(lambda: compiled(*tensors))
        results.append(dict(chain=name, expression=expr, dtype=str(dtype).replace("torch.", ""),
                            n=n, rows=args.rows if any(k != "n" for _, k in inputs) else 1,
                            bytes=bytes_moved, copy_ms=copy_ms,
                            copy_tbs=bytes_moved / copy_ms / 1e9, eager_ms=eager_ms,
                            compile_ms=compiled_ms,
                            compile_fraction_of_copy=copy_ms / compiled_ms,
                            compile_rel_l2=error))
        tensors = source = target = want = got = None  # free them before the next chain
        torch.cuda.empty_cache()
    print(f"{'chain':<22} {'dtype':<9} {'copy ms':>8} {'eager ms':>9} {'compile ms':>10} {'vs copy':>8}")
    for r in results:
        print(f"{r['chain']:<22} {r['dtype']:<9} {r['copy_ms']:8.3f} {r['eager_ms']:9.3f} "
              f"{r['compile_ms']:10.3f} {r['compile_fraction_of_copy']:8.1%}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__,
                           results=results), f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
