"""Tables, notes and the plot of the ``poly`` benchmark (see :mod:`hardgrad.bench.poly`).

Every statement in the notes is computed from the runs; the literature's claims they are
compared with are named next to them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .._pyplot import legend_outside, pyplot, quick_title, save_figure
from .._task import Table
from ._config import PolyConfig

#: A mean final gap below this many times ``within`` is "approaching" the optimum.
APPROACH_FACTOR = 5.0
#: A run that gained less than this fraction of its gap over the last quarter "stalled".
STALL_PROGRESS = 0.1

VERDICTS = ("reached", "approaching", "slow", "stalled")


def verdict(summary: dict[str, Any], within: float) -> str:
    """``"reached"``: every seed within ``within`` of the optimum at the end;
    ``"approaching"``: mean gap below ``5 * within``; ``"stalled"``: farther, and the gap
    fell by less than 10 % over the last quarter of the run; ``"slow"``: farther, still
    falling."""
    if all(g <= within for g in summary["gap"]):
        return "reached"
    gap, late = summary["gap_mean"], summary["gap_at_three_quarters"]
    if gap < APPROACH_FACTOR * within:
        return "approaching"
    if late - gap < STALL_PROGRESS * late:
        return "stalled"
    return "slow"


def _steps_cell(steps: list[int | None]) -> str:
    hit = [s for s in steps if s is not None]
    if not hit:
        return "not reached"
    text = f"{sum(hit) / len(hit):.0f}" if len(hit) > 1 else str(hit[0])
    if len(hit) > 1:
        text += f" ({min(hit)}-{max(hit)})"
    return text + f" [{len(hit)}/{len(steps)} seeds]"


def tables(data: dict[str, Any], config: PolyConfig, quick: bool) -> list[Table]:
    """One table per power (estimators as rows) and one of costs."""
    runs: dict[str, Any] = data["runs"]
    out = []
    for power in config.powers:
        key = str(power)
        best = data["optima"][key]
        table = Table(
            title=f"p = {power:g}: exact final loss E[mean |z - {config.target}|^p] after "
            f"{config.steps} Adam(lr={config.lr:g}) steps, {config.seeds} seeds; optimum "
            f"{best:.6g}",
            columns=[
                "estimator",
                "unbiased",
                "f evals/step",
                "final loss (mean ± sd)",
                "gap to optimum (mean ± sd)",
                f"first step within {100 * config.within:g} %",
                "verdict",
            ],
        )
        for name, entry in runs.items():
            s = entry["powers"][key]
            table.rows.append(
                [
                    name,
                    "yes" if entry["unbiased"] else "no",
                    "analytic" if name == "closed-form" else str(entry["evaluations_per_step"]),
                    f"{s['final_mean']:.6g} ± {s['final_std']:.2g}",
                    f"{100 * s['gap_mean']:.3g} % ± {100 * s['gap_std']:.2g}",
                    _steps_cell(s["steps_within"]),
                    verdict(s, config.within),
                ]
            )
        table.notes.append(
            "Loss: the exact expected loss of the final probabilities (closed form), not a "
            f"sample; sd over seeds. Steps: recorded every {config.record_every} steps, mean "
            "(range) over the seeds that got there. Verdict: 'reached' every seed within "
            f"{100 * config.within:g} %; 'approaching' mean gap < "
            f"{APPROACH_FACTOR * 100 * config.within:g} %; 'stalled' farther and the gap fell "
            f"< {100 * STALL_PROGRESS:g} % over the last quarter; 'slow' farther, still falling."
        )
        if quick:
            table.notes.append(
                f"--quick: {config.steps} steps at lr {config.lr:g}, {config.seeds} seeds, "
                f"{config.batch} f evaluations per step, relax(mlp) left out (the full run: "
                "8000 steps at lr 1e-3, 3 seeds, 64 evaluations, relax(mlp); same lr x steps)."
            )
        out.append(table)
    cost = Table(
        title=f"Cost per estimator: f evaluations per step (budget {config.batch}), wall time "
        f"over all {len(config.powers)} powers and {config.seeds} seeds",
        columns=["estimator", "samples/step", "f evals/step", "wall s", "ms/step", "state"],
    )
    for name, entry in runs.items():
        state = "-"
        if "final_tau" in entry:
            state = ", ".join(
                f"p={p}: tau {entry['final_tau'][p]:.3g}, scale {entry['final_scale'][p]:.3g}"
                for p in entry["final_tau"]
            )
        elif entry["stateful"]:
            state = "per power"
        cost.rows.append(
            [
                name,
                "-" if name == "closed-form" else str(entry["num_samples"]),
                "analytic" if name == "closed-form" else str(entry["evaluations_per_step"]),
                f"{entry['wall_s']:.2f}",
                f"{entry['ms_per_step']:.3f}",
                state,
            ]
        )
    cost.notes.append(
        "Stateful estimators run once per power (their parameters in the same Adam, shared by "
        "that power's seeds); the others run all powers and seeds as rows of one logits "
        "tensor, so their ms/step covers every power at once. REBAR/RELAX spend 3 evaluations "
        f"per sample: {config.batch // 3} samples = {3 * (config.batch // 3)} evaluations. "
        f"'exact' is not run ({data['not_run']['exact']})."
    )
    out.append(cost)
    return out


def notes(data: dict[str, Any], config: PolyConfig) -> list[str]:
    """What the runs say, next to what the literature says."""
    runs: dict[str, Any] = data["runs"]
    powers = [str(p) for p in config.powers]
    groups: dict[str, list[str]] = {v: [] for v in VERDICTS}
    per_name: dict[str, dict[str, str]] = {}
    for name, entry in runs.items():
        per_name[name] = {p: verdict(entry["powers"][p], config.within) for p in powers}
        for v in VERDICTS:
            at = [p for p in powers if per_name[name][p] == v]
            if at:
                groups[v].append(f"{name} (p={', '.join(at)})")
    out = [
        f"After {config.steps} steps ({100 * config.within:g} % of the optimum = 'reached'): "
        + "; ".join(f"{v}: {', '.join(groups[v]) or 'none'}" for v in VERDICTS)
        + "."
    ]
    if "closed-form" in runs:
        ref = runs["closed-form"]["powers"]
        out.append(
            "Reference (closed-form gradient): first within "
            f"{100 * config.within:g} % at step "
            + ", ".join(f"{_first(ref[p]['steps_within'])} (p={p})" for p in powers)
            + "; no estimator can beat this schedule by much, Adam moves each logit about lr "
            "per step."
        )
    if "st" in runs:
        parts = []
        for p in powers:
            stall = data["st_stall"][p]
            final = runs["st"]["powers"][p]["final_mean"]
            parts.append(
                f"p={p}: final {final:.4g}, loss at its stationary point pi = "
                f"{stall['probability']:.3g} is {stall['loss']:.4g} "
                f"({100 * (final / stall['loss'] - 1):+.2g} %)"
            )
        stalls = all(per_name["st"][p] in ("stalled", "slow") for p in powers)
        out.append(
            "Straight-through (tau = 1): its mean gradient vanishes where pi(1-t)^(p-1) = "
            "(1-pi)t^(p-1), not at the optimum pi = 0; "
            + "; ".join(parts)
            + (
                ". It stalls, as Liu et al. (2023) report."
                if stalls
                else ". It does NOT stall at every p, against Liu et al. (2023)."
            )
        )
    if "reinmax" in runs:
        ok = [p for p in powers if per_name["reinmax"][p] in ("reached", "approaching")]
        gaps = ", ".join(
            f"{100 * runs['reinmax']['powers'][p]['gap_mean']:.3g} % (p={p})" for p in powers
        )
        out.append(
            f"ReinMax: final gaps {gaps}; "
            + (
                "it approaches the optimum at every p, as Liu et al. (2023) report."
                if len(ok) == len(powers)
                else "it does NOT approach the optimum at p = "
                + ", ".join(p for p in powers if p not in ok)
                + ", against Liu et al. (2023)"
                + (" (within this run's steps)." if config.steps < 8000 else ".")
            )
        )
    unbiased = [n for n, e in runs.items() if e["unbiased"] and n != "closed-form"]
    if unbiased:
        good = [
            n for n in unbiased if all(per_name[n][p] in ("reached", "approaching") for p in powers)
        ]
        bad = [n for n in unbiased if n not in good]
        out.append(
            f"Unbiased estimators at {config.batch} evaluations per step: approaching the "
            f"optimum at every p: {', '.join(good) or 'none'}; not (too noisy for Adam at "
            f"this budget, the score of 128 variables against one loss): {', '.join(bad) or 'none'}."
            + (
                " The literature's 'good unbiased estimators approach the optimum' holds for "
                + ", ".join(good)
                + "."
                if good
                else " NOT what Liu et al. (2023) report for good unbiased estimators."
            )
        )
        closed = [
            f"{n} {100 * (1 - _mean_gap(runs[n], powers) / _mean_gap(runs[n], powers, 'gap_at_start')):.0f} %"
            for n in bad
        ]
        if closed:
            out.append(
                "Share of the starting gap closed (mean over p) by the unbiased estimators that "
                "did not approach: " + ", ".join(closed) + "; a small share means the "
                "gradient noise swamps the signal at this budget (Adam then takes steps of "
                "random sign), not a bias."
            )
    biased = [n for n, e in runs.items() if not e["unbiased"]]
    reached_biased = [n for n in biased if all(per_name[n][p] == "reached" for p in powers)]
    if reached_biased:
        out.append(
            "Biased estimators within "
            f"{100 * config.within:g} % of the optimum at every p: {', '.join(reached_biased)} "
            "(a bias that does not move the minimiser here)."
        )
    return out


def _mean_gap(entry: dict[str, Any], powers: list[str], key: str = "gap_mean") -> float:
    return sum(entry["powers"][p][key] for p in powers) / len(powers)


def _first(steps: list[int | None]) -> str:
    hit = [s for s in steps if s is not None]
    return "not reached" if not hit else str(max(hit))


def plot_curves(
    data: dict[str, Any], config: PolyConfig, out: Path, *, quick: bool = False
) -> str | None:
    """``poly_curves.png``: exact loss vs step per estimator (seed mean), one panel per p."""
    plt = pyplot()
    if plt is None:  # the bench extra is missing
        return None
    runs: dict[str, Any] = data["runs"]
    steps = data["steps"]
    fig, axes = plt.subplots(
        1, len(config.powers), figsize=(4.6 * len(config.powers) + 2.4, 4.4), squeeze=False,
        layout="constrained",
    )  # fmt: skip
    axes = list(axes[0])
    cmap = plt.get_cmap("tab20")
    for ax, power in zip(axes, config.powers, strict=True):
        key = str(power)
        best = data["optima"][key]
        for i, (name, entry) in enumerate(runs.items()):
            s = entry["powers"][key]
            if name == "closed-form":
                ax.plot(steps, s["mean"], color="black", linewidth=1.8, label=name)
                continue
            style = "-" if entry["unbiased"] else "--"
            ax.plot(steps, s["mean"], style, color=cmap(i % 20), linewidth=1.1, label=name)
        ax.axhline(best, color="grey", linestyle=":", linewidth=1.0)
        start = max(e["powers"][key]["mean"][0] for e in runs.values())
        ax.set_ylim(best - 0.05 * (start - best), start + 0.05 * (start - best))
        ax.set_title(f"p = {power:g} (optimum {best:.4g}, dotted)", fontsize=10)
        ax.set_xlabel("Adam step")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(f"exact loss, mean over {config.seeds} seeds")
    legend_outside(axes[-1], fontsize=7)
    fig.suptitle(
        quick_title(
            f"Polynomial programming, {config.variables} bits, Adam(lr={config.lr:g}), "
            f"{config.batch} f evaluations/step; dashed: biased estimators",
            quick,
            config,
        ),
        fontsize=10,
    )
    return save_figure(
        fig,
        out,
        "poly_curves.png",
        caption=f"exact loss along Adam per estimator, mean over {config.seeds} seeds (no "
        "error bands), one panel per p; dotted: the optimum.",
        table=": exact final loss",
    )
