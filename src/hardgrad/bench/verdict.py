"""The verdict of a ``hardgrad bench`` run: per task, what was compared, the winner, and
which published claims held.

Every verdict is derived from a task's results (``TaskResult.data``, the ``results`` of
``results.json``), never written by hand: :data:`DERIVERS` maps a task's name to a
function ``derive(data, settings) -> Verdict``. A claim is ``"held"``, ``"not held"`` or
``"unresolved"`` (this run cannot tell: the noise, or too few seeds). :func:`verdict_lines`
turns the verdicts into the 10--20 lines printed at the end of ``hardgrad bench`` and put at
the top of ``report.md``.

The claims are those of DESIGN.md's targets: the Bernoulli toy's closed forms within 5 %;
DisARM below ARM and RLOO in variance at equal evaluations (Dong et al. 2020); Gumbel-Rao
below ST-Gumbel in variance with the same mean (Paulus et al. 2021); ReinMax unbiased on
quadratics at tau = 1 (Liu et al. 2023); the polynomial optima 0.301869, 0.2025, 0.091125
(Liu et al. 2023); every hard op and sampler at most 1.0x the fastest hand-written
alternative.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DERIVERS", "Claim", "Verdict", "derive", "verdict_lines", "verdicts_of"]

HELD, NOT_HELD, UNRESOLVED = "held", "not held", "unresolved"
STATUSES = (HELD, NOT_HELD, UNRESOLVED)

#: A bias is detected when the mean is this many standard errors from the exact value.
Z_BIAS = 4.0
#: The polynomial programming optima the ReinMax paper reports (p = 1.5, 2, 3).
PUBLISHED_POLY_OPTIMA = {"1.5": 0.301869, "2.0": 0.2025, "3.0": 0.091125}


@dataclass
class Claim:
    """A published claim and what this run says of it.

    Attributes:
        text: the claim, short (``"DisARM var < ARM, RLOO"``).
        status: ``"held"``, ``"not held"`` or ``"unresolved"``.
        detail: the evidence, short (``"12/12 settings"``).
    """

    text: str
    status: str
    detail: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(
                f"Claim status must be one of {', '.join(STATUSES)}, but found {self.status!r}"
            )


@dataclass
class Verdict:
    """One task's verdict: what was compared, the winner, the claims."""

    task: str
    compared: str
    winner: str
    claims: list[Claim] = field(default_factory=list)


def _share(held: int, total: int, text: str, detail: str = "") -> Claim:
    """``held`` of ``total`` comparisons went the claimed way: held when all did, not held
    when at most half did, unresolved in between (or when there was nothing to compare)."""
    counted = f"{held}/{total}" + (f" {detail}" if detail else "")
    if total == 0:
        return Claim(text, UNRESOLVED, "nothing to compare")
    if held == total:
        return Claim(text, HELD, counted)
    if 2 * held <= total:
        return Claim(text, NOT_HELD, counted)
    return Claim(text, UNRESOLVED, counted)


def _best(scores: Mapping[str, float], lower: bool = True) -> tuple[str, float] | None:
    finite = {k: v for k, v in scores.items() if isinstance(v, (int, float)) and math.isfinite(v)}
    if not finite:
        return None
    key = (min if lower else max)(finite, key=finite.__getitem__)
    return key, finite[key]


# --------------------------------------------------------------------------- estimators


