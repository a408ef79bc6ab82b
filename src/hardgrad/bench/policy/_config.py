"""The ``policy`` benchmark's settings (:class:`PolicyConfig`) and its tiny policy and reward."""

from __future__ import annotations

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
        steps: Adam steps of training per estimator, group size and seed.
        batch: sequences per training step (``batch // n`` groups).
        lr: Adam's learning rate.
        seeds: training runs per estimator and group size.
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
    steps: int = 200
    batch: int = 32
    lr: float = 0.01
    seeds: int = 2
    threads: int | None = 1
    plot: bool = True


def default_config(quick: bool) -> PolicyConfig:
    """The full setting, or ``--quick`` (32768 sequences per group size, 20 steps, 1 seed)."""
    if quick:
        return PolicyConfig(sequences=32768, steps=20, seeds=1)
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


def make_policy(params: tuple[Tensor, ...], config: PolicyConfig):
    """prefixes ``(M, t)`` -> next-token logits ``(M, V)``: the MLP on the prefix's one-hot,
    padded with a start symbol to ``length`` positions."""
    w1, b1, w2 = params
    V, L = config.vocab_size, config.length  # noqa: N806

    def policy(prefix: Tensor) -> Tensor:
        pad = torch.full((prefix.shape[0], L - prefix.shape[1]), V, dtype=torch.long)
        x = torch.nn.functional.one_hot(torch.cat([prefix, pad], 1), V + 1).flatten(1)
        return torch.tanh(x.to(w1.dtype) @ w1 + b1) @ w2

    return policy


def make_reward(config: PolicyConfig):
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
