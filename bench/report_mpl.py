#!/usr/bin/env python3
"""bench/report_mpl.py: the peer of `fidelity report` in bench/report.sh.

Reads a fidelity-probe/1 JSON document (`fidelity probe --json`) and draws
the heatmaps the HTML report draws, with matplotlib, to SVG files in OUTDIR:
one figure per kind, variant and temperature (length x depth, or length x
variant for kinds measured at one depth), pass rate in viridis with the
number in each cell, the baseline's map and the difference map beside it
when the run had a baseline. This is what a user would otherwise write in
a notebook. Prints the number of figures.

usage: python3 bench/report_mpl.py probe.json OUTDIR
"""
import json
import os
import sys

import matplotlib

matplotlib.use("svg")
import matplotlib.pyplot as plt  # noqa: E402


def maps(cells):
    kinds = []
    for c in cells:
        if c["kind"] not in kinds:
            kinds.append(c["kind"])
    out = []
    for k in kinds:
        kc = [c for c in cells if c["kind"] == k]
        variants = list(dict.fromkeys(c["variant"] for c in kc))
        depths = sorted(set(c["depth"] for c in kc))
        temps = list(dict.fromkeys(c["temperature"] for c in kc))
        by_variant = len(depths) == 1 and len(variants) > 1
        for t in temps:
            for v in ([None] if by_variant else variants):
                out.append((k, v, t))
    return out


def grid(cells, key):
    k, v, t = key
    sel = [c for c in cells if c["kind"] == k and c["temperature"] == t
           and (v is None or c["variant"] == v)]
    rows = sorted(set(c["length"] for c in sel))
    if v is None:
        cols = list(dict.fromkeys(c["variant"] for c in sel))
        col_of = lambda c: c["variant"]
    else:
        cols = sorted(set(c["depth"] for c in sel))
        col_of = lambda c: c["depth"]
    m = [[float("nan")] * len(cols) for _ in rows]
    for c in sel:
        if c["cases"]:
            m[rows.index(c["length"])][cols.index(col_of(c))] = c["pass_rate"]
    return rows, cols, m


def draw(ax, rows, cols, m, title, cmap, vmin, vmax):
    im = ax.imshow(m, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
    ax.set_xticks(range(len(cols)), [str(c) for c in cols])
    ax.set_yticks(range(len(rows)), [str(r) for r in rows])
    ax.set_title(title)
    for i in range(len(rows)):
        for j in range(len(cols)):
            x = m[i][j]
            if x == x:
                ax.text(j, i, "%.0f" % (100 * x), ha="center", va="center",
                        fontsize=7)
    return im


def main():
    doc = json.load(open(sys.argv[1]))
    out = sys.argv[2]
    os.makedirs(out, exist_ok=True)
    ec = doc["results"]["cells"]
    bc = (doc.get("baseline_results") or {}).get("cells")
    n = 0
    for key in maps(ec):
        rows, cols, m = grid(ec, key)
        panels = 3 if bc else 1
        fig, axes = plt.subplots(1, panels, figsize=(4 * panels, 3),
                                 squeeze=False)
        title = "%s [%s] t=%s" % key
        im = draw(axes[0][0], rows, cols, m, title + " endpoint", "viridis",
                  0, 1)
        fig.colorbar(im, ax=axes[0][0])
        if bc:
            _, _, b = grid(bc, key)
            draw(axes[0][1], rows, cols, b, "baseline", "viridis", 0, 1)
            d = [[m[i][j] - b[i][j] for j in range(len(cols))]
                 for i in range(len(rows))]
            im = draw(axes[0][2], rows, cols, d, "difference", "PuOr", -1, 1)
            fig.colorbar(im, ax=axes[0][2])
        fig.tight_layout()
        fig.savefig(os.path.join(out, "map%03d.svg" % n))
        plt.close(fig)
        n += 1
    print(n)


if __name__ == "__main__":
    main()
