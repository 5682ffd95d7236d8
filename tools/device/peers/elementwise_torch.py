#!/usr/bin/env python3
"""Peers for kjit's elementwise chains: eager PyTorch and torch.compile.

    python3 tools/device/peers/elementwise_torch.py [--n 268435456] [--out FILE.json]

Times each chain with triton.testing.do_bench (median, L2 flushed between runs),
and a device-to-device copy of the same bytes for the bandwidth ceiling. Checks
torch.compile's output against eager in float64 first.
"""
import argparse
import json
import sys

import torch
import triton.testing

CHAINS = {
    "sin(x)^2 + cos(x)^2": (torch.float32, ["x"], lambda x: torch.sin(x) ** 2 + torch.cos(x) ** 2),
    "x * sigmoid(x) * g": (torch.bfloat16, ["x", "g"], lambda x, g: x * torch.sigmoid(x) * g),
    "a * b + c": (torch.float16, ["a", "b", "c"], lambda a, b, c: a * b + c),
}


def median_ms(fn):
    return triton.testing.do_bench(fn, warmup=50, rep=300, return_mode="median")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1 << 28)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    n = args.n
    results = []
    for text, (dtype, names, fn) in CHAINS.items():
        inputs = [torch.rand(n, device="cuda", dtype=dtype) * 2 - 1 for _ in names]
        compiled = torch.compile(fn)
        want = fn(*[t.double() for t in inputs])
        got = compiled(*inputs).double()
        error = ((got - want).norm() / want.norm()).item()
        bytes_moved = (len(inputs) + 1) * n * inputs[0].element_size()
        source = torch.empty(bytes_moved // 2, dtype=torch.uint8, device="cuda")
        target = torch.empty_like(source)
        copy_ms = median_ms(lambda: target.copy_(source))
        eager_ms = median_ms(lambda: fn(*inputs))
        compiled_ms = median_ms(lambda: compiled(*inputs))
        row = dict(chain=text, dtype=str(dtype).replace("torch.", ""), n=n, bytes=bytes_moved,
                   copy_ms=copy_ms, copy_tbs=bytes_moved / copy_ms / 1e9,
                   eager_ms=eager_ms, compile_ms=compiled_ms,
                   compile_fraction_of_copy=copy_ms / compiled_ms, compile_rel_l2=error)
        results.append(row)
        del inputs, source, target
        torch.cuda.empty_cache()
    print(f"{'chain':<24} {'dtype':<9} {'copy ms':>8} {'eager ms':>9} {'compile ms':>10} {'vs copy':>8}")
    for r in results:
        print(f"{r['chain']:<24} {r['dtype']:<9} {r['copy_ms']:8.3f} {r['eager_ms']:9.3f} "
              f"{r['compile_ms']:10.3f} {r['compile_fraction_of_copy']:8.1%}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__,
                           results=results), f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
