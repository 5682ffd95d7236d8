#!/usr/bin/env python3
"""Tables (and the N-sweep plot) from tools/device/tune_check.sh's JSON.

    python3 tools/device/report_tuner.py OUT [--plot sweep.png] [--markdown report.md]
"""
import argparse
import json
import os
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def shape_of(spec):
    s = f"{spec['m']}x{spec['n']}x{spec['k']}"
    return s + (f" {spec['epilogue']}" if spec.get("epilogue") else "")


def search_quality(out, lines):
    model, exhaustive = load(f"{out}/model.json"), load(f"{out}/exhaustive.json")
    if not model or not exhaustive:
        return
    lines.append("## Search quality: the model's top 8 (+ variants) vs the exhaustive best")
    lines.append("| shape | space | exhaustive best (ms) | model's pick (ms, in the exhaustive run) | "
                 "ratio | within 3% | model tune: compile + measure = s | exhaustive s | "
                 "Spearman model vs measured |")
    lines.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for m, e in zip(model["problems"], exhaustive["problems"]):
        if "error" in m or "error" in e:
            lines.append(f"| {shape_of(m['spec'])} | error: {m.get('error') or e.get('error')} |")
            continue
        trials = {t["config"]: t for t in e["trials"] if "median_ms" in t}
        best = min(t["median_ms"] for t in trials.values())
        pick = trials.get(m["config"], {}).get("median_ms")
        ratio = pick / best if pick else float("nan")
        lines.append(
            f"| {shape_of(m['spec'])} | {e['space']} | {best:.4f} | "
            f"{pick if pick is None else f'{pick:.4f}'} | {ratio:.3f} | "
            f"{'yes' if ratio <= 1.03 else 'NO'} | {m['compile_s']:.1f} + {m['measure_s']:.1f} = "
            f"{m['total_s']:.1f} | {e['total_s']:.1f} | {e['spearman_model_vs_measured']:.2f} |")


