"""How the ``policy`` benchmark trains: one run per estimator, group size, optimizer and seed,
with the exact expected reward after every step (see :mod:`hardgrad.bench.policy`)."""

from __future__ import annotations

from typing import Any

import torch

from ...policy import EMABaseline, sample_sequences
from ...policy._estimators import SEQUENCE_ESTIMATORS
from ...policy._exact import _enumerate
from .._seeds import mean_std
from ._config import PolicyConfig, init_params, make_policy, make_reward

#: The optimizers a run may use, by name.
OPTIMIZERS = ("adam", "sgd")


class ExactValue:
    """The exact expected reward :math:`\\sum_y \\pi(y) R(y)` of ``policy`` at its current
    parameters, over every sequence (enumerated once; each call runs the policy on the
    :math:`V^t` prefixes of each position, without gradient)."""

    def __init__(self, policy: Any, config: PolicyConfig) -> None:
        V, L = config.vocab_size, config.length  # noqa: N806
        self.policy = policy
        with torch.no_grad():
            tree = _enumerate(policy, V, L, config.eos_token, torch.device("cpu"))
        self.nodes, self.ended = tree.nodes, tree.ended
        self.rewards = make_reward(config)(tree.sequences).double()
        index = torch.arange(V**L)
        full = (index[:, None] // V ** torch.arange(L - 1, -1, -1)) % V
        self.prefixes = [full[:: V ** (L - t), :t] for t in range(L)]  # as _enumerate's tree

    @torch.no_grad()
    def __call__(self) -> float:
        tree = torch.cat([torch.log_softmax(self.policy(p), -1).reshape(-1) for p in self.prefixes])
        logprobs = tree[self.nodes].masked_fill(self.ended, 0).sum(1)
        return float((logprobs.exp() * self.rewards).sum())


def train_curve(
    name: str, n: int, optimizer: str, config: PolicyConfig, seed: int, target: float
) -> list[float]:
    """The exact E[R] at the start and after each step of one run of ``name`` at group size
    ``n`` (``config.batch`` sequences per step, ``batch // n`` groups) with ``optimizer``
    (Adam at ``config.lr``, plain SGD at ``config.sgd_lr``), from the same initial policy for
    every run. Stops after ``config.steps`` steps, or once E[R] has reached ``target`` and
    ``config.eval_step`` steps are done (nothing later is reported)."""
    params = init_params(config, seed=0)
    policy, reward = make_policy(params, config), make_reward(config)
    value = ExactValue(policy, config)
    estimator = SEQUENCE_ESTIMATORS[name]
    baseline = EMABaseline(estimator.ema_decay) if estimator.ema_decay is not None else None
    if optimizer == "adam":
        opt: torch.optim.Optimizer = torch.optim.Adam(params, lr=config.lr)
    else:
        opt = torch.optim.SGD(params, lr=config.sgd_lr)
    g = torch.Generator().manual_seed(1000 + seed)
    size = max(n, config.batch // n * n)
    groups = torch.arange(size // n).repeat_interleave(n)
    curve = [value()]
    for step in range(1, config.steps + 1):
        s = sample_sequences(policy, size, vocab_size=config.vocab_size, length=config.length,
                             eos_token=config.eos_token, generator=g)  # fmt: skip
        loss = estimator.loss(reward(s.tokens), groups, s.logprobs, s.mask, baseline=baseline)
        opt.zero_grad()
        loss.backward()
        opt.step()
        curve.append(value())
        if step >= config.eval_step and max(curve) >= target:
            break
    return curve


def first_at(curve: list[float], target: float) -> int | None:
    """The first step whose E[R] reaches ``target`` (None: not within the run)."""
    return next((i for i, v in enumerate(curve) if v >= target), None)


def summarize_runs(
    curves: list[list[float]], config: PolicyConfig, target: float
) -> dict[str, Any]:
    """Over seeds: E[R] after ``config.eval_step`` steps (mean, std) and the steps to
    ``target`` (mean, std over the seeds that reached it; ``reached`` of ``runs``)."""
    steps = [first_at(c, target) for c in curves]
    hit = [s for s in steps if s is not None]
    return {
        "reward_at": mean_std([c[config.eval_step] for c in curves]),
        "reward_at_runs": [c[config.eval_step] for c in curves],
        "steps_to_target": mean_std(hit) if hit else None,
        "steps": steps,
        "reached": len(hit),
        "runs": len(curves),
    }


def target_of(start: float, best: float, config: PolicyConfig) -> float:
    """E[R] at ``config.target`` of the way from the start to the best sequence's reward."""
    return start + config.target * (best - start)


def check_training(config: PolicyConfig) -> None:
    """The training settings' values (``ValueError`` naming the field)."""
    for name in config.optimizers:
        if name not in OPTIMIZERS:
            raise ValueError(f"Unknown optimizer {name!r} in `optimizers`; available: {OPTIMIZERS}")
    if not 1 <= config.eval_step <= config.steps:
        raise ValueError(
            f"Expected 1 <= `eval_step` <= `steps`, but found {config.eval_step} and {config.steps}"
        )
    if not 0 < config.target <= 1:
        raise ValueError(f"Expected `target` in (0, 1], but found {config.target!r}")
