"""Turning raw cells into the report: medians and spreads, Markdown tables,
SVG bar charts (drawn here, no plotting library needed), and results.json
with every raw number, the machine and the commands.

A cell's spread is (max - min) / median over its repetitions; above
`WIDE` the table marks the cell with a "~" so nobody trusts it blindly.
"""

import html
import json
import math
import os
import statistics

WIDE = 0.25
COLORS = {
    "cairn": "#d95f02",
    "cairn-baseline": "#fdae61",
    "cairn-nofast": "#a6761d",
    "cairn-syncdelete": "#8c510a",
    "cairn-nowbcache": "#e6ab02",
    "cairn-devfuse": "#b15928",
    "cairn-engine": "#fc8d62",
    "tmpfs": "#999999",
    "ext4": "#1b9e77",
    "xfs": "#7570b3",
    "btrfs": "#e7298a",
    "fuse2fs": "#66a61e",
}


def measured(runs):
    """The runs a cell's figures come from: those without an error, and of
    those the ones not slowed by a profiler (`--profile` records the first
    repetition of some cells; it counts only when no other run succeeded)."""
    ok = [r for r in runs if "error" not in r]
    return [r for r in ok if not r.get("profiled")] or ok


def summarize(values):
    vals = [x for x in values if x is not None]
    if not vals:
        return None
    med = statistics.median(vals)
    spread = (max(vals) - min(vals)) / med if med and len(vals) > 1 else 0.0
    return {"median": med, "min": min(vals), "max": max(vals), "n": len(vals), "spread": spread}


