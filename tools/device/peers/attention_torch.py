#!/usr/bin/env python3
"""Attention forward or backward: kjit against PyTorch SDPA (flash and cuDNN backends), same GPU, same run.

    python3 tools/device/peers/attention_torch.py --kjit build/release/kjit [--out FILE.json]
        [--quick] [--sweep NAME,...|all] [--configs 'C1;C2'] [--only NAME,...] [--backward]

Shapes are the attention issue's: 16k tokens per batch, hidden 2048 (heads = 2048 / D),
S in {512, 2k, 8k}, D in {64, 128}, causal and not; GQA with 32 query heads and 8
K/V heads at S = 4k (D = 128). bf16. kjit runs through `kjit bench attention --json`
(its O and LSE checked against the fp64 reference first, then timed with the
project's timer: L2 flushed before every run, median); the peers are timed with
triton.testing.do_bench (L2 cleared between runs, median), their outputs checked
against each other. TFLOP/s count 4 * B * H * S_q * S_k * D, halved for causal,
for every implementation. --sweep also measures every config of kjit's space
on the named shapes (the best is reported beside the default).

--backward times the backward pass instead: kjit's dQ, dK, dV (`kjit bench attention
--backward`, checked against fp64 gradients first) against each SDPA backend's
backward (torch.autograd.grad of its output, graph retained, so only the backward
kernels run), credited 2.5x the forward's FLOPs as FlashAttention counts them.
"""
import argparse
import json
import subprocess
import sys

import torch
import torch.nn.functional as F
import triton.testing
from torch.nn.attention import SDPBackend, sdpa_kernel

TOKENS = 16384
HIDDEN = 2048


def shapes(quick):
    out = []
    for d in (64, 128):
        for s in ((512, 2048) if quick else (512, 2048, 8192)):
            for causal in (False, True):
                heads = HIDDEN // d
                out.append(dict(name=f"d{d}_s{s}{'_causal' if causal else ''}", batch=TOKENS // s,
                                heads=heads, kv_heads=heads, seq=s, d=d, causal=causal))
    for causal in (False, True):
        out.append(dict(name=f"gqa32x8_d128_s4096{'_causal' if causal else ''}", batch=TOKENS // 4096,
                        heads=32, kv_heads=8, seq=4096, d=128, causal=causal))
    return out


def flops(shape):
    f = 4.0 * shape["batch"] * shape["heads"] * shape["seq"] ** 2 * shape["d"]
    return f / 2 if shape["causal"] else f


def median_ms(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")


def kjit_bench(kjit, shape, config=None, backward=False):
    cmd = [kjit, "bench", "attention", "--json", "--batch", str(shape["batch"]), "--heads",
           str(shape["heads"]), "--kv-heads", str(shape["kv_heads"]), "--seq-q", str(shape["seq"]),
           "--head-dim", str(shape["d"]), "--repeats", "30"]
    if shape["causal"]:
        cmd.append("--causal")
    if config:
        cmd += ["--config", config]
    if backward:
        cmd.append("--backward")
    try:
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:  # a hung kernel costs this config, not the run
        return dict(error="timed out after 120 s", config=config)
    if run.returncode == 2:  # a config outside the space for this shape (usage error)
        return None
    try:
        result = json.loads(run.stdout)
    except json.JSONDecodeError:
        return dict(error=(run.stderr or run.stdout).strip()[-400:], pass_=False)
    result["exit"] = run.returncode
    return result


def peers(shape, backward=False):
    b, h, g, s, d = shape["batch"], shape["heads"], shape["kv_heads"], shape["seq"], shape["d"]
    torch.manual_seed(0)
    q = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=backward)
    k = torch.randn(b, g, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=backward)
    v = torch.randn(b, g, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=backward)
    d_o = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)
    credited = flops(shape) * (2.5 if backward else 1.0)
    out = {}
    reference = None
    for name, backend in (("sdpa_flash", SDPBackend.FLASH_ATTENTION),
                          ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        def call():
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=shape["causal"],
                                                      enable_gqa=g != h)
        try:
            o = call()
            timed = call
            result = o
            if backward:
                def timed(o=o):
                    return torch.autograd.grad(o, (q, k, v), d_o, retain_graph=True)
                result = timed()[0]  # dQ
            torch.cuda.synchronize()
        except Exception as error:  # a backend that does not take this shape
            out[name] = dict(status=f"unsupported: {str(error).splitlines()[0][:160]}")
            continue
        agree = None
        if reference is None:
            reference = result.float()
        else:
            agree = ((result.float() - reference).norm() / reference.norm()).item()
        ms = median_ms(timed)
        out[name] = dict(status="ok", median_ms=ms, tflops=credited / ms / 1e9,
                         rel_l2_vs_first_peer=agree)
    return out


