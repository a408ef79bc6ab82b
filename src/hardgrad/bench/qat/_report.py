"""Tables, notes and the plot of the ``qat`` benchmark, computed from its runs."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from .._pyplot import (
    error_bars_allowed,
    legend_outside,
    pyplot,
    quick_title,
    save_figure,
    spread_caption,
)
from .._task import Table
from ..data import Dataset
from ._config import QatConfig

# --------------------------------------------------------------------------- report


def _summary(values: list[float]) -> dict[str, float]:
    return {
        "mean": statistics.fmean(values),
        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
        "min": min(values),
        "max": max(values),
    }


def _pct(value: float) -> str:
    return f"{100 * value:.1f}"


def _spread(row: dict[str, Any]) -> str:
    acc = row["test_accuracy"]
    if len(acc["values"]) == 1:
        return f"{_pct(acc['mean'])} (1 seed)"
    return f"{_pct(acc['mean'])} ± {_pct(acc['std'])}"


def _tables(rows: list[dict[str, Any]], config: QatConfig) -> list[Table]:
    float_mean = rows[0]["test_accuracy"]["mean"]
    main = Table(
        f"Test accuracy (%) per configuration, mean ± std over {config.seeds} seed(s), "
        f"Adam, {config.epochs} epochs",
        [
            "configuration",
            "precision",
            "gradient",
            "test acc",
            "min–max",
            "vs float (pp)",
            "train acc",
            "train loss",
            "s/run",
        ],
    )
    for r in rows:
        acc = r["test_accuracy"]
        drop = 100 * (acc["mean"] - float_mean)
        main.rows.append(
            [
                r["label"],
                r["precision"],
                r["gradient"],
                _spread(r),
                f"{_pct(acc['min'])}–{_pct(acc['max'])}",
                "—" if r["kind"] == "float" else f"{drop:+.1f}",
                _pct(r["train_accuracy"]["mean"]),
                f"{statistics.fmean(r['final_loss']):.3f}",
                f"{r['seconds_mean']:.2f}",
            ]
        )
    compare = Table(
        "Fixed-scale STE vs learned-scale LSQ: test accuracy (%) per bit width",
        ["bits", "STE", "LSQ", "LSQ − STE (pp)", "seed spread (pp)"],
    )
    by_key = {(r["kind"], r["bits"]): r for r in rows}
    for bits in config.bits:
        ste, lsq = by_key.get(("ste", bits)), by_key.get(("lsq", bits))
        if ste is None or lsq is None:
            continue
        diff = 100 * (lsq["test_accuracy"]["mean"] - ste["test_accuracy"]["mean"])
        spread = 100 * max(ste["test_accuracy"]["std"], lsq["test_accuracy"]["std"])
        compare.rows.append(
            [str(bits), _spread(ste), _spread(lsq), f"{diff:+.1f}", f"{spread:.1f}"]
        )
    return [main, compare] if compare.rows else [main]


def _notes(rows: list[dict[str, Any]], config: QatConfig, data: Dataset) -> list[str]:
    float_row = rows[0]
    float_mean = float_row["test_accuracy"]["mean"]
    notes = [
        f"Data: {data.name}, {len(data.x_train)} train / {len(data.x_test)} test images; MLP "
        f"{data.features}-{'-'.join(map(str, config.hidden))}-{float_row['classes']}; Adam "
        f"(lr {config.lr}, binary {config.binary_lr}), batch {config.batch_size}, "
        f"{config.epochs} epochs, {config.seeds} seed(s). Quantized networks: all weights "
        "b-bit per output channel, hidden activations b-bit unsigned, biases and input float.",
        f"Float baseline: {_pct(float_mean)} % test accuracy (chance "
        f"{_pct(1 / float_row['classes'])} %).",
    ]
    drops = []
    for r in rows[1:]:
        drops.append(f"{r['label']} {100 * (r['test_accuracy']['mean'] - float_mean):+.1f}")
    if drops:
        notes.append("Test accuracy vs float (pp): " + ", ".join(drops) + ".")
    by_key = {(r["kind"], r["bits"]): r for r in rows}
    image = 100 / max(len(data.x_test), 1)  # one test image, in pp
    resolved: dict[int, bool] = {}
    for bits in sorted(config.bits):
        ste, lsq = by_key.get(("ste", bits)), by_key.get(("lsq", bits))
        if ste is None or lsq is None:
            continue
        s, q = ste["test_accuracy"], lsq["test_accuracy"]
        diff = 100 * (q["mean"] - s["mean"])
        noise = 100 * max(s["std"], q["std"])
        resolved[bits] = config.seeds >= 2 and abs(diff) > max(2 * noise, image)
        if config.seeds < 2:
            verdict = "one seed, so the spread is unknown: not resolved"
        elif resolved[bits]:
            verdict = f"more than twice the larger seed spread ({noise:.1f} pp)"
        else:
            verdict = f"not resolved (seed spread {noise:.1f} pp, one test image {image:.2f} pp)"
        if diff > 0:
            claim = f"LSQ beats fixed-scale STE by {diff:.1f} pp"
        elif diff < 0:
            claim = f"LSQ does NOT beat fixed-scale STE (it is {-diff:.1f} pp lower)"
        else:
            claim = "LSQ and fixed-scale STE tie"
        s_loss = statistics.fmean(ste["final_loss"])
        q_loss = statistics.fmean(lsq["final_loss"])
        notes.append(
            f"{bits}-bit: {claim}; {verdict}. Last-epoch training loss: LSQ {q_loss:.3f}, "
            f"STE {s_loss:.3f}."
        )
    if resolved:
        low = min(resolved)
        ste_low, lsq_low = by_key[("ste", low)], by_key[("lsq", low)]
        diff = lsq_low["test_accuracy"]["mean"] - ste_low["test_accuracy"]["mean"]
        lower_loss = statistics.fmean(lsq_low["final_loss"]) < statistics.fmean(
            ste_low["final_loss"]
        )
        fit = (
            "fits the training set better" if lower_loss else "does not fit the training set better"
        )
        if resolved[low] and diff > 0:
            verdict = "learning the scale helps test accuracy, in line with Esser et al. (2020)"
        elif resolved[low]:
            verdict = (
                "learning the scale does not help test accuracy, unlike what Esser et al. "
                "(2020) report"
            )
        else:
            verdict = (
                "the test-accuracy difference is not resolved by this run, so it neither "
                "confirms nor contradicts Esser et al. (2020)"
            )
        notes.append(f"At the lowest width ({low} bits) {verdict}; LSQ {fit}.")
    if ("binary", None) in by_key:
        b = by_key[("binary", None)]["test_accuracy"]["mean"]
        notes.append(
            f"Binary network (±1 weights in the middle layer, ±1 activations, float first and "
            f"last layer, BatchNorm before each sign, clipped STE): {_pct(b)} %, "
            f"{100 * (b - float_mean):+.1f} pp vs float."
        )
    if ("ternary", None) in by_key:
        t = by_key[("ternary", None)]["test_accuracy"]["mean"]
        notes.append(
            f"Ternary network (TWN weights {{-a, 0, +a}} per output channel in the middle layer, "
            f"float ReLU activations and first and last layer): {_pct(t)} %, "
            f"{100 * (t - float_mean):+.1f} pp vs float."
        )
    return notes


def plot_accuracy(
    rows: list[dict[str, Any]], config: QatConfig, out: Path, *, quick: bool = False
) -> str | None:
    """``qat_accuracy.png``: test accuracy per precision (float, bits, binary), one line per
    quantizer gradient, error bars spanning the seeds' range from two seeds on."""
    plt = pyplot()
    if plt is None:
        return None
    bits = sorted(config.bits, reverse=True)
    extra = [k for k, on in (("binary", config.binary), ("ternary", config.ternary)) if on]
    ticks = ["float", *[f"{b}-bit" for b in bits], *extra]
    fig, ax = plt.subplots(figsize=(6.4, 4.2), layout="constrained")
    by_key = {(r["kind"], r["bits"]): r for r in rows}
    spread = error_bars_allowed(config.seeds)

    def point(row: dict[str, Any]) -> tuple[float, float, float]:
        acc = row["test_accuracy"]
        return 100 * acc["mean"], 100 * (acc["mean"] - acc["min"]), 100 * (acc["max"] - acc["mean"])

    def draw(xs: list[float], ys: list[float], lo: list[float], hi: list[float], **kw: Any) -> None:
        if spread:
            ax.errorbar(xs, ys, yerr=[lo, hi], capsize=3, **kw)
        else:
            ax.plot(xs, ys, **kw)

    f_mean, f_lo, f_hi = point(by_key[("float", None)])
    for offset, (method, color) in zip((-0.06, 0.06), (("ste", "C0"), ("lsq", "C1")), strict=True):
        xs, ys, lo, hi = [0.0], [f_mean], [f_lo], [f_hi]
        for i, b in enumerate(bits, start=1):
            if (method, b) in by_key:
                m, low, high = point(by_key[(method, b)])
                xs.append(i + offset)
                ys.append(m)
                lo.append(low)
                hi.append(high)
        if len(xs) > 1:
            label = "STE, fixed scale" if method == "ste" else "LSQ, learned scale"
            draw(xs, ys, lo, hi, color=color, marker="o", label=label)
    for kind, color, label in (
        ("binary", "C2", "binary, clipped STE"),
        ("ternary", "C3", "ternary (TWN), STE"),
    ):
        if (kind, None) in by_key:
            m, low, high = point(by_key[(kind, None)])
            draw([ticks.index(kind)], [m], [low], [high], color=color, marker="s",
                 linestyle="none", label=label)  # fmt: skip
    ax.axhline(f_mean, color="grey", linestyle="--", linewidth=0.8, label="float")
    ax.set_xticks(range(len(ticks)), ticks)
    ax.set_ylabel("test accuracy (%)")
    ax.grid(alpha=0.3)
    caption = spread_caption(config.seeds, "min to max")
    ax.set_title(
        quick_title(f"QAT MLP {'-'.join(map(str, config.hidden))}: accuracy per precision",
                    quick, config)
        + f"\n{caption}",
        fontsize=9,
    )  # fmt: skip
    legend_outside(ax, fontsize=8)
    return save_figure(
        fig,
        out,
        "qat_accuracy.png",
        caption=f"test accuracy per precision and quantizer gradient; {caption}; dashed: float.",
        table="Test accuracy (%) per configuration",
    )