def number(x):
    """A measured number (not None, a flag, a string or a nested table)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def fmt(x):
    if x is None:
        return "—"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def cell_text(s):
    if s is None:
        return "—"
    t = fmt(s["median"])
    if s["n"] > 1:
        t += f" ({fmt(s['min'])}–{fmt(s['max'])})"
    if s["spread"] > WIDE:
        t += " ~"
    return t


def bar_chart(title, unit, groups, fs_order, higher_better):
    """groups: [(group label, {fs: value})] -> SVG text (grouped bars)."""
    width, row_h, left, right = 760, 18, 150, 90
    n_rows = sum(len([f for f in fs_order if v.get(f) is not None]) for _, v in groups)
    height = 40 + n_rows * row_h + len(groups) * 22 + 20
    vmax = max([x for _, v in groups for x in v.values() if x is not None] + [1e-9])
    plot_w = width - left - right
    y = 40
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="10" y="20" font-size="14" font-weight="bold">{html.escape(title)}</text>',
        f'<text x="{width - 10}" y="20" text-anchor="end" fill="#555">{html.escape(unit)}, '
        f'{"higher" if higher_better else "lower"} is better</text>',
    ]
    for label, vals in groups:
        parts.append(f'<text x="10" y="{y + 14}" font-weight="bold">{html.escape(label)}</text>')
        y += 20
        for fs in fs_order:
            x = vals.get(fs)
            if x is None:
                continue
            w = max(1.0, plot_w * x / vmax)
            parts.append(f'<text x="{left - 6}" y="{y + 13}" text-anchor="end">{fs}</text>')
            parts.append(
                f'<rect x="{left}" y="{y + 2}" width="{w:.1f}" height="{row_h - 4}" fill="{COLORS.get(fs, "#333")}"/>'
            )
            parts.append(f'<text x="{left + w + 4:.1f}" y="{y + 13}">{fmt(x)}</text>')
            y += row_h
        y += 2
    parts.append("</svg>")
    return "\n".join(parts)


def column_chart(title, unit, groups, fs_order, higher_better, ceiling=("tmpfs",)):
    """groups: [(group label, {fs: value})] -> SVG text: vertical bars, one
    cluster per group along x (e.g. job counts), one colour per file system,
    a y axis with gridlines. The y axis is scaled to the file systems other
    than `ceiling` (tmpfs, many times faster) when there are any; a bar above
    it is cut at the top, marked with a zigzag and labelled with its value."""
    width, height, left, right, top, bottom = 760, 390, 70, 20, 60, 80
    shown = [f for f in fs_order if any(v.get(f) is not None for _, v in groups)]
    vals = [x for _, v in groups for f, x in v.items() if x is not None and f in shown]
    scaled = [x for _, v in groups for f, x in v.items() if x is not None and f in shown and f not in ceiling]
    vmax = max(scaled or vals or [1e-9]) * 1.1
    # A round axis step: 1, 2 or 5 times a power of ten, about 5 gridlines.
    raw = vmax / 5
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    top_val = step * max(1, -(-vmax // step))
    plot_w, plot_h = width - left - right, height - top - bottom
    n = max(1, len(groups))
    slot = plot_w / n
    bar_w = min(28.0, slot * 0.8 / max(1, len(shown)))
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="10" y="20" font-size="14" font-weight="bold">{html.escape(title)}</text>',
        f'<text x="{width - 10}" y="40" text-anchor="end" fill="#555">{html.escape(unit)}, '
        f'{"higher" if higher_better else "lower"} is better</text>',
    ]
    k = 0
    while k * step <= top_val + 1e-9:
        yv = top + plot_h - plot_h * (k * step) / top_val
        parts.append(f'<line x1="{left}" y1="{yv:.1f}" x2="{width - right}" y2="{yv:.1f}" stroke="#ddd"/>')
        parts.append(f'<text x="{left - 6}" y="{yv + 4:.1f}" text-anchor="end" fill="#555">{fmt(k * step) if k else "0"}</text>')
        k += 1
    parts.append(f'<line x1="{left}" y1="{top + plot_h}" x2="{width - right}" y2="{top + plot_h}" stroke="#333"/>')
    for gi, (label, v) in enumerate(groups):
        x0 = left + gi * slot + (slot - bar_w * len(shown)) / 2
        for fi, fs in enumerate(shown):
            x = v.get(fs)
            if x is None:
                continue
            bx = x0 + fi * bar_w
            h = plot_h * min(x, top_val) / top_val
            y = top + plot_h - h
            parts.append(
                f'<rect x="{bx:.1f}" y="{y:.1f}" width="{bar_w - 2:.1f}" height="{h:.1f}" '
                f'fill="{COLORS.get(fs, "#333")}"><title>{fs}: {fmt(x)}</title></rect>'
            )
            if x > top_val:  # cut: zigzag across the top, value above
                zx, zw = bx, bar_w - 2
                parts.append(
                    f'<polyline points="{zx:.1f},{y + 8:.1f} {zx + zw / 3:.1f},{y + 4:.1f} '
                    f'{zx + 2 * zw / 3:.1f},{y + 10:.1f} {zx + zw:.1f},{y + 6:.1f}" fill="none" '
                    f'stroke="white" stroke-width="2"/>'
                )
                parts.append(
                    f'<text x="{bx + bar_w / 2:.1f}" y="{y - 4:.1f}" text-anchor="middle" font-size="10">'
                    f'{fmt(x)}</text>'
                )
        parts.append(
            f'<text x="{left + gi * slot + slot / 2:.1f}" y="{top + plot_h + 18}" text-anchor="middle">'
            f'{html.escape(label)}</text>'
        )
    lx, ly = left, height - 30
    for fs in shown:
        parts.append(f'<rect x="{lx}" y="{ly}" width="12" height="12" fill="{COLORS.get(fs, "#333")}"/>')
        parts.append(f'<text x="{lx + 16}" y="{ly + 11}">{html.escape(fs)}</text>')
        lx += 24 + 7.5 * len(fs)
    parts.append("</svg>")
    return "\n".join(parts)


def write(outdir, meta, experiments, cells, fs_order, quick):
    """cells: {(exp, variant_label, fs): [metric dicts per repetition]}."""
    os.makedirs(outdir, exist_ok=True)
    raw = {
        "meta": meta,
        "cells": [
            {"experiment": e, "variant": v, "fs": f, "runs": runs} for (e, v, f), runs in sorted(cells.items())
        ],
    }
    with open(os.path.join(outdir, "results.json"), "w") as fh:
        json.dump(raw, fh, indent=1)
    md = [
        f"# cairn benchmark report{' (quick mode)' if quick else ''}",
        "",
        f"{meta['date']}, {meta['machine']}; {meta['reps']} run(s) per cell{fewer_reps(meta)}, file systems interleaved "
        f"in each round; every cell on a freshly made file system, started once the machine was quiet "
        f"(under 5% busy, up to 20 s after the last cell's teardown); all images in RAM (loop devices "
        f"over files on a tmpfs; cairn and fuse2fs, where an experiment says so, on their image files in that tmpfs). "
        f"cairn {meta['cairn_version']}. Cells read `median (min–max)`; a `~` "
        f"marks a spread above {int(WIDE * 100)}% of the median: do not trust that cell.",
        "",
    ]
    if meta.get("notes"):
        md += [f"- {n}" for n in meta["notes"]] + [""]
    for exp in experiments:
        variants = [v["label"] for v in exp.variants(quick)]
        md += [f"## {exp.title}", "", f"Seed {exp.seed}. {exp.describe(quick)}", ""]
        md += exp.summary(cells, fs_order, quick)
        failed = [
            f"{f} ({v}): {runs[-1]['error']}"
            for (e, v, f), runs in sorted(cells.items())
            if e == exp.name and runs and "error" in runs[-1]
        ]
        for m in exp.metrics:
            if not m.table:
                continue
            rows = []
            for fs in fs_order:
                vals = [summarize([r.get(m.key) for r in measured(cells.get((exp.name, v, fs), []))])
                        for v in variants]
                if any(s is not None for s in vals):
                    rows.append((fs, vals))
            if not rows:
                continue
            head = f"| {m.label} ({m.unit}, {'higher' if m.higher_better else 'lower'} is better) | " + " | ".join(
                variants
            ) + " |"
            md += [head, "|---" * (len(variants) + 1) + "|"]
            md += [f"| {fs} | " + " | ".join(cell_text(s) for s in vals) + " |" for fs, vals in rows]
            md.append("")
            groups = [(v, {fs: (vals[i] or {}).get("median") for fs, vals in rows}) for i, v in enumerate(variants)]
            svg_name = f"{exp.name}-{m.key}.svg"
            chart = column_chart if getattr(exp, "chart", "bars") == "columns" else bar_chart
            with open(os.path.join(outdir, svg_name), "w") as fh:
                fh.write(chart(f"{exp.title}: {m.label}", m.unit, groups, fs_order, m.higher_better))
            md += [f"![{exp.title}: {m.label}]({svg_name})", ""]
        md += exp.details(cells, fs_order, quick)
        if failed:
            md += ["Cells that failed: " + "; ".join(failed), ""]
    md += ["## Commands and machine", "", "```", json.dumps(meta, indent=1), "```", ""]
    with open(os.path.join(outdir, "report.md"), "w") as fh:
        fh.write("\n".join(md))
    return os.path.join(outdir, "report.md")


def fewer_reps(meta):
    """`" (realwork: 1)"` for experiments that ran fewer repetitions than
    asked (`Experiment.max_reps`), or ""."""
    fewer = {k: n for k, n in meta.get("reps_by_experiment", {}).items() if n < meta["reps"]}
    return f" ({', '.join(f'{k}: {n}' for k, n in sorted(fewer.items()))})" if fewer else ""
