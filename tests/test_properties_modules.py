"""Property-based tests (hypothesis) of the ``hardgrad.nn`` modules and ``hardgrad.diagnostics``.

Modules come from ``hardgrad.nn.__all__``; estimators from
:data:`hardgrad.estimators.ESTIMATORS`; probed functions from :data:`hardgrad.ops.OPS`.
Hypothesis draws shapes (0-dim, empty dimensions), dtypes and values of every magnitude.
The properties:

* every module's forward and backward are finite on finite input in every dtype, with
  shape and dtype kept; ``Quantize`` stays finite after any first batch and after an
  optimizer step of any size (a learned scale pushed to 0 or below);
* diagnostics (small sizes) return finite figures of the documented shapes;
* bad settings raise ``TypeError``/``ValueError`` naming the argument.

Runs are deterministic (``derandomize=True``, no example database).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import hardgrad as hg
from _properties import (
    DTYPES,
    INF,
    NAN,
    assert_raises_naming,
    property_settings,
    surrogate_names,
    tensor_of,
    tensors,
    upstream,
)
from hardgrad.estimators import ESTIMATORS
from hardgrad.ops import OPS

SETTINGS = property_settings(max_examples=25)


MODULES = [
    name
    for name in hg.nn.__all__
    if isinstance(getattr(hg.nn, name), type) and issubclass(getattr(hg.nn, name), torch.nn.Module)
]


# --------------------------------------------------------------------------------------
# Strategies.
# --------------------------------------------------------------------------------------


PATHWISE = [n for n, cls in ESTIMATORS.items() if cls.pathwise]

#: How to build each module with drawn settings: (settings strategy, needs a category dim).
#: A module added to hardgrad.nn without an entry here fails test_every_module_is_covered.
MODULE_SETTINGS: dict[str, tuple[st.SearchStrategy[dict[str, Any]], bool]] = {
    "Round": (
        st.fixed_dictionaries({"surrogate": st.sampled_from(surrogate_names("staircase"))}),
        False,
    ),
    "Sign": (st.fixed_dictionaries({"surrogate": st.sampled_from(surrogate_names("step"))}), False),
    "Binarize": (
        st.fixed_dictionaries({"surrogate": st.sampled_from(surrogate_names("step"))}),
        False,
    ),
    "Heaviside": (
        st.fixed_dictionaries({"surrogate": st.sampled_from(surrogate_names("step"))}),
        False,
    ),
    "Clamp": (
        st.lists(st.floats(-1e3, 1e3), min_size=2, max_size=2)
        .map(sorted)
        .flatmap(
            lambda b: st.fixed_dictionaries(
                {
                    "min": st.sampled_from((b[0], None)),
                    "max": st.just(b[1]),
                    "surrogate": st.sampled_from(surrogate_names("clamp")),
                }
            )
        ),
        False,
    ),
    "OneHotArgmax": (st.fixed_dictionaries({"tau": st.floats(0.05, 20.0)}), True),
    "Quantize": (
        st.fixed_dictionaries(
            {
                "bits": st.integers(2, 16),
                "signed": st.booleans(),
                "learn_scale": st.booleans(),
                "surrogate": st.sampled_from(surrogate_names("clamp")),
            }
        ),
        False,
    ),
    "PACT": (
        st.fixed_dictionaries(
            {
                "bits": st.integers(1, 16),
                "alpha": st.floats(1e-3, 1e4),
                "learn_alpha": st.booleans(),
            }
        ),
        False,
    ),
    "Bernoulli": (st.fixed_dictionaries({"estimator": st.sampled_from(PATHWISE)}), False),
    "Categorical": (st.fixed_dictionaries({"estimator": st.sampled_from(PATHWISE)}), True),
}


#: Quantizers returning a tuple, with a code dimension: covered by
#: test_vq_module_outputs_and_gradients_are_finite below.
VQ_MODULES = {
    "VectorQuantize": lambda d, dtype: hg.nn.VectorQuantize(5, d),
    "FSQ": lambda d, dtype: hg.nn.FSQ([3, 5, 4][:d] + [2] * max(d - 3, 0)),
    "LFQ": lambda d, dtype: hg.nn.LFQ(d),
    "ResidualVQ": lambda d, dtype: hg.nn.ResidualVQ(2, 5, d),
    # (not a quantizer, but the same contract: (y, indices, loss), y shaped like the input)
    "MoE": lambda d, dtype: hg.nn.MoE(d, num_experts=3, k=2),
}


#: Modules sized by the input's last dimension: covered by
#: test_sized_module_outputs_and_gradients_are_finite below.
SIZED_MODULES = {
    "HardConcreteGate": lambda d, seed: hg.nn.HardConcreteGate(
        d, generator=torch.Generator().manual_seed(seed)
    ),
}


#: Layers whose output shape differs from the input's (LIF returns (spikes, membrane)):
#: ``(features, dtype) -> (module, input shape per example)``; covered by
#: test_layer_outputs_and_gradients_are_finite below.
LAYER_MODULES: dict[str, Callable[[int], tuple[torch.nn.Module, tuple[int, ...]]]] = {
    "LIF": lambda f: (hg.nn.LIF(torch.full((f,), 0.9), 1.0, learn_beta=True), (f,)),
    "BinaryLinear": lambda f: (hg.nn.BinaryLinear(f, 3, scale=True, activations=True), (f,)),
    "BinaryConv2d": lambda f: (hg.nn.BinaryConv2d(f, 2, 1, weights="ternary"), (f, 2, 2)),
    "QuantLinear": lambda f: (hg.nn.QuantLinear(f, 3, weight_bits=3, act_bits=4), (f,)),
    "QuantConv2d": lambda f: (hg.nn.QuantConv2d(f, 2, 1, weight_bits=2, act_bits=2), (f, 2, 2)),
    "L0Linear": lambda f: (hg.nn.L0Linear(f, 3, local_rep=True), (f,)),
    "L0Conv2d": lambda f: (hg.nn.L0Conv2d(f, 2, 1), (f, 2, 2)),
}


def test_every_module_is_covered():
    assert set(MODULE_SETTINGS) | set(VQ_MODULES) | set(SIZED_MODULES) | set(LAYER_MODULES) == set(
        MODULES
    )


@pytest.mark.parametrize("name", sorted(SIZED_MODULES))
@SETTINGS
@given(data=st.data(), seed=st.integers(0, 2**16))
def test_sized_module_outputs_and_gradients_are_finite(name, data, seed):
    """Drawn batch shapes (empty included), sizes, dtypes and values up to 1e6 (the gates'
    parameter is float32: a gradient beyond its range would overflow); train and eval."""
    dtype = data.draw(st.sampled_from(DTYPES), label="dtype")
    d = data.draw(st.integers(1, 5), label="size")
    batch = tuple(data.draw(st.lists(st.integers(0, 3), max_size=2), label="batch"))
    module = SIZED_MODULES[name](d, seed)
    for training in (True, False):
        module.train(training)
        x = data.draw(tensor_of(dtype, (*batch, d), bound=1e6), label="x")
        leaf = x.clone().requires_grad_()
        y = module(leaf)
        assert y.shape == x.shape and y.dtype == x.dtype
        assert torch.isfinite(y).all(), y
        grads = torch.autograd.grad(
            y, [leaf, *module.parameters()], upstream(y, seed), allow_unused=True
        )
        for grad in grads:
            assert grad is None or torch.isfinite(grad).all(), grads


@pytest.mark.parametrize("name", sorted(LAYER_MODULES))
@SETTINGS
@given(data=st.data(), seed=st.integers(0, 2**16))
def test_layer_outputs_and_gradients_are_finite(name, data, seed):
    """Drawn batch sizes (empty included), feature counts, float dtypes and finite values
    up to where a sum over the features stays finite; two batches (quantizer
    initialisation, LIF state carried from the first)."""
    dtype = data.draw(st.sampled_from((torch.float64, torch.float32)), label="dtype")
    f = data.draw(st.integers(1, 4), label="features")
    batch = data.draw(st.integers(0, 3), label="batch")
    torch.manual_seed(seed)
    module, shape = LAYER_MODULES[name](f)
    module = module.to(dtype)
    mem = None
    for _ in range(2):
        bound = torch.finfo(dtype).max / 64
        x = data.draw(tensor_of(dtype, (batch, *shape), bound=bound), label="x")
        leaf = x.clone().requires_grad_()
        if name == "LIF":
            out, mem = module(leaf, None if mem is None else mem.detach())
            outputs = [out, mem]
        else:
            out = module(leaf)
            outputs = [out]
        for y in outputs:
            assert y.dtype == dtype and torch.isfinite(y).all(), y
        total = sum((y * upstream(y, seed)).sum() for y in outputs)
        params = [p for p in module.parameters() if p.requires_grad]
        grads = torch.autograd.grad(total, [leaf, *params], allow_unused=True)
        for grad in grads:
            assert grad is None or torch.isfinite(grad).all(), grads


@pytest.mark.parametrize("name", sorted(VQ_MODULES))
@SETTINGS
@given(data=st.data(), seed=st.integers(0, 2**16))
def test_vq_module_outputs_and_gradients_are_finite(name, data, seed):
    """Drawn batch shapes (empty included), code sizes, dtypes and finite values of any
    magnitude whose square fits; a second batch after the first (initialisation, EMA, dead codes)."""
    dtype = data.draw(st.sampled_from((torch.float64, torch.float32)), label="dtype")
    d = data.draw(st.integers(1, 4), label="code size")
    batch = tuple(data.draw(st.lists(st.integers(0, 4), max_size=2), label="batch"))
    module = VQ_MODULES[name](d, dtype).to(dtype)
    for _ in range(2):
        # Up to where the losses' squares fit the dtype (beyond, a squared error is inf
        # as in F.mse_loss itself).
        bound = math.sqrt(torch.finfo(dtype).max) / 4
        x = data.draw(tensor_of(dtype, (*batch, d), bound=bound), label="z")
        leaf = x.clone().requires_grad_()
        z_q, *rest = module(leaf)
        assert z_q.shape == x.shape and z_q.dtype == x.dtype
        assert torch.isfinite(z_q).all(), z_q
        total = (z_q * upstream(z_q, seed)).sum()
        if rest and rest[-1].is_floating_point():
            assert torch.isfinite(rest[-1]).all(), rest[-1]
            total = total + rest[-1].sum()
        params = [p for p in module.parameters() if p.requires_grad]
        grads = torch.autograd.grad(total, [leaf, *params], allow_unused=True)
        for grad in grads:
            assert grad is None or torch.isfinite(grad).all(), grads


# --------------------------------------------------------------------------------------
# Modules: finite forward and backward in every dtype.
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(MODULE_SETTINGS))
@SETTINGS
@given(data=st.data(), seed=st.integers(0, 2**16))
def test_module_forward_and_backward_are_finite(name, data, seed):
    strategy, categorical = MODULE_SETTINGS[name]
    kwargs = data.draw(strategy, label="settings")
    cls = getattr(hg.nn, name)
    if name in ("Bernoulli", "Categorical"):
        kwargs["generator"] = torch.Generator().manual_seed(seed)
    x = data.draw(tensors(min_dims=1 if categorical else 0), label="x")
    if name == "Quantize" and x.dim() and data.draw(st.booleans(), label="per channel"):
        kwargs["per_channel_dim"] = data.draw(st.integers(-x.dim(), x.dim() - 1))
    module = cls(**kwargs)
    if categorical and x.shape[-1] == 0:
        assert_raises_naming("logits", module, x)
        return
    second = data.draw(tensor_of(x.dtype, tuple(x.shape)), label="second batch")
    for batch in (x, second):  # the second one after Quantize's initialisation
        leaf = batch.clone().requires_grad_()
        y = module(leaf)
        assert y.shape == batch.shape and y.dtype == batch.dtype, (y.shape, y.dtype)
        assert torch.isfinite(y).all(), y
        grads = torch.autograd.grad(
            y, [leaf, *module.parameters()], upstream(y, seed), allow_unused=True
        )
        for grad in grads:
            assert grad is None or torch.isfinite(grad).all(), grads


@SETTINGS
@given(
    data=st.data(),
    bits=st.integers(2, 8),
    lr=st.one_of(st.floats(1e-3, 1e3), st.sampled_from((10.0, 100.0))),
    target=st.floats(-10.0, 10.0),
    seed=st.integers(0, 2**16),
)
def test_quantize_stays_finite_after_any_optimizer_step(data, bits, lr, target, seed):
    """SGD steps of any size, on a loss that may want a smaller or larger scale, can push
    the learned scale to 0 or below: the forward stays finite and equal to quantization with
    the documented step size, and so does the next gradient."""
    x = data.draw(
        tensors(min_dims=1, dtypes=(torch.float32, torch.float64)).filter(lambda t: t.numel() > 0),
        label="x",
    )
    x = x.clamp(-1e6, 1e6)  # the loss below must stay finite for the step to be finite
    q = hg.nn.Quantize(bits=bits)
    optimizer = torch.optim.SGD(q.parameters(), lr=lr)
    for _ in range(3):
        optimizer.zero_grad()
        y = q(x)
        assert torch.isfinite(y).all(), (q.scale, y)
        expected = hg.quantize(
            x, q.step_size(x.dtype).detach(), quant_min=q.quant_min, quant_max=q.quant_max
        )
        assert torch.equal(y.detach(), expected)
        (y - target * x).square().mean().backward()
        assert torch.isfinite(q.scale.grad).all()
        optimizer.step()


# --------------------------------------------------------------------------------------
# Module settings.
# --------------------------------------------------------------------------------------

MODULE_BAD: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("surrogate", "Round", {"surrogate": "clipped"}),
    ("surrogate", "Sign", {"surrogate": "no_such_surrogate"}),
    ("surrogate", "Heaviside", {"surrogate": 3}),
    ("min", "Clamp", {"min": 1.0, "max": 0.0}),
    ("min", "Clamp", {}),
    ("max", "Clamp", {"max": NAN}),
    ("tau", "OneHotArgmax", {"tau": 0.0}),
    ("dim", "OneHotArgmax", {"dim": 1.5}),
    ("bits", "Quantize", {"bits": 1}),
    ("bits", "Quantize", {"bits": 17}),
    ("bits", "Quantize", {"bits": 4.0}),
    ("signed", "Quantize", {"signed": 1}),
    ("learn_scale", "Quantize", {"learn_scale": "yes"}),
    ("per_channel_dim", "Quantize", {"per_channel_dim": 0.5}),
    ("surrogate", "Quantize", {"surrogate": "sigmoid"}),
    ("estimator", "Bernoulli", {"estimator": "no_such_estimator"}),
    ("estimator", "Categorical", {"estimator": "disarm"}),
    ("tau", "Bernoulli", {"estimator": "st_identity", "tau": 0.5}),
    ("tau", "Categorical", {"tau": -1.0}),
    ("dim", "Categorical", {"dim": "0"}),
)


@SETTINGS
@given(case=st.sampled_from(MODULE_BAD))
def test_module_bad_settings_raise_naming_them(case):
    argument, name, kwargs = case
    assert_raises_naming(argument, getattr(hg.nn, name), **kwargs)


@SETTINGS
@given(
    case=st.sampled_from(
        (
            ("start", (0.0, 1.0, 10)),
            ("end", (1.0, NAN, 10)),
            ("steps", (1.0, 0.5, 0)),
            ("kind", (1.0, 0.5, 10, "step")),
        )
    )
)
def test_anneal_bad_settings_raise_naming_them(case):
    argument, args = case
    assert_raises_naming(
        argument, hg.nn.anneal, *args[:3], **({"kind": args[3]} if len(args) > 3 else {})
    )


@SETTINGS
@given(data=st.data())
def test_quantize_per_channel_dim_out_of_range_names_it(data):
    x = data.draw(tensors(dtypes=(torch.float32,)))
    dim = data.draw(st.sampled_from((x.dim(), -x.dim() - 1)))
    assert_raises_naming("per_channel_dim", hg.nn.Quantize(per_channel_dim=dim), x)


# --------------------------------------------------------------------------------------
# Diagnostics (small sizes).
# --------------------------------------------------------------------------------------


@st.composite
def small_problems(draw: st.DrawFn, nonfinite: bool = False) -> tuple[torch.Tensor, str, int]:
    """``(logits, dist, dim)`` with at most 4 variables."""
    dist = draw(st.sampled_from(("bernoulli", "categorical")))
    logits = draw(
        tensors(
            min_dims=1 if dist == "categorical" else 0, max_dims=2, max_side=2, nonfinite=nonfinite
        ).filter(lambda t: t.numel() <= 4 and (dist == "bernoulli" or t.shape[-1] > 0))
    )
    return logits, dist, -1


def toy(logits: torch.Tensor, dist: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """A per-example quadratic, one value per batch entry."""

    def f(b: torch.Tensor) -> torch.Tensor:
        value = (b - 0.45).square()
        return value.sum(-1) if dist == "categorical" else value

    return f


@SETTINGS
@given(problem=small_problems(nonfinite=True))
def test_exact_gradient_is_finite_and_shaped_like_the_logits(problem):
    """Finite for finite and +-inf logits; NaN logits raise ValueError naming `logits`."""
    logits, dist, dim = problem
    if logits.isnan().any():
        assert_raises_naming(
            "logits", hg.diagnostics.exact_gradient, toy(logits, dist), logits, dist=dist
        )
        return
    grad = hg.diagnostics.exact_gradient(toy(logits, dist), logits, dist=dist, dim=dim)
    assert grad.shape == logits.shape and grad.dtype == logits.dtype
    assert torch.isfinite(grad).all(), grad


def _applies(name: str, dist: str) -> bool:
    return dist in getattr(ESTIMATORS.get(name), "dists", ("bernoulli", "categorical"))


@SETTINGS
@given(
    problem=small_problems(),
    name=st.sampled_from(ESTIMATORS.names()),
    num_draws=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)
def test_gradient_samples_are_finite_and_shaped(problem, name, num_draws, seed):
    logits, dist, dim = problem
    if not _applies(name, dist):
        assert_raises_naming(
            "dist",
            hg.diagnostics.gradient_samples,
            toy(logits, dist),
            logits,
            estimator=name,
            dist=dist,
        )
        return
    estimator = (
        ESTIMATORS.get(name)() if issubclass(ESTIMATORS.get(name), torch.nn.Module) else name
    )
    draws = hg.diagnostics.gradient_samples(
        toy(logits, dist),
        logits,
        estimator=estimator,
        dist=dist,
        num_draws=num_draws,
        dim=dim,
        generator=torch.Generator().manual_seed(seed),
    )
    assert draws.shape == (num_draws, *logits.shape) and draws.dtype == logits.dtype
    assert torch.isfinite(draws).all(), draws


@SETTINGS
@given(
    problem=small_problems(),
    names=st.lists(st.sampled_from(ESTIMATORS.names()), min_size=1, max_size=2, unique=True),
    num_draws=st.integers(2, 3),
    exact=st.booleans(),
)
def test_compare_gives_finite_figures(problem, names, num_draws, exact):
    logits, dist, dim = problem
    names = [n for n in names if _applies(n, dist)] or ["st"]
    result = hg.diagnostics.compare(
        toy(logits, dist),
        logits,
        estimators=names,
        dist=dist,
        num_draws=num_draws,
        exact=exact,
        dim=dim,
        generator=torch.Generator().manual_seed(0),
    )
    assert [row.estimator for row in result.rows] == names
    for row in result.rows:
        for value in (row.bias, row.std, row.cosine, row.snr, row.mse, row.seconds_per_draw):
            assert value is None or math.isfinite(value), row
        assert row.cosine is None or -1 - 1e-9 <= row.cosine <= 1 + 1e-9
        if not exact:
            assert row.bias is None and row.cosine is None and row.mse is None
    assert str(result) and result.to_markdown().count("\n") == len(names) + 1
    assert len(result.to_dict()["rows"]) == len(names)


@SETTINGS
@given(
    name=st.sampled_from([n for n, spec in OPS.items() if spec.family is not None]),
    points=st.lists(
        st.one_of(
            st.floats(-10.0, 10.0),
            st.floats(-1e300, 1e300),
            st.sampled_from((0.0, -0.0, 0.5, 1.0, -1.0)),
        ),
        min_size=1,
        max_size=4,
    ),
    eps=st.floats(1e-8, 1e-1),
)
def test_probe_reports_finite_derivatives(name, points, eps):
    spec = OPS.get(name)
    report = hg.diagnostics.probe(spec, points, eps=eps)
    assert [p.point for p in report.points] == [
        float(torch.tensor(v, dtype=torch.float64)) for v in points
    ]
    for p in report.points:
        assert p.autograd is not None and math.isfinite(p.autograd), p
        assert math.isfinite(p.value) and math.isfinite(p.left) and math.isfinite(p.right), p
        assert p.convention
    assert str(report) and report.to_markdown()


@SETTINGS
@given(
    case=st.sampled_from(
        (
            ("points", {"points": [INF]}),
            ("points", {"points": [0.0, NAN]}),
            ("points", {"points": []}),
            ("points", {"points": "abc"}),
            ("eps", {"points": [0.0], "eps": 0.0}),
            ("eps", {"points": [0.0], "eps": NAN}),
            ("fn", {"fn": 3, "points": [0.0]}),
        )
    )
)
def test_probe_bad_arguments_name_them(case):
    argument, kwargs = case[0], dict(case[1])
    fn = kwargs.pop("fn", torch.relu)
    assert_raises_naming(argument, hg.diagnostics.probe, fn, **kwargs)


@SETTINGS
@given(
    case=st.sampled_from(
        (
            ("estimators", {"estimators": "st"}),
            ("estimators", {"estimators": []}),
            ("estimators", {"estimators": ["no_such_estimator"]}),
            ("num_draws", {"estimators": ["st"], "num_draws": 1}),
            ("num_draws", {"estimators": ["st"], "num_draws": 2.5}),
            ("dist", {"estimators": ["st"], "dist": "poisson"}),
        )
    )
)
def test_compare_bad_arguments_name_them(case):
    argument, kwargs = case
    assert_raises_naming(
        argument, hg.diagnostics.compare, lambda b: b.sum(-1), torch.zeros(2), **kwargs
    )


@SETTINGS
@given(bad=st.sampled_from((0, -1, 1.5, "3", None)))
def test_gradient_samples_bad_num_draws(bad):
    assert_raises_naming(
        "num_draws",
        hg.diagnostics.gradient_samples,
        lambda b: b.sum(-1),
        torch.zeros(2),
        estimator="st",
        num_draws=bad,
    )