def _toy(data: Mapping[str, Any], settings: Mapping[str, Any]) -> Verdict:
    rows = data["rows"]
    names = list(dict.fromkeys(r["estimator"] for r in rows))
    checks = [c for r in rows for c in (r.get("mean_check"), r.get("var_check")) if c]
    counts = {s: sum(c["status"] == s for c in checks) for s in ("ok", "unresolved", "FAIL")}
    status = NOT_HELD if counts["FAIL"] else (HELD if counts["ok"] else UNRESOLVED)
    claims = [
        Claim(
            "closed forms within 5 %",
            status,
            f"{counts['ok']}/{len(checks)} ok, {counts['unresolved']} unresolved, "
            f"{counts['FAIL']} failed",
        )
    ]

    def row(name: str, t: float, phi: float) -> Mapping[str, Any] | None:
        return next(
            (r for r in rows if r["estimator"] == name and r["t"] == t and r["phi"] == phi), None
        )

    settings_seen = sorted({(r["t"], r["phi"]) for r in rows})
    held = total = 0
    for t, phi in settings_seen:
        d = row("disarm", t, phi)
        for other in ("arm", "rloo"):
            o = row(other, t, phi)
            if d is None or o is None or o["evaluations"] != d["evaluations"]:
                continue
            total += 1
            held += d["var"] <= o["var"]
    claims.append(_share(held, total, "DisARM var <= ARM, RLOO (Dong 2020)"))
    held = total = 0
    for t, phi in settings_seen:
        a, b = row("gumbel_rao", t, phi), row("st_gumbel", t, phi)
        if a is None or b is None:
            continue
        total += 1
        z = (a["mean"] - b["mean"]) / (math.hypot(a["se_mean"], b["se_mean"]) or 1.0)
        held += a["var"] < b["var"] and abs(z) <= Z_BIAS
    claims.append(_share(held, total, "Gumbel-Rao var < ST-Gumbel, same mean (Paulus 2021)"))
    reinmax = [r for r in rows if r["estimator"] == "reinmax"]
    if reinmax:
        worst = max(abs(r["z"]) for r in reinmax)
        claims.append(
            Claim(
                "ReinMax unbiased on the quadratic at tau=1 (Liu 2023)",
                HELD if worst <= Z_BIAS else NOT_HELD,
                f"max |z| {worst:.2f}",
            )
        )
    curves = (data.get("curves") or {}).get("estimators", {})
    best = _best({k: v["final_mean"] for k, v in curves.items() if k != "exact"})
    winner = f"{best[0]} (final p {best[1]:.3f}, optimum 0)" if best else "n/a"
    return Verdict("toy", f"{len(names)} estimators vs closed forms", winner, claims)


def _poly(data: Mapping[str, Any], settings: Mapping[str, Any]) -> Verdict:
    from .poly._report import verdict as poly_verdict

    runs = data["runs"]
    within = float(settings.get("within", 0.01))
    optima = data["optima"]
    matches = [
        abs(float(optima[p]) - v) <= 5e-7 for p, v in PUBLISHED_POLY_OPTIMA.items() if p in optima
    ]
    claims = [_share(sum(matches), len(matches), "optima 0.301869, 0.2025, 0.091125 (Liu 2023)")]
    estimators = {k: v for k, v in runs.items() if k != "closed-form"}
    gaps = {
        k: sum(s["gap_mean"] for s in v["powers"].values()) / len(v["powers"])
        for k, v in estimators.items()
    }
    if "reinmax" in runs:
        states = [poly_verdict(s, within) for s in runs["reinmax"]["powers"].values()]
        near = sum(s in ("reached", "approaching") for s in states)
        claims.append(
            _share(near, len(states), "ReinMax approaches the optimum (Liu 2023)", "powers")
        )
    best = _best(gaps)
    winner = f"{best[0]} (mean gap {100 * best[1]:.1f} %)" if best else "n/a"
    return Verdict("poly", f"{len(estimators)} estimators, exact loss vs optimum", winner, claims)


def _elbo_winner(runs: Mapping[str, Any]) -> str:
    best = _best({k: v["test_neg_elbo"] for k, v in runs.items()})
    return f"{best[0]} (test -ELBO {best[1]:.2f})" if best else "n/a"


def _var_below(
    shared: Mapping[str, Any], low: str, high: str, *, same_mean: bool = False
) -> tuple[int, int]:
    """Checkpoints at which ``low``'s gradient variance is below ``high``'s (and, with
    ``same_mean``, their bias to the exact gradient within noise of each other)."""
    held = total = 0
    for entry in shared.values():
        a, b = entry.get(low), entry.get(high)
        if a is None or b is None:
            continue
        total += 1
        ok = a["var"] < b["var"]
        if same_mean and a.get("bias") is not None and b.get("bias") is not None:
            ok = ok and abs(a["bias"] - b["bias"]) <= Z_BIAS * max(a["bias_floor"], b["bias_floor"])
        held += ok
    return held, total


