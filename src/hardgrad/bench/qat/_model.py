"""The networks of the ``qat`` benchmark: each quantizer variant (:class:`Variant`) and the MLP built
from :mod:`hardgrad.nn`'s quantized layers."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from torch import nn

from ... import nn as hgnn
from ._config import QatConfig

_METHODS = ("ste", "lsq")
#: The smallest learned scale (Adam could step a scale below 0).
_MIN_SCALE = 1e-6


# --------------------------------------------------------------------------- models

#: The layers the networks are built from (:mod:`hardgrad.nn`), under their old names here.
QuantLinear = hgnn.QuantLinear
BinaryLinear = hgnn.BinaryLinear


@dataclass(frozen=True)
class Variant:
    """One trained configuration: ``kind`` is ``"float"``, ``"ste"``, ``"lsq"``,
    ``"binary"`` or ``"ternary"``; ``bits`` is set for ``"ste"`` and ``"lsq"``."""

    kind: str
    bits: int | None = None

    @property
    def label(self) -> str:
        if self.kind in _METHODS:
            return f"{self.kind.upper()} {self.bits}-bit"
        return self.kind

    @property
    def precision(self) -> str:
        """What is quantized, for the table."""
        if self.kind == "float":
            return "float32 weights and activations"
        if self.kind == "binary":
            return "±1 weights and activations (float first and last layer)"
        if self.kind == "ternary":
            return "ternary weights, float activations (float first and last layer)"
        return f"{self.bits}-bit weights (per channel) and activations"

    @property
    def gradient(self) -> str:
        return {
            "float": "exact",
            "ste": "masked STE, fixed scale",
            "lsq": "masked STE, learned scale (LSQ)",
            "binary": "clipped STE",
            "ternary": "STE (TWN)",
        }[self.kind]


def variants(config: QatConfig) -> list[Variant]:
    """The configurations of one run, in table order."""
    for method in config.methods:
        if method not in _METHODS:
            raise ValueError(f"Unknown method {method!r} in `methods`; available: 'ste', 'lsq'")
    out = [Variant("float")]
    out += [Variant(m, b) for b in config.bits for m in config.methods]
    if config.binary:
        out.append(Variant("binary"))
    if config.ternary:
        out.append(Variant("ternary"))
    return out


def build_model(
    variant: Variant, features: int, hidden: tuple[int, ...], classes: int
) -> nn.Sequential:
    """The MLP of ``variant`` (see the package docstring)."""
    widths = [features, *hidden]
    layers: list[nn.Module] = []
    if variant.kind in ("binary", "ternary"):
        if len(hidden) < 2:
            raise ValueError(
                f"Expected at least two hidden layers for the {variant.kind} network, but found "
                f"{hidden}"
            )
        binary = variant.kind == "binary"
        for i, (n_in, n_out) in enumerate(itertools.pairwise(widths)):
            if i == 0:
                layers.append(nn.Linear(n_in, n_out))
            else:
                layers.append(hgnn.BinaryLinear(n_in, n_out, bias=False, weights=variant.kind))
            layers += [nn.BatchNorm1d(n_out), hgnn.Binarize() if binary else nn.ReLU()]
        layers.append(nn.Linear(widths[-1], classes))
        return nn.Sequential(*layers)
    if variant.kind == "float":
        for n_in, n_out in itertools.pairwise(widths):
            layers += [nn.Linear(n_in, n_out), nn.ReLU()]
        layers.append(nn.Linear(widths[-1], classes))
        return nn.Sequential(*layers)
    assert variant.bits is not None
    learn = variant.kind == "lsq"
    for i, (n_in, n_out) in enumerate(itertools.pairwise([*widths, classes])):
        layers.append(
            hgnn.QuantLinear(
                n_in,
                n_out,
                weight_bits=variant.bits,
                act_bits=None if i == 0 else variant.bits,  # the pixels stay float
                act_signed=False,  # hidden activations come from a ReLU
                learn_scale=learn,
            )
        )
        if i < len(widths) - 1:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)
