#!/usr/bin/env python3
"""Plot a kjit lesson's CSV (kjit lesson NAME writes it): one line per series,
measured values where there are any, else the model's predictions (dashed).

    python3 tools/lessons/plot.py lessons/waves.csv --title waves --x N --y TFLOP/s
    python3 tools/lessons/plot.py lessons/roofline.csv --log --roof 989,4.8   # TFLOP/s, TB/s
"""
import argparse
import csv
import sys


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv")
    parser.add_argument("--title", default="")
    parser.add_argument("--x", default="x")
    parser.add_argument("--y", default="")
    parser.add_argument("--out", default=None, help="the image (default: the CSV's name, .png)")
    parser.add_argument("--log", action="store_true", help="logarithmic axes")
    parser.add_argument("--roof", default=None,
                        help="PEAK_TFLOPS,TB_PER_S: draw the roofline min(peak, bandwidth x intensity)")
    args = parser.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plotting needs matplotlib: pip install matplotlib", file=sys.stderr)
        return 1
    series = {}
    with open(args.csv) as f:
        rows = list(csv.DictReader(f))
    # The lesson's metric (e.g. measured_TFLOP/s); a lesson measured in ms has only
    # the ms columns.
    metric = next((k for k in rows[0] if k.startswith("measured_") and k != "measured_ms"),
                  "measured_ms")
    predicted_metric = next((k for k in rows[0] if k.startswith("predicted_") and
                             k != "predicted_ms"), "predicted_ms")
    for row in rows:
        measured = float(row[metric]) if row.get(metric) else 0.0  # empty: not measured
        value, kind = (measured, "measured") if measured > 0 else \
            (float(row[predicted_metric]), "predicted")
        series.setdefault((row["series"], kind), []).append((float(row["x"]), value))
    figure, axes = plt.subplots(figsize=(7, 4.2))
    for (name, kind), points in series.items():
        points.sort()
        axes.plot([p[0] for p in points], [p[1] for p in points], marker="o",
                  linestyle="none" if args.roof else "-" if kind == "measured" else "--",
                  label=f"{name} ({kind})")
    if args.roof:
        peak, bandwidth = (float(v) for v in args.roof.split(","))
        xs = [p[0] for points in series.values() for p in points]
        lo, hi = min(xs) / 2, max(xs) * 2
        grid = [lo * (hi / lo) ** (i / 200) for i in range(201)]
        axes.plot(grid, [min(peak, bandwidth * x) for x in grid], color="black", linewidth=1,
                  label=f"roofline: {peak:.0f} TFLOP/s, {bandwidth:.2f} TB/s "
                        f"(ridge {peak / bandwidth:.0f} FLOP/B)")
    if args.log:
        axes.set_xscale("log")
        axes.set_yscale("log")
    axes.set_xlabel(args.x)
    axes.set_ylabel(args.y)
    axes.set_title(args.title)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    out = args.out or args.csv.rsplit(".", 1)[0] + ".png"
    figure.savefig(out, dpi=130)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
