#!/usr/bin/env python3
"""Same-run A/B of kjit builds on attention (or matmul) problems: each binary benches
each case, the order rotated per case so drift falls on every build alike.

    python3 tools/device/attention_ab.py --kjit old=PATH --kjit new=PATH [--out FILE.json]
        [--case "NAME|kjit bench attention options" ...] [--rounds 2] [--family matmul]

Each run is `kjit bench attention --json` (`kjit bench matmul --json` with --family
matmul): checked against the reference, then timed (L2 flushed, median). Prints a
table of medians (the best round per build) and the ratio of each build to the first.
"""
import argparse
import json
import shlex
import subprocess

DEFAULT_CASES = [
    "d128 s2k|--batch 8 --heads 16 --seq-q 2048 --head-dim 128",
    "d128 s2k causal|--batch 8 --heads 16 --seq-q 2048 --head-dim 128 --causal",
    "d128 s8k causal|--batch 2 --heads 16 --seq-q 8192 --head-dim 128 --causal",
    "d64 s512|--batch 32 --heads 32 --seq-q 512 --head-dim 64",
]


def bench(kjit, family, options):
    cmd = [kjit, "bench", family, "--json", "--repeats", "30"] + shlex.split(options)
    try:
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    except subprocess.TimeoutExpired:
        return dict(error="timed out")
    try:
        return json.loads(run.stdout)
    except json.JSONDecodeError:
        return dict(error=(run.stderr or run.stdout).strip()[-300:])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kjit", action="append", required=True, help="NAME=PATH, repeatable")
    parser.add_argument("--case", action="append", help="NAME|options (default: a few shapes)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default=None)
    parser.add_argument("--family", choices=["attention", "matmul"], default="attention")
    args = parser.parse_args()
    builds = [tuple(b.split("=", 1)) for b in args.kjit]
    if args.family != "attention" and not args.case:
        parser.error("--family matmul needs --case")
    cases = [tuple(c.split("|", 1)) for c in (args.case or DEFAULT_CASES)]
    rows = []
    for index, (case, options) in enumerate(cases):
        best = {}
        for r in range(args.rounds):
            order = builds[(index + r) % len(builds):] + builds[:(index + r) % len(builds)]
            for name, path in order:
                result = bench(path, args.family, options)
                rows.append(dict(case=case, options=options, build=name, round=r, **result))
                if "median_ms" in result and result.get("pass", False):
                    best[name] = min(best.get(name, 1e30), result["median_ms"])
                elif "error" in result or not result.get("pass", False):
                    best.setdefault(name, float("nan"))
                    print(f"  {case} {name}: {result.get('error', 'check failed')}", flush=True)
        base = best.get(builds[0][0], float("nan"))
        cells = "  ".join(f"{n} {best.get(n, float('nan')):.4f}" +
                          (f" ({base / best[n]:.3f}x)" if n != builds[0][0] else "")
                          for n, _ in builds)
        print(f"{case:28s} {cells}", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