def _vae_categorical(data: Mapping[str, Any], settings: Mapping[str, Any]) -> Verdict:
    configs = data["configurations"]
    winners, claims = [], []
    gr = [0, 0]
    unbiased = [0, 0]
    for label, entry in configs.items():
        winners.append(f"{label}: {_elbo_winner(entry['runs'])}")
        held, total = _var_below(entry["shared"], "gumbel_rao", "st_gumbel", same_mean=True)
        gr[0], gr[1] = gr[0] + held, gr[1] + total
        for name, run in entry["runs"].items():
            if not run.get("unbiased"):
                continue
            for point in entry["shared"].values():
                s = point.get(name)
                if s is None or s.get("bias") is None:
                    continue
                unbiased[1] += 1
                unbiased[0] += s["bias"] <= Z_BIAS * s["bias_floor"]
    claims.append(
        _share(gr[0], gr[1], "Gumbel-Rao var < ST-Gumbel, same mean (Paulus 2021)", "points")
    )
    claims.append(_share(unbiased[0], unbiased[1], "unbiased ones show no bias", "points"))
    n = len(next(iter(configs.values()))["runs"]) if configs else 0
    return Verdict(
        "vae-categorical",
        f"{n} estimators, test -ELBO and bias to the exact gradient",
        "; ".join(winners) or "n/a",
        claims,
    )


def _vae_bernoulli(data: Mapping[str, Any], settings: Mapping[str, Any]) -> Verdict:
    shared = data.get("shared", {})
    claims = []
    for other in ("arm", "rloo"):
        held, total = _var_below(shared, "disarm", other)
        claims.append(_share(held, total, f"DisARM var < {other.upper()} (Dong 2020)", "points"))
    held, total = _var_below(shared, "gumbel_rao", "st_gumbel")
    claims.append(_share(held, total, "Gumbel-Rao var < ST-Gumbel (Paulus 2021)", "points"))
    runs = data["runs"]
    return Verdict(
        "vae-bernoulli",
        f"{len(runs)} estimators, test -ELBO and gradient variance",
        _elbo_winner(runs),
        claims,
    )


def _qat(data: Mapping[str, Any], settings: Mapping[str, Any]) -> Verdict:
    rows = {r["label"]: r for r in data["rows"]}
    acc = {k: r["test_accuracy"]["mean"] for k, r in rows.items() if k != "float"}
    claims = []
    for bits in sorted({r["bits"] for r in rows.values() if r["bits"]}):
        ste, lsq = rows.get(f"STE {bits}-bit"), rows.get(f"LSQ {bits}-bit")
        if ste is None or lsq is None:
            continue
        a, b = lsq["test_accuracy"], ste["test_accuracy"]
        diff = a["mean"] - b["mean"]
        n = min(len(a["values"]), len(b["values"]))
        noise = math.hypot(a["std"], b["std"]) / math.sqrt(n) if n > 1 else float("nan")
        text = f"LSQ >= STE at {bits} bits (Esser 2020)"
        detail = f"{100 * diff:+.1f} pp, {n} seed{'s' if n != 1 else ''}"
        if math.isnan(noise) or abs(diff) <= 2 * noise:  # within the noise: not resolved
            status = UNRESOLVED
        else:
            status = HELD if diff > 0 else NOT_HELD
        claims.append(Claim(text, status, detail))
    best = _best(acc, lower=False)
    floating = rows.get("float")
    winner = f"{best[0]} ({100 * best[1]:.1f} %" if best else "n/a"
    if best and floating:
        winner += f"; float {100 * floating['test_accuracy']['mean']:.1f} %)"
    elif best:
        winner += ")"
    return Verdict("qat", f"float vs {len(acc)} quantized MLPs, test accuracy", winner, claims)


# --------------------------------------------------------------------------- speed


def _ratio_claim(text: str, summaries: Mapping[str, Mapping[str, Any] | None]) -> Claim:
    """``ratio <= 1`` over the comparisons: held when every resolved one is faster and none
    is unresolved; not held (naming the slower) when one is slower; else unresolved."""
    slower: list[str] = []
    unresolved: list[str] = []
    faster: list[str] = []
    for name, s in summaries.items():
        if not s:
            continue
        verdict = s.get("verdict")
        if verdict is None:  # results without intervals: the point estimate
            ratio = s.get("ratio", float("nan"))
            verdict = "n/a" if ratio != ratio else ("faster" if ratio <= 1.0 else "slower")
        {"faster": faster, "slower": slower}.get(verdict, unresolved).append(name)
    total = len(faster) + len(slower) + len(unresolved)
    detail = f"{len(faster)}/{total} faster"
    if slower:
        detail += f", slower: {', '.join(slower[:4])}" + (" ..." if len(slower) > 4 else "")
    if unresolved:
        detail += f", {len(unresolved)} unresolved (noise)"
    if total == 0:
        return Claim(text, UNRESOLVED, "nothing timed")
    if slower:
        return Claim(text, NOT_HELD, detail)
    return Claim(text, HELD if not unresolved else UNRESOLVED, detail)


