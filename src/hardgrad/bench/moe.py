r"""The ``moe`` benchmark: router-gradient quality in a toy mixture of experts.

Data: a synthetic mixture of regressions with a known expert assignment. Each of
``clusters = 8`` clusters has a centre :math:`c_z \in \mathbb{R}^8` and its own affine map;
a token is :math:`x = c_z + \sigma \epsilon` with a uniformly drawn cluster :math:`z`, and
its target :math:`t = A_z x + b_z + 0.05\,\eta`.

Model: :class:`hardgrad.nn.MoE` with 8 experts (8-16-4 MLPs), top-2, trained with Adam on the
mean squared error plus 0.01 times the Switch load-balancing loss. One run per router
gradient (Shazeer et al. 2017, https://arxiv.org/abs/1701.06538; see
:mod:`hardgrad.routing` for each estimator's paper):

* ``sparse``: the standard gradient through the selected gates;
* ``dense``: DenseMixer (Yao et al. 2025), the unselected experts evaluated in backward;
* ``default``: Default MoE (Panda et al. 2025): DenseMixer's gradient with EMA default
  outputs in place of the unselected experts (no extra expert evaluations);
* ``sparsemixer``: SparseMixer as in GRIN / PhiMoE (Liu et al. 2023 and 2024), with
  PhiMoE's sparsity threshold ``jitter_eps = 0.01``; ``sparsemixer_eps0.1`` with the 2023
  paper's 0.1 (more experts stay candidates, so the router gets a gradient more often);
* ``st_gumbel`` and ``reinmax``: stochastic Gumbel top-2 routing with straight-through
  Gumbel and ReinMax one-hots;
* ``rloo``: stochastic routing trained on the expected loss with the leave-one-out
  score-function estimator (2 samples; unbiased);
* ``exact``: the expected loss under stochastic routing, trained by enumerating the 28
  subsets (the reference optimiser; 28 times sparse's expert compute).

Measured per estimator:

* router-gradient **cosine**, **bias** and **std** (relative to the exact gradient's norm,
  :func:`hardgrad.diagnostics.compare`) on a fixed probe batch at several points of its own
  training run. The reference is the exact gradient, with respect to the router logits,
  of the expected loss under stochastic top-2 routing (Plackett-Luce on the router's
  softmax; all 28 subsets enumerated) at the current parameters. The deterministic
  estimators change the objective (the hard top-k) and are biased against it by design;
  the figure says how far their gradient is from the one the smoothed objective has;
* **routing accuracy**: the share of test tokens whose top-1 expert (eval mode,
  deterministic top-k) is the one matched to their true cluster, under the best one-to-one
  matching of experts to clusters;
* **test MSE** in eval mode (deterministic top-2);
* expert-MLP **FLOPs** per training step relative to ``sparse`` (forward 2(8·16 + 16·4)
  per expert evaluation, backward twice that where a gradient flows; DenseMixer's extra
  evaluations are forward-only), and measured **time** per step relative to ``sparse``
  (medians of a separate timing run that interleaves the estimators round by round in
  shuffled orders, so that the machine's load affects them alike).

The closing notes say whether DenseMixer's (and Default MoE's) gradients help here,
paired by seed against ``sparse`` (the runs of one seed share data, initialisation and
batches): a difference counts only where the mean per-seed difference exceeds twice its
standard error (so not with one seed).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from .. import nn as hgnn
from .. import routing
from ..diagnostics import compare
from ..diagnostics._compare import summarize
from ..diagnostics._routing import routing_exact_gradient
from ._pyplot import pyplot
from ._seeds import mean_std
from ._task import BenchSettings, Progress, Table, TaskResult, task

__all__ = ["ESTIMATORS", "MoEConfig", "default_config", "make_data", "run", "train_one"]

#: The router gradients, in table order.
ESTIMATORS = (
    "sparse",
    "dense",
    "default",
    "sparsemixer",
    "sparsemixer_eps0.1",
    "st_gumbel",
    "reinmax",
    "rloo",
    "exact",
)
#: How each name trains: the MoE layer's estimator (``None``: the layer routes sparsely and
#: the loss is hg.routing.expectation's with this name).
_LAYER: dict[str, Any] = {
    "sparse": "sparse",
    "dense": "dense",
    "default": "default",
    "sparsemixer": "sparsemixer",
    "sparsemixer_eps0.1": routing.SparseMixer(jitter_eps=0.1),
    "st_gumbel": "st_gumbel",
    "reinmax": "reinmax",
    "rloo": None,
    "exact": None,
}


@dataclass(frozen=True)
class MoEConfig:
    """Settings of the ``moe`` benchmark.

    Attributes:
        estimators: router gradients to train with (names from :data:`ESTIMATORS`).
        experts: E (also the number of true clusters).
        k: experts per token.
        features: input size; ``outputs``: target size; ``hidden``: experts' width.
        spread: the clusters' noise :math:`\\sigma` (centres have norm about 3).
        steps: Adam steps per run; ``batch_size``: tokens per step; ``lr``: Adam's rate.
        probes: points of each run (evenly spaced, the first at step 0) where the router
            gradient is compared with the exact one; ``probe_tokens`` tokens each,
            ``draws`` gradient draws per estimator.
        test_tokens: tokens of the test set.
        balance_weight: the load-balancing loss's weight.
        seeds: independent runs per estimator.
        plot: write ``moe.png`` (needs matplotlib).
        timing_rounds: rounds of the interleaved timing (each: 3 steps of every
            estimator, in a shuffled order); ``time ×sparse`` is the ratio of the medians.
        threads: intra-op threads while training.
    """

    estimators: tuple[str, ...] = ESTIMATORS
    experts: int = 8
    k: int = 2
    features: int = 8
    outputs: int = 4
    hidden: int = 16
    spread: float = 0.6
    steps: int = 1500
    batch_size: int = 128
    lr: float = 3e-3
    probes: int = 4
    probe_tokens: int = 32
    draws: int = 128
    test_tokens: int = 2048
    balance_weight: float = 0.01
    seeds: int = 5
    timing_rounds: int = 20
    plot: bool = True
    threads: int | None = 1


def default_config(quick: bool) -> MoEConfig:
    """The full setting (5 seeds, 1500 steps) or ``--quick`` (1 seed, 400 steps)."""
    if quick:
        return MoEConfig(steps=400, seeds=1, probes=3, draws=64, timing_rounds=8)
    return MoEConfig()


@dataclass
class Data:
    """The synthetic task: the clusters' parameters and a sampler."""

    centres: Tensor
    maps: Tensor
    offsets: Tensor
    spread: float

    def sample(self, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
        """``(x, t, z)``: tokens, targets and true clusters."""
        z = torch.randint(self.centres.shape[0], (n,), generator=generator)
        noise = torch.randn(n, self.centres.shape[1], generator=generator)
        x = self.centres[z] + self.spread * noise
        t = torch.einsum("nio,ni->no", self.maps[z], x) + self.offsets[z]
        t = t + 0.05 * torch.randn(t.shape, generator=generator)
        return x, t, z


def make_data(config: MoEConfig, seed: int) -> Data:
    """The clusters of one seed: centres of norm about 3, maps with unit-variance entries."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(config.experts, config.features, generator=g)
    centres = 3 * centres / centres.norm(dim=-1, keepdim=True)
    maps = torch.randn(config.experts, config.features, config.outputs, generator=g)
    maps = maps / math.sqrt(config.features)
    offsets = torch.randn(config.experts, config.outputs, generator=g)
    return Data(centres, maps, offsets, config.spread)


def _objective(model: hgnn.MoE, x: Tensor, t: Tensor) -> Any:
    """``f(gates, indices)``: per-token squared error of the mixture of the given slots."""

    def f(gates: Tensor, indices: Tensor) -> Tensor:
        y = (gates.unsqueeze(-1) * model.experts_at(x, indices)).sum(-2)
        return (y - t).square().mean(-1)

    return f


def _flops(name: str, config: MoEConfig) -> float:
    """Expert-MLP FLOPs per token and training step (forward 1, backward 2 units per
    evaluation with a gradient)."""
    per = 2 * (config.features * config.hidden + config.hidden * config.outputs)
    k, e = config.k, config.experts
    evaluations = {
        "dense": 3 * k + (e - k),  # the unselected experts: forward only, in backward
        "rloo": 3 * k * 2,  # two samples
        "exact": 3 * k * math.comb(e, k),  # every subset
    }.get(name, 3 * k)
    return float(per * evaluations)


def _matching_accuracy(top1: Tensor, z: Tensor, experts: int) -> float:
    """The share of tokens whose expert is matched to their cluster, under the best
    one-to-one matching of experts to clusters (exact, by dynamic programming over the
    subsets of clusters: ``O(E 2^E)``)."""
    counts = torch.zeros(experts, experts)
    counts.index_put_((top1, z), torch.ones(len(z)), accumulate=True)
    table = counts.tolist()
    best = [-1.0] * (1 << experts)
    best[0] = 0.0
    for mask in range(1 << experts):
        if best[mask] < 0:
            continue
        expert = bin(mask).count("1")  # experts 0 .. expert-1 are matched in `mask`
        if expert == experts:
            continue
        for cluster in range(experts):
            if not mask >> cluster & 1:
                value = best[mask] + table[expert][cluster]
                nxt = mask | 1 << cluster
                best[nxt] = max(best[nxt], value)
    return best[-1] / max(len(z), 1)


def train_one(name: str, data: Data, config: MoEConfig, seed: int) -> dict[str, Any]:
    """Train with one router gradient from ``seed``; probes, test metrics, time per step."""
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    model = _build(name, config, seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    probe_g = torch.Generator().manual_seed(10_000 + seed)
    x_probe, t_probe, _ = data.sample(config.probe_tokens, probe_g)
    x_test, t_test, z_test = data.sample(config.test_tokens, probe_g)
    probe_at = {round(i * config.steps / config.probes) for i in range(config.probes)}
    probes: list[dict[str, float]] = []
    seconds = 0.0
    sample_g = torch.Generator().manual_seed(20_000 + seed)
    for step in range(config.steps + 1):
        if step in probe_at:
            probes.append(_probe(name, model, x_probe, t_probe, config, sample_g))
        if step == config.steps:
            break
        x, t, _ = data.sample(config.batch_size, g)
        start = time.perf_counter()
        loss = _loss(name, model, x, t, config, sample_g)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        seconds += time.perf_counter() - start
    model.eval()
    with torch.no_grad():
        y, indices, _ = model(x_test)
    defined = [p["cosine"] for p in probes if not math.isnan(p["cosine"])]
    return {
        "probes": probes,
        # cosine is undefined where the estimator's mean gradient is exactly 0
        "cosine": statistics.fmean(defined) if defined else float("nan"),
        "zero_gradient_probes": sum(p["zero"] for p in probes),
        "bias": statistics.fmean(p["bias"] for p in probes),
        "std": statistics.fmean(p["std"] for p in probes),
        "accuracy": _matching_accuracy(indices[:, 0], z_test, config.experts),
        "test_mse": float((y - t_test).square().mean()),
        "ms_per_step": 1000 * seconds / max(config.steps, 1),
    }


def _loss(
    name: str, model: hgnn.MoE, x: Tensor, t: Tensor, config: MoEConfig, g: torch.Generator
) -> Tensor:
    if name in ("rloo", "exact"):
        logits = model.router(x)
        value = routing.expectation(
            _objective(model, x, t),
            logits,
            config.k,
            estimator=name,
            normalize=model.normalize or "renormalize",
            generator=g if name == "rloo" else None,
        )
        balance = routing.load_balancing_loss(logits, torch.topk(logits, config.k, -1).indices)
        return value.mean() + config.balance_weight * balance
    y, _, balance = model(x)
    return (y - t).square().mean() + config.balance_weight * balance


def _probe(
    name: str,
    model: hgnn.MoE,
    x: Tensor,
    t: Tensor,
    config: MoEConfig,
    g: torch.Generator,
) -> dict[str, float]:
    """The router gradient of ``name`` against the exact one at the current parameters."""
    with torch.no_grad():
        logits = model.router(x)
    frozen = _frozen(model)
    f = _objective(frozen, x, t)
    dist = routing.TopK(config.k, model.normalize or "renormalize")
    if name == "default":  # the layer's own backward (its EMA defaults are its state)
        exact = routing_exact_gradient(f, logits, dist)
        leaf = logits.clone().requires_grad_()
        model.train()
        y = _layer_output(model, x, leaf)
        (grad,) = torch.autograd.grad((y - t).square().mean(-1).sum(), leaf)
        row = summarize(torch.stack([grad, grad]), exact, name, 0.0)
    else:
        deterministic = name in ("sparse", "dense", "exact")
        result = compare(
            f,
            logits,
            estimators=[_LAYER[name] or name],
            dist=dist,
            num_draws=2 if deterministic else config.draws,
            generator=g,
        )
        row = result.rows[0]
    return {
        "zero": float(row.cosine is None),  # the mean gradient is exactly 0
        "cosine": float(row.cosine if row.cosine is not None else float("nan")),
        "bias": float(row.bias if row.bias is not None else float("nan")),
        "std": float(row.std if row.std is not None else float("nan")),
    }


def _layer_output(model: hgnn.MoE, x: Tensor, logits: Tensor) -> Tensor:
    """The layer's training forward from given router logits, without updating its state
    (for probing the Default-MoE gradient)."""
    gates, indices = model.route(logits)
    y = (gates.unsqueeze(-1) * model.experts_at(x, indices)).sum(-2)
    defaults = model.default_outputs.clone()
    return routing.dense_mixer(
        y,
        logits,
        indices,
        lambda tokens, experts: defaults[experts],
        normalize=model.normalize or "renormalize",
    )


def _frozen(model: hgnn.MoE) -> hgnn.MoE:
    """A copy of the experts without gradients (the probe differentiates the logits only)."""
    copy = hgnn.MoE(
        model.in_features,
        model.out_features,
        num_experts=model.num_experts,
        k=model.k,
        hidden_features=model.hidden_features,
    )
    names = ("w1", "b1", "w2", "b2", "router.weight")
    copy.load_state_dict({n: v for n, v in model.state_dict().items() if n in names})
    copy.requires_grad_(False)
    return copy


def _build(name: str, config: MoEConfig, seed: int) -> hgnn.MoE:
    layer = _LAYER[name] if _LAYER[name] is not None else "sparse"
    return hgnn.MoE(
        config.features,
        config.outputs,
        num_experts=config.experts,
        k=config.k,
        hidden_features=config.hidden,
        estimator=layer,
        generator=torch.Generator().manual_seed(seed + 1),
    )


def interleaved_times(config: MoEConfig, data: Data, seed: int) -> dict[str, float]:
    """Median milliseconds per training step of each estimator, timed round by round in a
    shuffled order (so that the machine's load affects every estimator alike)."""
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    models = {name: _build(name, config, seed) for name in config.estimators}
    optimizers = {n: torch.optim.Adam(m.parameters(), lr=config.lr) for n, m in models.items()}
    batches = [data.sample(config.batch_size, g)[:2] for _ in range(3)]
    times: dict[str, list[float]] = {name: [] for name in models}
    names = list(models)
    for r in range(config.timing_rounds + 1):
        order = [names[i] for i in torch.randperm(len(names), generator=g).tolist()]
        for name in order:
            start = time.perf_counter()
            for x, t in batches:
                loss = _loss(name, models[name], x, t, config, g)
                optimizers[name].zero_grad(set_to_none=True)
                loss.backward()
                optimizers[name].step()
            if r:  # round 0 warms up
                times[name].append(1000 * (time.perf_counter() - start) / len(batches))
    return {name: statistics.median(values) for name, values in times.items()}


def _fmt(stat: dict[str, float], digits: int = 3, scale: float = 1.0) -> str:
    mean, std = scale * stat["mean"], scale * stat["std"]
    if std > 0:
        return f"{mean:.{digits}f} ± {std:.{digits}f}"
    return f"{mean:.{digits}f}"


def _paired(rows: dict[str, dict[str, Any]], name: str, key: str) -> tuple[float, float] | None:
    """Mean and standard error of the per-seed differences ``name - sparse`` in ``key``."""
    diffs = [
        float(a[key]) - float(b[key])
        for a, b in zip(rows[name]["runs"], rows["sparse"]["runs"], strict=True)
        if not (math.isnan(float(a[key])) or math.isnan(float(b[key])))
    ]
    if len(diffs) < 2:
        return None
    return statistics.fmean(diffs), statistics.stdev(diffs) / math.sqrt(len(diffs))


def _paired_table(rows: dict[str, dict[str, Any]], config: MoEConfig) -> Table:
    table = Table(
        f"Paired by seed against sparse ({config.seeds} seeds share data, initialisation and "
        "batches): mean per-seed difference ± its standard error; * where beyond 2 SE",
        ["estimator", "Δ test MSE", "Δ routing acc", "Δ grad cosine"],
    )
    for name in rows:
        if name == "sparse":
            continue
        cells = [name]
        for key, digits in (("test_mse", 4), ("accuracy", 3), ("cosine", 3)):
            pair = _paired(rows, name, key)
            if pair is None:
                cells.append("-")
            else:
                mean, se = pair
                star = " *" if abs(mean) > 2 * se else ""
                cells.append(f"{mean:+.{digits}f} ± {se:.{digits}f}{star}")
        table.rows.append(cells)
    return table


def _verdict(rows: dict[str, dict[str, Any]], config: MoEConfig, other: str = "dense") -> str:
    """``other`` against ``sparse``, paired by seed (both runs of a seed share its data,
    initialisation and batches): a difference counts where the mean of the per-seed
    differences exceeds twice their standard error."""
    label_of = {"dense": "DenseMixer (dense)", "default": "Default MoE (default)"}
    if other not in rows or "sparse" not in rows:
        return f"{label_of.get(other, other)} vs sparse: not both run."
    parts = []
    for key, label, better in (
        ("test_mse", "test MSE", -1),
        ("accuracy", "routing accuracy", 1),
        ("cosine", "router-gradient cosine", 1),
    ):
        pairs = [
            (float(a[key]), float(b[key]))
            for a, b in zip(rows[other]["runs"], rows["sparse"]["runs"], strict=True)
            if not (math.isnan(float(a[key])) or math.isnan(float(b[key])))
        ]
        if not pairs:
            continue
        diffs = [a - b for a, b in pairs]
        mean_a = statistics.fmean(a for a, _ in pairs)
        mean_b = statistics.fmean(b for _, b in pairs)
        head = f"{label} {mean_a:.3f} vs {mean_b:.3f}"
        if len(diffs) < 2:
            parts.append(f"{head} (one seed: unresolved)")
            continue
        mean = statistics.fmean(diffs)
        se = statistics.stdev(diffs) / math.sqrt(len(diffs))
        if abs(mean) <= 2 * se:
            parts.append(f"{head}: no resolved difference (paired, |mean diff| <= 2 SE)")
        else:
            word = "better" if mean * better > 0 else "worse"
            parts.append(f"{head}: {word} (paired diff {mean:+.3f} ± {se:.3f} SE)")
    return (
        f"{label_of.get(other, other)} vs sparse, {len(rows['sparse']['runs'])} seed(s): "
        + "; ".join(parts)
        + "."
    )


def _plot(rows: dict[str, dict[str, Any]], config: MoEConfig, out: Any) -> str | None:
    """Bars with seed spreads: router-gradient cosine, routing accuracy, test MSE."""
    plt = pyplot()
    if plt is None:  # the bench extra is missing
        return None
    out.mkdir(parents=True, exist_ok=True)
    names = list(rows)
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    for ax, key, label in (
        (axes[0], "cosine", "router-gradient cosine to exact"),
        (axes[1], "accuracy", "routing accuracy"),
        (axes[2], "test_mse", "test MSE"),
    ):
        means = [rows[n][key]["mean"] for n in names]
        stds = [rows[n][key]["std"] for n in names]
        ax.bar(names, means, yerr=stds, capsize=3, color="C0")
        ax.set_title(label, fontsize=9)
        ax.tick_params(axis="x", labelsize=7, rotation=45)
    fig.suptitle(
        f"toy MoE, {config.experts} experts, top-{config.k}, {config.seeds} seed(s)", fontsize=9
    )
    fig.tight_layout()
    name = "moe.png"
    fig.savefig(out / name, dpi=110)
    plt.close(fig)
    return name


@task(
    "moe",
    "toy MoE (8 experts, top-2): router-gradient bias vs the exact gradient, routing accuracy, cost",
    default_config,
)
def run(settings: BenchSettings, config: MoEConfig, progress: Progress) -> TaskResult:
    """Train the MoE with every router gradient from ``config.seeds`` seeds; report."""
    t_start = time.perf_counter()
    if config.seeds < 1 or config.steps < 1 or config.probes < 1:
        raise ValueError(
            "Expected `seeds`, `steps` and `probes` >= 1, but found "
            f"{config.seeds}, {config.steps} and {config.probes}"
        )
    for name in config.estimators:
        if name not in ESTIMATORS:
            raise ValueError(
                f"Unknown estimator {name!r} in `estimators`; available: {', '.join(ESTIMATORS)}"
            )
    progress.start("moe", len(config.estimators) * config.seeds)
    threads = torch.get_num_threads()
    if config.threads is not None:
        torch.set_num_threads(max(1, config.threads))
    rows: dict[str, dict[str, Any]] = {}
    try:
        for name in config.estimators:
            runs = []
            for s in range(config.seeds):
                seed = settings.seed * 1000 + s
                progress.advance(f"{name}, seed {s + 1}/{config.seeds}", steps=0)
                runs.append(train_one(name, make_data(config, seed), config, seed))
                progress.advance()
            row: dict[str, Any] = {"estimator": name, "runs": runs}
            for key in ("cosine", "bias", "std", "accuracy", "test_mse", "ms_per_step"):
                values = [float(r[key]) for r in runs if not math.isnan(float(r[key]))]
                row[key] = mean_std(values) if values else {"mean": math.nan, "std": 0.0}
            row["zero_gradient_probes"] = sum(r["zero_gradient_probes"] for r in runs)
            row["flops"] = _flops(name, config)
            rows[name] = row
            progress.log(
                f"{name}: cosine {row['cosine']['mean']:.3f}, accuracy "
                f"{row['accuracy']['mean']:.3f}, test MSE {row['test_mse']['mean']:.4f}"
            )
        progress.advance("interleaved timing", steps=0)
        timing_ms = interleaved_times(config, make_data(config, settings.seed), settings.seed)
        for name, ms in timing_ms.items():
            rows[name]["timed_ms_per_step"] = ms
    finally:
        torch.set_num_threads(threads)
    progress.finish()
    base = rows.get("sparse")
    table = Table(
        f"Toy MoE ({config.experts} experts, top-{config.k}), {config.steps} Adam steps, "
        f"mean ± std over {config.seeds} seed(s); router-gradient figures against the exact "
        f"gradient of the expected loss under stochastic top-{config.k} routing",
        [
            "estimator",
            "grad cosine",
            "grad bias",
            "grad std",
            "routing acc",
            "test MSE",
            "FLOPs ×sparse",
            "time ×sparse",
        ],
    )
    for name, row in rows.items():
        flops = row["flops"] / base["flops"] if base else float("nan")
        timing = row["timed_ms_per_step"] / base["timed_ms_per_step"] if base else float("nan")
        table.rows.append(
            [
                name,
                _fmt(row["cosine"]),
                _fmt(row["bias"]),
                _fmt(row["std"]),
                _fmt(row["accuracy"]),
                _fmt(row["test_mse"], 4),
                f"{flops:.2f}",
                f"{timing:.2f}",
            ]
        )
    table.notes.append(
        "grad bias and std are relative to the exact gradient's norm; deterministic estimators "
        "(sparse, dense, default) have std 0; the figures are means over the probes of each "
        "run. time ×sparse: medians of an interleaved timing run (3 steps per estimator and "
        f"round, {config.timing_rounds} rounds in shuffled orders); FLOPs: expert MLPs only."
    )
    notes = [_verdict(rows, config, "dense"), _verdict(rows, config, "default")]
    for name, row in rows.items():
        if row["zero_gradient_probes"]:
            total = config.probes * config.seeds
            notes.append(
                f"{name}: the router gradient was exactly 0 at {int(row['zero_gradient_probes'])} of "
                f"{total} probes (cosine over the others)"
                + (
                    ": SparseMixer's sparsity mask (jitter_eps = 0.01) leaves a single "
                    "candidate expert per slot unless logits are within 2 % of the largest, "
                    "and then pi_D (e_D - pi) = 0."
                    if name == "sparsemixer"
                    else "."
                )
            )
    result = TaskResult(
        name="moe",
        summary=f"toy MoE, {len(rows)} router gradients at {config.steps} steps, "
        f"{config.seeds} seed(s)",
        settings=dataclasses.asdict(config),
        data={"rows": list(rows.values())},
        wall_s=time.perf_counter() - t_start,
    )
    figures: list[str] = []
    if settings.out is not None and config.plot:
        figure = _plot(rows, config, settings.out)
        if figure is not None:
            figures.append(figure)
    result.figures = figures
    result.tables = [table]
    if "sparse" in rows and config.seeds > 1:
        result.tables.append(_paired_table(rows, config))
    result.notes = notes
    return result
