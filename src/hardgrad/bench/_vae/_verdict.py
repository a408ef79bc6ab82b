"""The two VAE tasks' verdicts (``vae-categorical``, ``vae-bernoulli``): the test -ELBO's
winner and the estimators' gradient variance and bias (see :mod:`hardgrad.bench.verdict`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._claims import Z_BIAS, Verdict, _best, _share


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
