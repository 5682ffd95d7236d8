#!/usr/bin/env python3
"""Attention with score and mask modifiers: kjit against FlexAttention, same GPU, same run.

    python3 tools/device/peers/attention_flex.py --kjit build/release/kjit [--out FILE.json]
        [--quick] [--only NAME,...] [--backward]

The attention issue's modifier cases, bf16, head dim 128, 16k tokens per batch,
16 heads, S in {2k, 8k}:
  softcap   score_mod  tanh(s / 50) * 50
  alibi     score_mod  s - slope[head] * |q_idx - kv_idx|   (a slope per head)
  window    mask_mod   kv_idx <= q_idx and q_idx - kv_idx < 256
kjit runs through `kjit bench attention --json --score-mod/--mask-mod` (its O and LSE,
or dQ, dK, dV with --backward, checked against the fp64 reference first, then timed
with the project's timer: L2 flushed before every run, median). The peer is what a
user would write: `torch.compile(flex_attention, dynamic=False)` per shape after
`torch._dynamo.reset()`, the block mask made once outside the timing
(create_block_mask, as FlexAttention's docs do), timed with triton.testing.do_bench
(median); its output is checked against eager float32 attention on the first batch
and two heads. The two get the same credited FLOPs (every (query, key) pair the masks
leave), so the ratio is one of times: peer ms / kjit ms.
"""
import argparse
import json
import subprocess
import sys

import torch
import triton.testing
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

TOKENS = 16384
HEADS = 16
HEAD_DIM = 128
WINDOW = 256

CASES = {
    "softcap": dict(score_mod="tanh(s / 50) * 50"),
    "alibi": dict(score_mod="slope:f32[heads]; s - slope * abs(q_idx - kv_idx)"),
    "window": dict(mask_mod=f"(kv_idx <= q_idx) * (q_idx - kv_idx < {WINDOW})"),
}


def pairs(case, seq):
    if case == "window":
        return sum(min(i + 1, WINDOW) for i in range(seq))
    return seq * seq


def median_ms(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")


def kjit_bench(kjit, case, seq, backward, config=None):
    cmd = [kjit, "bench", "attention", "--json", "--batch", str(TOKENS // seq), "--heads",
           str(HEADS), "--seq-q", str(seq), "--head-dim", str(HEAD_DIM), "--repeats", "30"]
    for key, flag in (("score_mod", "--score-mod"), ("mask_mod", "--mask-mod")):
        if key in CASES[case]:
            cmd += [flag, CASES[case][key]]
    if backward:
        cmd.append("--backward")
    if config:
        cmd += ["--config", config]
    try:
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return dict(error="timed out after 300 s")
    try:
        result = json.loads(run.stdout)
    except json.JSONDecodeError:
        return dict(error=(run.stderr or run.stdout).strip()[-400:], pass_=False)
    result["exit"] = run.returncode
    return result


def flex_peer(case, seq, backward):
    torch._dynamo.reset()
    batch = TOKENS // seq
    torch.manual_seed(0)
    shape = (batch, HEADS, seq, HEAD_DIM)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=backward)
               for _ in range(3))
    d_o = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
    slopes = torch.rand(HEADS, device="cuda")
    score_mod, block_mask = None, None
    if case == "softcap":
        def score_mod(score, b, h, q_idx, kv_idx):
            return torch.tanh(score / 50) * 50
    elif case == "alibi":
        def score_mod(score, b, h, q_idx, kv_idx):
            return score - slopes[h] * (q_idx - kv_idx).abs()
    else:
        def window(b, h, q_idx, kv_idx):
            return (kv_idx <= q_idx) & (q_idx - kv_idx < WINDOW)
        block_mask = create_block_mask(window, None, None, seq, seq)
    flex = torch.compile(flex_attention, dynamic=False)

    def call():
        return flex(q, k, v, score_mod=score_mod, block_mask=block_mask)
    o = call()
    # Eager float32 reference on batch 0, heads 0 and 1.
    qs, ks, vs = (t[0, :2].detach().float() for t in (q, k, v))
    scores = qs @ ks.transpose(-1, -2) / HEAD_DIM ** 0.5
    idx = torch.arange(seq, device="cuda")
    rel = idx[:, None] - idx[None, :]
    if case == "softcap":
        scores = torch.tanh(scores / 50) * 50
    elif case == "alibi":
        scores = scores - slopes[:2, None, None] * rel.abs()
    else:
        scores = scores.masked_fill(~((rel >= 0) & (rel < WINDOW)), float("-inf"))
    reference = torch.softmax(scores, dim=-1) @ vs
    check = ((o[0, :2].float() - reference).norm() / reference.norm()).item()
    timed = call
    if backward:
        def timed(o=o):
            return torch.autograd.grad(o, (q, k, v), d_o, retain_graph=True)
        timed()
    torch.cuda.synchronize()
    return dict(median_ms=median_ms(timed), rel_l2_vs_eager=check)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kjit", required=True, help="path of the kjit binary")
    parser.add_argument("--out", default=None)
    parser.add_argument("--quick", action="store_true", help="S = 2k only")
    parser.add_argument("--only", default=None, help="cases: softcap, alibi, window")
    parser.add_argument("--backward", action="store_true", help="time dQ, dK, dV instead")
    parser.add_argument("--config", default=None,
                        help="kjit's config (default: the tuner's choice from a fresh store)")
    args = parser.parse_args()
    direction = "backward" if args.backward else "forward"
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, {direction}", flush=True)
    rows = []
    for case in CASES:
        if args.only and case not in args.only.split(","):
            continue
        for seq in ((2048,) if args.quick else (2048, 8192)):
            credited = 4.0 * (TOKENS // seq) * HEADS * pairs(case, seq) * HEAD_DIM
            credited *= 2.5 if args.backward else 1.0
            row = dict(case=case, seq=seq, direction=direction, flops=credited,
                       kjit=kjit_bench(args.kjit, case, seq, args.backward, args.config))
            try:
                row["flex"] = flex_peer(case, seq, args.backward)
            except Exception as error:  # noqa: BLE001 - report, keep the other rows
                row["flex"] = dict(error=str(error).splitlines()[0][:200])
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)
    print(f"\n{direction:<9} case     S      kjit ms  flex ms  flex/kjit  kjit TF/s  check")
    for row in rows:
        k, f = row["kjit"].get("median_ms", 0), row["flex"].get("median_ms", 0)
        print(f"{'':<9} {row['case']:<8} {row['seq']:<6} {k:8.3f} {f:8.3f} "
              f"{f / k if k else 0:9.2f}  {row['flops'] / k / 1e9 if k else 0:9.0f}  "
              f"{'PASS' if row['kjit'].get('pass') else 'FAIL'}")
    return 0 if all(r["kjit"].get("pass") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
