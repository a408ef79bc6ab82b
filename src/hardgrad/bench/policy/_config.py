"""The ``policy`` benchmark's settings (:class:`PolicyConfig`) and its tiny policy and reward."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

#: The estimators compared, by their names in hardgrad.policy._estimators.
ESTIMATORS = (
    "reinforce",
    "reinforce-ema",
    "rloo",
    "rloo-token-mean",
    "rloo-sequence-mean",
    "grpo",
    "grpo-token-sum",
    "grpo-no-std",
    "dr-grpo",
)


@dataclass(frozen=True)
class PolicyConfig:
    """Settings of the ``policy`` benchmark.

    Attributes:
        vocab_size, length, eos_token: the sequences (token ``eos_token`` ends one).
        hidden: hidden units of the MLP policy.
        estimators: names of hardgrad.policy's sequence estimators.
        group_sizes: sequences per group :math:`n`.
        sequences: sequences drawn per group size for the gradient statistics (one group per
            draw: ``sequences // n`` draws).
        optimizers: ``"adam"`` (Adam at ``lr``: invariant to a constant scale of the
            gradient, so it sees direction and noise) and/or ``"sgd"`` (plain SGD at
            ``sgd_lr``: a scaled-down gradient takes proportionally smaller steps).
        steps: at most this many training steps per run (a run stops once it has reached
            the target and done ``eval_step`` steps).
        eval_step: the fixed step at which E[R] is reported.
        target: the share of the way from the start's E[R] to the best sequence's reward
            whose first step is reported (steps to 90 %).
        batch: sequences per training step (``batch // n`` groups).
        lr: Adam's learning rate; ``sgd_lr``: SGD's.
        seeds: training runs per estimator, group size and optimizer.
        threads: intra-op threads for the whole task (tiny tensors: 1 is fastest; None keeps
            the run's setting).
        plot: write ``policy.png`` (needs matplotlib).
    """

    vocab_size: int = 4
    length: int = 6
    eos_token: int = 0
    hidden: int = 16
    estimators: tuple[str, ...] = ESTIMATORS
    group_sizes: tuple[int, ...] = (2, 4, 8, 16)
    sequences: int = 131072
    optimizers: tuple[str, ...] = ("adam", "sgd")
    steps: int = 100
    eval_step: int = 10
    target: float = 0.9
    batch: int = 16
    lr: float = 0.01
    sgd_lr: float = 0.1
    seeds: int = 5
    threads: int | None = 1
    plot: bool = True


def default_config(quick: bool) -> PolicyConfig:
    """The full setting (5 training seeds, up to 100 steps), or ``--quick`` (32768 sequences
    per group size, 1 seed, up to 40 steps)."""
    if quick:
        return PolicyConfig(sequences=32768, steps=40, seeds=1)
    return PolicyConfig()


def init_params(config: PolicyConfig, seed: int) -> tuple[Tensor, ...]:
    """The MLP's weights (float64, requiring grad), seeded."""
    g = torch.Generator().manual_seed(seed)
    width = config.length * (config.vocab_size + 1)
    shapes = [(width, config.hidden), (config.hidden,), (config.hidden, config.vocab_size)]
    scales = [1.0 / width**0.5, 0.5, 1.0 / config.hidden**0.5]
    params = [
        s * torch.randn(*shape, generator=g, dtype=torch.float64)
        for s, shape in zip(scales, shapes, strict=True)
    ]
    return tuple(p.requires_grad_() for p in params)


def make_policy(params: tuple[Tensor, ...], config: PolicyConfig) -> Callable[[Tensor], Tensor]:
    """prefixes ``(M, t)`` -> next-token logits ``(M, V)``: the MLP on the prefix's one-hot,
    padded with a start symbol to ``length`` positions."""
    w1, b1, w2 = params
    V, L = config.vocab_size, config.length  # noqa: N806

    def policy(prefix: Tensor) -> Tensor:
        pad = torch.full((prefix.shape[0], L - prefix.shape[1]), V, dtype=torch.long)
        x = torch.nn.functional.one_hot(torch.cat([prefix, pad], 1), V + 1).flatten(1)
        return torch.tanh(x.to(w1.dtype) @ w1 + b1) @ w2

    return policy


def make_reward(config: PolicyConfig) -> Callable[[Tensor], Tensor]:
    """Sequences ``(M, L)`` -> rewards: the number of 2s, a bonus for starting with 1 and
    for a repeated first token, one for ending early, and a cost per token."""
    eos = config.eos_token

    def reward(y: Tensor) -> Tensor:
        is_eos = (y == eos).int()
        valid = (is_eos.cumsum(1) - is_eos) == 0
        length = valid.sum(1).double()
        twos = ((y == 2) & valid).sum(1).double()
        repeat = ((y[:, 0] == y[:, 1]) & valid[:, 1]).double()
        ended = (is_eos.sum(1) > 0).double()
        return twos + 0.8 * (y[:, 0] == 1).double() + 0.5 * repeat + 0.6 * ended - 0.35 * length

    return reward