def _speed(data: Mapping[str, Any], settings: Mapping[str, Any]) -> Verdict:
    ops = data.get("ops") or {}
    claims = [
        _ratio_claim("ops <= 1.0x hand-written (eager)", {n: o["eager"] for n, o in ops.items()})
    ]
    compiled = {n: o["compiled"] for n, o in ops.items() if o.get("compiled")}
    if compiled:
        claims.append(_ratio_claim("ops <= 1.0x hand-written (compiled)", compiled))
    samplers = data.get("samplers") or {}
    rows = {
        f"{kind}/{name}": s
        for kind, entry in samplers.items()
        if isinstance(entry, Mapping) and isinstance(entry.get("eager"), Mapping)
        for name, s in entry["eager"].get("rows", {}).items()
        # an estimator timed against a common reference (Gumbel-Rao's k draws against
        # one) is not the claim, which holds samplers to the same semantics
        if s.get("compared_with", "same semantics") == "same semantics"
    }
    if rows:
        claims.append(_ratio_claim("samplers <= 1.0x torch, same semantics (eager)", rows))
    eager = [o["eager"] for o in ops.values() if o.get("eager")]
    faster = sum(s.get("verdict", "") == "faster" for s in eager)
    winner = f"hardgrad faster in {faster}/{len(eager)} ops (eager)" if eager else "n/a"
    return Verdict("speed", "hardgrad vs the fastest hand-written op, fwd+bwd time", winner, claims)


# --------------------------------------------------------------------------- the others


def _mean(value: Any) -> float:
    """A figure that is either a number or a ``{"mean": ...}`` summary over seeds."""
    return float(value["mean"] if isinstance(value, Mapping) else value)


def _rows_best(rows: Sequence[Mapping[str, Any]], label: str, key: str, lower: bool) -> str:
    best = _best({str(r[label]): _mean(r[key]) for r in rows}, lower=lower)
    return f"{best[0]} ({key.replace('_', ' ')} {best[1]:.3g})" if best else "n/a"


def _vq(data: Mapping[str, Any], settings: Mapping[str, Any]) -> Verdict:
    rows = data["rows"]
    by = {r["variant"]: r for r in rows}
    seeds = int(settings.get("seeds", 1))
    claims = []
    if "STE" in by and "rotation" in by:
        a, b = by["rotation"], by["STE"]
        better = [
            a["recon_mse"]["mean"] < b["recon_mse"]["mean"],
            a["usage"]["mean"] > b["usage"]["mean"],
        ]
        resolved = [
            seeds >= 2 and abs(a[k]["mean"] - b[k]["mean"]) > 2 * max(a[k]["std"], b[k]["std"])
            for k in ("recon_mse", "usage")
        ]
        if all(better) and all(resolved):
            status = HELD
        elif any(r and not g for g, r in zip(better, resolved, strict=True)):
            status = NOT_HELD
        else:
            status = UNRESOLVED
        detail = (
            f"MSE {'lower' if better[0] else 'higher'}, usage {'higher' if better[1] else 'lower'}"
            f", {seeds} seed{'s' if seeds != 1 else ''}"
        )
        claims.append(Claim("rotation trick beats STE (Fifty 2024)", status, detail))
    if "FSQ" in by:
        usage = by["FSQ"]["usage"]["mean"]
        claims.append(
            Claim(
                "FSQ uses >= 90 % of codes (Mentzer 2023)",
                HELD if usage >= 0.9 else NOT_HELD,
                f"{100 * usage:.0f} %",
            )
        )
    from .vq._verdict import residual_claims  # the residual rows' (plain triples)

    claims += [Claim(*claim) for claim in residual_claims(data, settings)]
    return Verdict(
        "vq",
        f"{len(rows)} VQ bottlenecks, test reconstruction",
        _rows_best(rows, "variant", "recon_mse", True),
        claims,
    )


