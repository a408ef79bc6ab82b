"""How the ``moe`` benchmark trains: the teacher data, one run per estimator and seed, the
gradient probes, and the interleaved timings."""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ... import nn as hgnn
from ... import routing
from ...diagnostics import compare
from ...diagnostics._compare import summarize
from ...diagnostics._routing import routing_exact_gradient
from ...nn._moe_aux import capacity_keep
from ...routing._noisy import _noisy_logits
from ._config import _LAYER, OPTIONS, MoEConfig


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
    dropped: list[float] = []  # per step
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
        dropped.append(float(model.dropped_fraction))  # 0 without a capacity
    model.eval()
    with torch.no_grad():
        y, indices, _ = model(x_test)
    tail = dropped[len(dropped) - max(1, len(dropped) // 4) :]
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
        # the share of (token, expert) assignments dropped: mean over the last quarter of
        # the training steps, and in the eval forward of the test set (0 without a capacity)
        "dropped_train": statistics.fmean(tail),
        "dropped_test": float(model.dropped_fraction),
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
    if model.noisy_gating:  # Shazeer et al.'s losses in place of Switch's
        aux = model.aux_losses
        return (y - t).square().mean() + config.noisy_weight * (aux["importance"] + aux["load"])
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
    if name in OPTIONS:  # noisy gating or capacity: the layer's own backward
        exact = routing_exact_gradient(f, logits, dist)
        draws = config.draws if model.noisy_gating else 2
        row = summarize(_own_gradients(model, x, t, logits, draws, g), exact, name, 0.0)
    elif name == "default":  # the layer's own backward (its EMA defaults are its state)
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


def _own_gradients(
    model: hgnn.MoE, x: Tensor, t: Tensor, logits: Tensor, draws: int, g: torch.Generator
) -> Tensor:
    """``(draws, N, E)`` gradients, with respect to the clean router logits, of the layer's
    training forward with its noisy gating (fresh noise per draw) and its capacity."""
    with torch.no_grad():
        raw = model.noise(x) if model.noisy_gating else None
    out = []
    for _ in range(draws):
        leaf = logits.clone().requires_grad_()
        routed = leaf
        if raw is not None:
            routed, _ = _noisy_logits(leaf, raw, model.noise_epsilon, g)
        gates, indices = model.route(routed)
        if model.capacity_factor is not None:
            keep, _ = capacity_keep(indices, model.capacity_factor, model.num_experts)
            gates = torch.where(keep, gates, torch.zeros_like(gates))
        y = (gates.unsqueeze(-1) * model.experts_at(x, indices)).sum(-2)
        (grad,) = torch.autograd.grad((y - t).square().mean(-1).sum(), leaf)
        out.append(grad)
    return torch.stack(out)


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
        **OPTIONS.get(name, {}),
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