def no_cliffs(out, lines):
    for name, title in (("bench_shapes", "The benchmark shapes"), ("bench_sweep", "The N sweep (M = K = 4096)")):
        doc = load(f"{out}/{name}.json")
        if not doc:
            continue
        lines.append(f"## {title}: default (model, nothing tuned) vs tuned vs cuBLASLt, TFLOP/s")
        lines.append("| shape | default | tuned | cuBLASLt | tuned / cuBLASLt | default / cuBLASLt | "
                     "tuned / default | tuned config |")
        lines.append("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for r in doc["results"]:
            v = {x["label"].split(" ")[0]: x for x in r["variants"]}
            flops = 2.0 * r["m"] * r["n"] * r["k"]
            tf = lambda ms: flops / (ms * 1e-3) / 1e12 if ms else 0
            lines.append(
                f"| {r['shape']} | {tf(v['default']['median_ms']):.1f} | {tf(v['tuned']['median_ms']):.1f} | "
                f"{tf(r['cublas_ms']):.1f} | {r['tuned_vs_cublas']:.3f} | {r['default_vs_cublas']:.3f} | "
                f"{r['tuned_vs_default']:.3f} | {v['tuned']['config']} |")


def determinism(out, lines):
    model, again = load(f"{out}/tune_c.json"), load(f"{out}/tune_d.json")
    if not model or not again:
        return
    lines.append("## Determinism: two independent model tunes (fresh stores), winners timed side by side")
    lines.append("| shape | tune 1 | tune 2 | same config | time ratio (same process) | within 1% |")
    lines.append("| --- | --- | --- | --- | --- | --- |")
    within = 0
    for x, y in zip(model["problems"], again["problems"]):
        s = x["spec"]
        shape = f"{s['m']}x{s['n']}x{s['k']}"
        pair = load(f"{out}/pair_{shape}.json") if "epilogue" not in s else None
        ratio = None
        if x["config"] == y["config"]:
            ratio = 1.0
        elif pair:
            times = {v["config"]: v["median_ms"] for v in pair["results"][0]["variants"] if v["label"] == "config"}
            if x["config"] in times and y["config"] in times:
                ratio = times[y["config"]] / times[x["config"]]
        else:  # the epilogue shape: the two tunes' own medians
            ratio = y["median_ms"] / x["median_ms"]
        ok = ratio is not None and abs(ratio - 1) <= 0.01
        within += ok
        lines.append(f"| {shape_of(s)} | {x['config']} | {y['config']} | {x['config'] == y['config']} | "
                     f"{'-' if ratio is None else f'{ratio:.4f}'} | {'yes' if ok else 'NO'} |")
    lines.append(f"\n{within} of {len(model['problems'])} within 1%.")


def elementwise(out, lines):
    torch_doc = load(f"{out}/torch_elementwise.json")
    chains = []
    if os.path.exists(f"{out}/chains.txt"):
        chains = [l.split("\t") for l in open(f"{out}/chains.txt").read().splitlines() if l]
    if not chains:
        return
    peers = {r["chain"]: r for r in (torch_doc or {}).get("results", [])}
    lines.append("## Elementwise: tuned kjit vs torch.compile (static shapes), 2^28 elements")
    lines.append("| chain | kjit tuned ms | kjit config | torch.compile ms | eager ms | kjit / torch.compile "
                 "(speed) | kjit % of copy |")
    lines.append("| --- | --- | --- | --- | --- | --- | --- |")
    for i, (name, expr, dtype, sizes) in enumerate(chains, 1):
        b = load(f"{out}/bench_chain{i}.json") or {}
        p = peers.get(name, {})
        ms = b.get("median_ms")
        speed = p["compile_ms"] / ms if ms and p.get("compile_ms") else float("nan")
        lines.append(f"| {name} | {ms if ms is None else f'{ms:.4f}'} | {b.get('config', '-')} | "
                     f"{p.get('compile_ms', float('nan')):.4f} | {p.get('eager_ms', float('nan')):.4f} | "
                     f"{speed:.3f} | {100 * b.get('fraction_of_copy', 0):.1f}% |")


def store(out, lines):
    doc = load(f"{out}/tuned_start.json")
    if not doc:
        return
    c = doc["child"]
    lines.append("## A tuned matmul in a new process")
    lines.append(f"config from the {c['config_source']}, kernel from the {c['kernel_origin']}; first lookup "
                 f"{c['first_choose_us']:.1f} us, in-process lookup {c['repeat_choose_us']:.3f} us; "
                 f"pass: {doc['pass']}")


def gpus(out, lines):
    one, every = load(f"{out}/gpus_one.json"), load(f"{out}/gpus_all.json")
    if not one or not every:
        return
    lines.append("## Several GPUs: the Llama-style workload")
    lines.append(f"one GPU {one['seconds']:.1f} s, {len(every['gpus'])} GPUs {every['seconds']:.1f} s: "
                 f"{every['seconds'] / one['seconds']:.2f}x the time")


def plot(out, path):
    doc = load(f"{out}/bench_sweep.json")
    if not doc:
        return
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ns, series = [], {"default": [], "tuned": [], "cuBLASLt": []}
    for r in doc["results"]:
        flops = 2.0 * r["m"] * r["n"] * r["k"]
        v = {x["label"].split(" ")[0]: x for x in r["variants"]}
        ns.append(r["n"])
        series["default"].append(flops / v["default"]["median_ms"] / 1e9)
        series["tuned"].append(flops / v["tuned"]["median_ms"] / 1e9)
        series["cuBLASLt"].append(flops / r["cublas_ms"] / 1e9)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for label, ys in series.items():
        ax.plot(ns, ys, marker="o", label=label)
    ax.set_xlabel("N (M = K = 4096, bf16)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"Wave cliff sweep on {doc['device']} ({doc['sm_count']} SMs)")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--plot", default=None)
    parser.add_argument("--markdown", default=None)
    args = parser.parse_args()
    lines = []
    for section in (search_quality, no_cliffs, determinism, elementwise, store, gpus):
        section(args.out, lines)
        lines.append("")
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        open(args.markdown, "w").write(text)
    if args.plot:
        plot(args.out, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