def _models(data: Mapping[str, Any], settings: Mapping[str, Any]) -> Verdict:
    from ._timing import ratio_verdict

    models = data["models"]
    summaries = {
        name: {"ratio": m["ratio"], "verdict": ratio_verdict(m.get("round_ratios") or [])}
        for name, m in models.items()
    }
    claim = _ratio_claim("training step <= 1.0x hand-written", summaries)
    faster = sum(s["verdict"] == "faster" for s in summaries.values())
    return Verdict(
        "models",
        f"{len(models)} hand-written models vs the same with hardgrad, step time",
        f"hardgrad faster in {faster}/{len(models)}",
        [claim],
    )


def _moe(data: Mapping[str, Any], settings: Mapping[str, Any]) -> Verdict:
    rows = [r for r in data["rows"] if r["estimator"] != "exact"]
    claims = []
    caps = [r for r in rows if r["estimator"] in ("sparse_c1.0", "sparse_c1.25")]
    if caps and all("dropped_train" in r for r in caps):  # (runs before the capacity rows)
        low = sum(_mean(r["dropped_train"]) < 0.01 for r in caps)
        detail = ", ".join(
            f"c {r['estimator'][8:]}: {100 * _mean(r['dropped_train']):.1f} % train, "
            f"{100 * _mean(r['dropped_test']):.1f} % test" for r in caps
        )  # fmt: skip
        text = "capacity 1.0-1.25 keeps drops < 1 % with the load loss (Switch, Fedus 2021)"
        claims.append(_share(low, len(caps), text, f"dropped {detail}"))
    return Verdict(
        "moe",
        f"{len(rows)} router gradients and layer options, cosine to the exact one",
        _rows_best(rows, "estimator", "cosine", False),
        claims,
    )


def _l0(data: Mapping[str, Any], settings: Mapping[str, Any]) -> Verdict:
    rows = data["rows"]
    best_accuracy = max(_mean(r["accuracy"]) for r in rows)
    kept = [r for r in rows if _mean(r["accuracy"]) >= best_accuracy - 0.01]
    sparsest = max(kept, key=lambda r: _mean(r["weight_sparsity"]))
    grows = all(
        _mean(a["weight_sparsity"]) <= _mean(b["weight_sparsity"]) + 1e-9
        for a, b in itertools.pairwise(rows)
    )
    return Verdict(
        "l0",
        f"{len(rows)} penalty weights, accuracy vs weights removed",
        f"lambda {sparsest['lambda']:g} ({100 * _mean(sparsest['weight_sparsity']):.0f} % removed, "
        f"accuracy within 1 pp of the best)",
        [Claim("sparsity grows with lambda", HELD if grows else NOT_HELD)],
    )


def _policy(data: Mapping[str, Any], settings: Mapping[str, Any]) -> Verdict:
    rows = data["rows"]

    def tilts(name: str) -> list[tuple[int, float, float]]:
        out = []
        for r in rows:
            if r["estimator"] == name and r["cosine"] is not None and r["cosine_se"]:
                gap = 1 - r["cosine"] - r["cosine_noise"]
                out.append((r["group_size"], gap, gap / r["cosine_se"]))
        return out

    def measured(name: str, text: str) -> Claim:
        found = tilts(name)
        seen = sum(z > Z_BIAS for _, _, z in found)
        worst = max(found, key=lambda t: t[1], default=None)
        detail = f"1 - cos up to {worst[1]:.4f} at n = {worst[0]}" if worst else ""
        return _share(seen, len(found), text, detail)

    grpo = {n: gap for n, gap, _ in tilts("grpo")}
    removed = [(n, gap, z) for name in ("dr-grpo", "rloo") for n, gap, z in tilts(name)]
    unbiased = sum(z <= Z_BIAS for _, _, z in removed)
    worst = max((gap for _, gap, _ in removed), default=0.0)
    claims = [
        measured("grpo-token-sum", "GRPO's std scaling tilts the direction"),
        measured("grpo-no-std", "GRPO's length normalisation tilts the direction"),
        measured("grpo", "GRPO (both) tilts the direction"),
        _share(unbiased, len(removed), "Dr. GRPO and RLOO remove the tilt",
               f"1 - cos at most {worst:.4f} vs GRPO's up to {max(grpo.values(), default=0):.4f}"),
    ]  # fmt: skip
    best = _best(  # the highest E[R] at the fixed training step (the first optimizer's)
        {f"{r['estimator']} n={r['group_size']}": next(iter(r["training"].values()))
         ["reward_at"]["mean"] for r in rows if r.get("training")},
        lower=False,
    )  # fmt: skip
    return Verdict(
        "policy",
        f"{len({r['estimator'] for r in rows})} sequence estimators x "
        f"{len({r['group_size'] for r in rows})} group sizes, direction against the exact gradient",
        f"{best[0]} (E[R] {best[1]:.3f} after {settings.get('eval_step', '?')} "
        f"{next(iter(settings.get('optimizers') or ['?']))} steps)"
        if best
        else "-",
        claims,
    )


