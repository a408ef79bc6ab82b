"""The VAE of the two VAE benchmarks: encoder and decoder MLPs, the closed-form KLs, and the
negative ELBO."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from ...estimators import Estimator
from ...stochastic._expectation import expectation

Objective = Callable[[Tensor], Tensor]


# --------------------------------------------------------------------------- the model


def _mlp(sizes: Sequence[int]) -> torch.nn.Sequential:
    layers: list[torch.nn.Module] = []
    for i, (a, b) in enumerate(itertools.pairwise(sizes)):
        layers.append(torch.nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(torch.nn.LeakyReLU(0.1))
    return torch.nn.Sequential(*layers)


def kl_bernoulli(logits: Tensor) -> Tensor:
    r""":math:`\mathrm{KL}(\mathrm{Bern}(\sigma(\ell)) \,\|\, \mathrm{Bern}(1/2))`, summed over
    the last dimension: :math:`\sum_i q_i \log q_i + (1-q_i)\log(1-q_i) + \log 2`."""
    q = torch.sigmoid(logits)
    logsig = torch.nn.functional.logsigmoid
    per_bit = q * logsig(logits) + (1 - q) * logsig(-logits) + math.log(2.0)
    return per_bit.sum(-1)


def kl_categorical(logits: Tensor) -> Tensor:
    r""":math:`\mathrm{KL}(\mathrm{Cat}(\mathrm{softmax}(\ell)) \,\|\, \mathrm{Uniform}(C))`
    summed over the variables: logits ``(..., L, C)`` -> ``(...)``."""
    log_q = torch.log_softmax(logits, -1)
    per_var = (log_q.exp() * (log_q + math.log(logits.shape[-1]))).sum(-1)
    return per_var.sum(-1)


class VAE(torch.nn.Module):
    """A discrete VAE: ``features`` pixels, ``latents`` variables of ``categories`` classes
    (``None``: Bernoulli bits), MLP encoder ``features-enc_hidden-latent logits`` and
    decoder ``latent inputs-dec_hidden-features``.

    ``forward(x, estimator, num_samples, generator)`` is the per-example -ELBO ``(batch,)``.
    """

    def __init__(
        self,
        features: int,
        latents: int,
        categories: int | None,
        enc_hidden: Sequence[int],
        dec_hidden: Sequence[int],
    ) -> None:
        super().__init__()
        self.features, self.latents, self.categories = features, latents, categories
        width = latents * (categories or 1)
        self.encoder = _mlp([features, *enc_hidden, width])
        self.decoder = _mlp([width, *dec_hidden, features])

    @property
    def dist(self) -> str:
        return "bernoulli" if self.categories is None else "categorical"

    def encode(self, x: Tensor) -> Tensor:
        """The logits of q(b | x): ``(B, L)`` or ``(B, L, C)``."""
        logits: Tensor = self.encoder(x)
        if self.categories is not None:
            logits = logits.unflatten(-1, (self.latents, self.categories))
        return logits

    def reconstruction(self, x: Tensor) -> Objective:
        """``f(b) = -log p(x | b)`` per example: samples ``(n, B, L[, C])`` -> ``(n, B)``."""

        def f(b: Tensor) -> Tensor:
            inputs = b.flatten(-2) if self.categories is not None else b
            out: Tensor = self.decoder(inputs)
            target = x.expand_as(out)
            bce = torch.nn.functional.binary_cross_entropy_with_logits(
                out, target, reduction="none"
            )
            return bce.sum(-1)

        return f

    def kl(self, logits: Tensor) -> Tensor:
        return kl_bernoulli(logits) if self.categories is None else kl_categorical(logits)

    def forward(
        self,
        x: Tensor,
        estimator: Estimator,
        num_samples: int,
        generator: torch.Generator | None = None,
    ) -> Tensor:
        logits = self.encode(x)
        recon = expectation(
            self.reconstruction(x),
            logits,
            dist=self.dist,
            estimator=estimator,
            num_samples=num_samples,
            generator=generator,
        )
        return recon + self.kl(logits)


@torch.no_grad()
def negative_elbo(
    model: VAE, x: Tensor, num_samples: int, generator: torch.Generator, chunk: int = 512
) -> Tensor:
    """The per-example -ELBO with the reconstruction term averaged over ``num_samples``
    independent draws of q (an unbiased Monte-Carlo estimate), ``(N,)``."""
    out = []
    for start in range(0, x.shape[0], chunk):
        xs = x[start : start + chunk]
        logits = model.encode(xs)
        recon = expectation(
            model.reconstruction(xs),
            logits,
            dist=model.dist,
            estimator="reinforce",
            num_samples=num_samples,
            generator=generator,
        )
        out.append(recon + model.kl(logits))
    return torch.cat(out)
