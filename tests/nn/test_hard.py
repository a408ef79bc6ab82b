"""hardgrad.nn's modules of the hard ops (``Round``, ``Sign``, ``Binarize``, ``Heaviside``,
``Clamp``, ``OneHotArgmax``) agree with the functions; the modules' reprs and bad
arguments."""

from __future__ import annotations

import math

import pytest
import torch

import hardgrad as hg


def _grads(fn, x):
    x = x.detach().clone().requires_grad_(True)
    y = fn(x)
    (g,) = torch.autograd.grad(y, x, torch.linspace(-1, 1, y.numel()).view_as(y))
    return y.detach(), g


@pytest.mark.parametrize(
    ("module", "function"),
    [
        (hg.nn.Round(), hg.round),
        (hg.nn.Sign(surrogate="tanh"), lambda x: hg.sign(x, surrogate="tanh")),
        (hg.nn.Binarize(), hg.binarize),
        (hg.nn.Heaviside(surrogate="atan"), lambda x: hg.heaviside(x, surrogate="atan")),
        (hg.nn.Clamp(-0.5, 0.5), lambda x: hg.clamp(x, -0.5, 0.5)),
        (
            hg.nn.Clamp(max=0.0, surrogate="identity"),
            lambda x: hg.clamp(x, max=0.0, surrogate="identity"),
        ),
        (hg.nn.OneHotArgmax(tau=0.3), lambda x: hg.one_hot_argmax(x, tau=0.3)),
    ],
)
def test_module_matches_function(module, function):
    x = torch.randn(5, 7, generator=torch.Generator().manual_seed(0)) * 2
    y_module, g_module = _grads(module, x)
    y_function, g_function = _grads(function, x)
    assert torch.equal(y_module, y_function)
    assert torch.equal(g_module, g_function)


def test_reprs():
    assert repr(hg.nn.Round()) == "Round(surrogate=Identity())"
    assert repr(hg.nn.Sign()) == "Sign(surrogate=Clipped(width=1.0))"
    assert repr(hg.nn.Heaviside()) == "Heaviside(surrogate=Sigmoid(slope=1.0))"
    assert (
        repr(hg.nn.Clamp(0.0, 1.0))
        == "Clamp(min=0.0, max=1.0, surrogate=Masked(min=-1.0, max=1.0))"
    )
    assert repr(hg.nn.OneHotArgmax()) == "OneHotArgmax(dim=-1, tau=1.0)"
    assert (
        repr(hg.nn.Quantize())
        == "Quantize(bits=8, signed=True, per_channel_dim=None, learn_scale=True)"
    )
    assert "surrogate=Identity()" in repr(hg.nn.Quantize(surrogate="identity"))


def test_module_bad_arguments():
    with pytest.raises(ValueError, match="surrogate"):
        hg.nn.Round(surrogate="sigmoid")
    with pytest.raises(ValueError, match="min"):
        hg.nn.Clamp()
    with pytest.raises(ValueError, match="min"):
        hg.nn.Clamp(1.0, 0.0)
    with pytest.raises(ValueError, match="tau"):
        hg.nn.OneHotArgmax(tau=0.0)
    with pytest.raises(ValueError, match="bits"):
        hg.nn.Quantize(bits=1)
    with pytest.raises(ValueError, match="bits"):
        hg.nn.Quantize(bits=17)
    with pytest.raises(TypeError, match="bits"):
        hg.nn.Quantize(bits=4.0)
    with pytest.raises(TypeError, match="signed"):
        hg.nn.Quantize(signed="yes")
    with pytest.raises(ValueError, match="per_channel_dim"):
        hg.nn.Quantize(per_channel_dim=3)(torch.randn(4, 4))
    with pytest.raises(ValueError, match="finite"):
        hg.nn.Quantize()(torch.tensor([1.0, math.inf]))