def _rows_task(
    task: str, compared: str, label: str, key: str, lower: bool
) -> Callable[..., Verdict]:
    def derive_rows(data: Mapping[str, Any], settings: Mapping[str, Any]) -> Verdict:
        rows = data["rows"]
        return Verdict(task, compared.format(n=len(rows)), _rows_best(rows, label, key, lower))

    return derive_rows


#: Task name -> ``derive(data, settings) -> Verdict``.
DERIVERS: dict[str, Callable[[Mapping[str, Any], Mapping[str, Any]], Verdict]] = {
    "toy": _toy,
    "poly": _poly,
    "vae-categorical": _vae_categorical,
    "vae-bernoulli": _vae_bernoulli,
    "qat": _qat,
    "speed": _speed,
    "vq": _vq,
    "models": _models,
    "moe": _moe,
    "shortest-path": _rows_task(
        "shortest-path", "{n} methods, test regret", "method", "regret", lower=True
    ),
    "l0": _l0,
    "ranking": _rows_task(
        "ranking", "{n} methods, Spearman's rho", "method", "spearman", lower=False
    ),
    "snn": _rows_task(
        "snn", "{n} spike surrogates, test accuracy", "label", "test_accuracy", lower=False
    ),
    "policy": _policy,
}


def derive(
    name: str, summary: str, data: Mapping[str, Any], settings: Mapping[str, Any]
) -> Verdict:
    """The verdict of task ``name`` from its results ``data`` and config ``settings``.

    A task without a deriver, or whose results lack what its deriver reads, gets a verdict
    that says so (the run's other verdicts are still given)."""
    deriver = DERIVERS.get(name)
    if deriver is None:
        return Verdict(name, summary, "see its tables (no claims checked)")
    try:
        return deriver(data, settings)
    except (KeyError, TypeError, ValueError, ZeroDivisionError, StopIteration) as error:
        return Verdict(name, summary, f"no verdict: results lack {error!r}")


def verdicts_of(results: Sequence[Any]) -> list[Verdict]:
    """The verdict of every :class:`~hardgrad.bench.TaskResult` in ``results``."""
    return [derive(r.name, r.summary, r.data, r.settings) for r in results]


def verdict_lines(verdicts: Sequence[Verdict], *, quick: bool) -> list[str]:
    """The verdict block: a heading, the count of claims per status, then per task what
    was compared, the winner and each claim, and a closing line (13 tasks: 17 lines)."""
    counts = {s: sum(c.status == s for v in verdicts for c in v.claims) for s in STATUSES}
    setting = "quick run, reduced settings; drop --quick for the full ones" if quick else "full run"
    lines = [
        f"Verdict: {setting}",
        f"Published claims: {counts[HELD]} held, {counts[NOT_HELD]} not held, "
        f"{counts[UNRESOLVED]} unresolved (noise, or too few seeds).",
    ]
    for v in verdicts:
        line = f"- {v.task}: {v.compared}; best: {v.winner}"
        if v.claims:
            line += ". " + "; ".join(
                f"{c.text}: {c.status.upper() if c.status == NOT_HELD else c.status}"
                + (f" ({c.detail})" if c.detail else "")
                for c in v.claims
            )
        lines.append(line + ".")
    lines.append(
        "Each task's tables and figures: in report.md (and above on stdout); every number: in results.json."
    )
    return lines