SPACE = [f"bm={bm},bn={bn},stages={st},warp_rows={wr}" for bm in (64, 128)
         for bn in (32, 64, 128) for st in (2, 3) for wr in (16, 32)] + \
        [f"mma=wgmma,bn={bn},stages={st}" for bn in (64, 128) for st in (2, 3)]
BACKWARD_SPACE = [f"bm={bm},bn={bn},stages={st}" for bm in (32, 64, 128) for bn in (32, 64, 128)
                  for st in (2, 3)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kjit", required=True, help="path of the kjit binary")
    parser.add_argument("--out", default=None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--sweep", default="", help="shape names (or 'all') to sweep kjit's space on")
    parser.add_argument("--only", default=None)
    parser.add_argument("--backward", action="store_true",
                        help="time the backward pass (dQ, dK, dV) instead of the forward")
    parser.add_argument("--configs", default=None,
                        help="';'-separated kjit configs to sweep instead of the whole space")
    args = parser.parse_args()
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"{'backward' if args.backward else 'forward'}", flush=True)
    rows = []
    for shape in shapes(args.quick):
        if args.only and shape["name"] not in args.only.split(","):
            continue
        row = dict(shape=shape, flops=flops(shape) * (2.5 if args.backward else 1.0),
                   direction="backward" if args.backward else "forward")
        row["kjit"] = kjit_bench(args.kjit, shape, backward=args.backward)
        row["sweep"] = {}
        if args.sweep == "all" or shape["name"] in args.sweep.split(","):
            sweep = {}
            space = BACKWARD_SPACE if args.backward else SPACE
            for config in (args.configs.split(";") if args.configs else space):
                result = kjit_bench(args.kjit, shape, config, backward=args.backward)
                if result is not None:
                    sweep[config] = result
            row["sweep"] = sweep
        row["peers"] = peers(shape, args.backward)
        rows.append(row)
        k = row["kjit"]
        best = ""
        if row["sweep"]:
            name, r = max(row["sweep"].items(), key=lambda kv: kv[1].get("tflops", 0))
            best = f" best {name} {r.get('tflops', 0):.0f}"
        print(f"{shape['name']}: kjit {k.get('tflops', 0):.0f} TFLOP/s ({k.get('config')}, "
              f"pass={k.get('pass')}){best}; " +
              ", ".join(f"{n} {p.get('tflops', 0):.0f}" if p["status"] == "ok" else f"{n} {p['status']}"
                        for n, p in row["peers"].items()), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)
    print("\nshape                          kjit   flash  cudnn  kjit/cudnn kjit/flash check")
    for row in rows:
        k = row["kjit"].get("tflops", 0)
        if row["sweep"]:
            k = max([k] + [r.get("tflops", 0) for r in row["sweep"].values() if r.get("pass")])
        fl = row["peers"].get("sdpa_flash", {}).get("tflops", 0)
        cu = row["peers"].get("cudnn", {}).get("tflops", 0)
        print(f"{row['shape']['name']:<30} {k:5.0f}  {fl:5.0f}  {cu:5.0f}  "
              f"{k / cu if cu else 0:9.2f}  {k / fl if fl else 0:9.2f}  "
              f"{'PASS' if row['kjit'].get('pass') else 'FAIL'}")
    return 0 if all(r["kjit"].get("pass") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
