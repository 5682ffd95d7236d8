#!/usr/bin/env python3
"""Joins kjit bench JSON and the torch peer JSON into one table with the issue's targets.

    report_elementwise.py DIR OUT.json   (DIR holds sincos.json, silu_gate.json, fma.json, torch.json)
"""
import json
import sys

ROWS = [  # file, torch chain name, target fraction of copy, must also match torch.compile
    ("sincos.json", "sin(x)^2 + cos(x)^2", 0.93, True),
    ("silu_gate.json", "x * sigmoid(x) * g", 0.90, False),
    ("fma.json", "a * b + c", None, False),
]


def main():
    folder, out_path = sys.argv[1], sys.argv[2]
    torch = {r["chain"]: r for r in json.load(open(f"{folder}/torch.json"))["results"]}
    rows = []
    for file, chain, target, vs_compile in ROWS:
        k = json.load(open(f"{folder}/{file}"))
        t = torch[chain]
        row = dict(chain=chain, n=k["n"], kjit_ms=k["median_ms"], kjit_fraction_of_copy=k["fraction_of_copy"],
                   kjit_copy_ms=k["copy_median_ms"], unfused_ms=k["unfused_median_ms"],
                   fused_speedup=k["fused_speedup"], torch_compile_ms=t["compile_ms"], torch_eager_ms=t["eager_ms"],
                   torch_copy_ms=t["copy_ms"], kjit_vs_torch_compile=t["compile_ms"] / k["median_ms"],
                   target_fraction=target)
        row["meets_target"] = (target is None or row["kjit_fraction_of_copy"] >= target) and (
            not vs_compile or row["kjit_vs_torch_compile"] >= 1.0)
        rows.append(row)
    json.dump(rows, open(out_path, "w"), indent=2)
    print(f"{'chain':<22} {'kjit ms':>8} {'of copy':>8} {'compile ms':>10} {'kjit/compile':>12} "
          f"{'unfused ms':>10} {'fusion':>7}  target")
    for r in rows:
        target = f">= {r['target_fraction']:.0%} copy" if r["target_fraction"] else "(no target)"
        print(f"{r['chain']:<22} {r['kjit_ms']:8.3f} {r['kjit_fraction_of_copy']:8.1%} {r['torch_compile_ms']:10.3f} "
              f"{r['kjit_vs_torch_compile']:11.2f}x {r['unfused_ms']:10.3f} {r['fused_speedup']:6.2f}x  {target} "
              f"{('MET' if r['meets_target'] else 'MISSED') if r['target_fraction'] else ''}")


if __name__ == "__main__":
    main()
