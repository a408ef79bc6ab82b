"""hardgrad on a CUDA device: every estimator through ``hg.expectation``, ``hg.quantize`` with a
learned scale and zero point, ``hg.straight_through``, the Bengio et al. units, every
``hardgrad.nn`` module, the diagnostics, and ``hg.expectation`` under ``torch.compile``.

Every test is marked ``cuda`` and takes its device from the ``cuda_device`` fixture, so
without a GPU it is skipped, and ``HARDGRAD_CUDA_TESTS_DEVICE=cpu`` runs it on the CPU to
check the tests themselves (see tests/conftest.py). Each test checks that

* outputs and every gradient (the input's, ``f``'s parameters', an estimator's or a
  module's own parameters') are on the device, in the dtype they should have (the input's
  for values and input gradients), and finite;
* nothing touches a CPU tensor while the computation runs on the device
  (:func:`no_hidden_cpu_tensors`, a ``TorchDispatchMode`` that records every aten op
  with a CPU tensor among its inputs or outputs; it is switched off when the test device
  is the CPU itself, and :func:`test_hidden_cpu_tensor_check_catches_a_cpu_scalar` shows
  that it catches a CPU scalar mixed into a computation on another device);
* the same seed (of a ``torch.Generator`` on the device) gives bit-identical results twice;
* the device agrees with the CPU where the result is deterministic given the noise: hard
  forwards bit for bit, gradients to a dtype-appropriate tolerance (:data:`AGREE`).
  For the random parts, the CPU run replays the device's noise: every uniform draw
  hardgrad makes goes through ``hardgrad.estimators._noise.uniform`` (Gumbel noise
  included), so :func:`noise_from` patches that function, wherever a hardgrad module
  imported it, to draw from a generator on the device with the same seed and move the
  result to the CPU. Only ``hg.noisy_rectifier`` draws Gaussian noise; its test
  redraws it from the generator.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

import hardgrad as hg
from hardgrad.estimators import ESTIMATORS, RELAX, Estimator, Reinforce
from hardgrad.estimators import _noise as estimator_base

pytestmark = pytest.mark.cuda

NAMES = ESTIMATORS.names()
BOTH = ("bernoulli", "categorical")
HALF = (torch.float16, torch.bfloat16)
SEED = 1234

#: Tolerances for device results against the same computation on the CPU in the same
#: dtype (different kernels round differently); ``atol`` is relative to the largest
#: magnitude of the CPU values (at least 1).
AGREE = {
    torch.float64: {"rtol": 1e-9, "atol": 1e-9},
    torch.float32: {"rtol": 1e-4, "atol": 1e-5},
    torch.float16: {"rtol": 1e-2, "atol": 1e-2},
    torch.bfloat16: {"rtol": 5e-2, "atol": 5e-2},
}

#: Estimators that the docs (hg.expectation) declare eager-only: they call
#: torch.autograd.grad, which torch.compile(fullgraph=True) cannot trace.
EAGER_ONLY = frozenset({"rebar", "relax"})


def dists_of(name: str) -> tuple[str, ...]:
    """The distributions the registered estimator ``name`` is defined for."""
    return tuple(getattr(ESTIMATORS.get(name), "dists", BOTH))


def device_generator(device: torch.device, seed: int = SEED) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def cpu_generator(seed: int = SEED) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def decoy_generator() -> torch.Generator:
    """The generator handed to a CPU run that replays a device run's noise
    (:func:`noise_from`): seeded differently, so a draw that escaped the replay shows."""
    return cpu_generator(SEED + 1)


def on(t: Tensor, device: torch.device) -> bool:
    """Whether ``t`` lives on ``device`` (``cuda`` means any index, ``cuda:1`` that one)."""
    return t.device.type == device.type and (device.index is None or t.device.index == device.index)


def opmath(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in HALF else dtype


# --------------------------------------------------------------------------------------
# The checks every test shares.
# --------------------------------------------------------------------------------------

Results = dict[str, tuple[Tensor | None, torch.dtype]]


def check_results(first: Results, second: Results, device: torch.device) -> None:
    """Every entry of a device run is present, on ``device``, of its expected dtype and
    finite; a second run from the same seed gives bit-identical entries."""
    assert first.keys() == second.keys()
    for key, (tensor, dtype) in first.items():
        assert tensor is not None, f"{key} is None"
        assert on(tensor, device), f"{key} is on {tensor.device}, expected {device}"
        assert tensor.dtype == dtype, f"{key} has dtype {tensor.dtype}, expected {dtype}"
        if tensor.is_floating_point():
            assert torch.isfinite(tensor).all(), f"{key} is not finite: {tensor}"
        again = second[key][0]
        assert again is not None and torch.equal(tensor, again), f"{key} differs between runs"


def coarser(*dtypes: torch.dtype) -> torch.dtype:
    """The dtype of least precision among ``dtypes`` (the largest machine epsilon)."""
    return max(dtypes, key=lambda d: torch.finfo(d).eps)


def assert_agree(actual: Tensor, expected: Tensor, dtype: torch.dtype, what: str) -> None:
    """A device result (moved to the CPU) against the CPU's, within :data:`AGREE` for
    ``dtype`` or for the result's own dtype, whichever is coarser (a float32 parameter's
    gradient in a float64 run is float32)."""
    assert actual.shape == expected.shape, (what, actual.shape, expected.shape)
    if not actual.is_floating_point():
        assert torch.equal(actual.cpu(), expected), f"{what}: device and CPU disagree"
        return
    tolerance = AGREE[coarser(dtype, actual.dtype)]
    scale = max(1.0, float(expected.double().abs().max())) if expected.numel() else 1.0
    torch.testing.assert_close(
        actual.cpu().double(),
        expected.double(),
        rtol=tolerance["rtol"],
        atol=tolerance["atol"] * scale,
        msg=lambda m: f"{what}: device and CPU disagree: {m}",
    )


def assert_bitwise(actual: Tensor, expected: Tensor, what: str) -> None:
    """Bit-identical values (device result moved to the CPU), NaN-free inputs."""
    actual = actual.cpu()
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, what
    if not torch.equal(actual, expected):
        bad = (actual != expected).nonzero()[:4].tolist()
        raise AssertionError(f"{what}: device and CPU differ at {bad}")


class _CPUTensorWatch(TorchDispatchMode):
    """Records every aten op that has a CPU tensor among its inputs or outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        tensors = [t for t in tree_leaves((args, kwargs, out)) if isinstance(t, Tensor)]
        cpu = [tuple(t.shape) for t in tensors if t.device.type == "cpu"]
        if cpu and len(self.found) < 20:
            devices = sorted({str(t.device) for t in tensors})
            self.found.append(f"{func}: CPU tensors of shapes {cpu} (devices {devices})")
        return out


@contextlib.contextmanager
def no_hidden_cpu_tensors(device: torch.device) -> Iterator[None]:
    """Fail if any op inside the block touches a CPU tensor (a CPU scalar mixed into a
    device computation, noise drawn on the CPU, a parameter left behind). Off when
    ``device`` is the CPU."""
    if device.type == "cpu":
        yield
        return
    watch = _CPUTensorWatch()
    with watch:
        yield
    assert not watch.found, (
        "CPU tensors in a computation on " + str(device) + ":\n" + "\n".join(watch.found)
    )


@contextlib.contextmanager
def noise_from(device: torch.device, seed: int = SEED) -> Iterator[list[int]]:
    """Inside the block, every uniform draw hardgrad makes comes from a generator on
    ``device`` seeded ``seed`` (whatever generator the caller passed) and is moved to the
    tensor's own device: a CPU run then sees the noise a device run drew from a
    ``torch.Generator(device=device).manual_seed(seed)``. Yields a list that grows by one
    per draw."""
    original = estimator_base.uniform
    source = torch.Generator(device=device).manual_seed(seed)
    calls: list[int] = []

    def replay(
        like: Tensor, generator: torch.Generator | None, shape: tuple[int, ...] | None = None
    ) -> Tensor:
        calls.append(1)
        return original(like.detach().to(device), source, shape).to(like.device)

    modules = [
        module
        for name, module in list(sys.modules.items())
        if (name == "hardgrad" or name.startswith("hardgrad."))
        and getattr(module, "uniform", None) is original
    ]
    assert estimator_base in modules
    with pytest.MonkeyPatch.context() as patch:
        for module in modules:
            patch.setattr(module, "uniform", replay)
        yield calls


def test_hidden_cpu_tensor_check_catches_a_cpu_scalar(cuda_device) -> None:
    """The watch flags a 0-dim CPU tensor mixed into a computation on another device (the
    meta device stands in for CUDA: such a mix runs silently there too), and stays quiet
    for Python scalars and tensors made on that device. (It takes ``cuda_device`` only to
    run wherever this file's tests run.)"""
    meta = torch.device("meta")
    x = torch.zeros(3, device=meta)
    with pytest.raises(AssertionError, match=r"aten\.mul\.Tensor"), no_hidden_cpu_tensors(meta):
        _ = x * torch.tensor(2.0)
    with no_hidden_cpu_tensors(meta):
        _ = x * 2.0 + torch.tensor(1.5, device=meta)


# --------------------------------------------------------------------------------------
# Objectives: small, non-separable, accepting relaxed inputs (REBAR / RELAX), with their
# own parameters (a decoder), float64 values rounded once to the test's dtype.
# --------------------------------------------------------------------------------------


class BitObjective(nn.Module):
    """Bernoulli logits ``(3, 4)``: ``(n, 3, 4) -> (n, 3)``, one value per row."""

    shape = (3, 4)

    def __init__(self) -> None:
        super().__init__()
        g = cpu_generator(11)
        self.w = nn.Parameter(torch.randn(3, 4, generator=g, dtype=torch.float64))
        self.c = nn.Parameter(torch.tensor([0.2, -0.1, 0.3], dtype=torch.float64))

    def forward(self, b: Tensor) -> Tensor:
        b0, b1, b2, b3 = b.unbind(-1)
        linear = (b * self.w).sum(-1) + self.c
        return torch.tanh(linear) * (1 + b1) + 1.5 * b0 * b1 * b2 - 0.8 * (b0 - b3) ** 2


class OneHotObjective(nn.Module):
    """Categorical logits ``(3, 2, 4)`` (two 4-way variables per row, category axis last):
    ``(n, 3, 2, 4) -> (n, 3)``."""

    shape = (3, 2, 4)

    def __init__(self) -> None:
        super().__init__()
        g = cpu_generator(12)
        self.register_buffer("a", torch.randn(4, 4, generator=g, dtype=torch.float64))
        self.w = nn.Parameter(torch.randn(3, 2, 4, generator=g, dtype=torch.float64))
        self.c = nn.Parameter(torch.tensor([-0.3, 0.1, 0.4], dtype=torch.float64))

    def forward(self, d: Tensor) -> Tensor:
        d0, d1 = d.unbind(-2)
        interaction = (d0.unsqueeze(-1) * self.a * d1.unsqueeze(-2)).sum((-2, -1))
        linear = (d * self.w).sum((-2, -1)) + self.c
        return interaction + torch.tanh(linear) * (1 + d0[..., 0])


OBJECTIVES: dict[str, type[BitObjective] | type[OneHotObjective]] = {
    "bernoulli": BitObjective,
    "categorical": OneHotObjective,
}
UPSTREAM = torch.tensor([1.0, -0.5, 2.0], dtype=torch.float64)


def base_logits(dist: str) -> Tensor:
    shape = OBJECTIVES[dist].shape
    return torch.randn(shape, generator=cpu_generator(13), dtype=torch.float64) * 1.5


def control_net(dist: str) -> nn.Module:
    """RELAX's network ``r``: ``z (n, *logits.shape) -> (n, 3)``, fixed initial weights."""
    layers: list[nn.Module] = [] if dist == "bernoulli" else [nn.Flatten(-2)]
    width = 4 if dist == "bernoulli" else 8
    layers += [nn.Linear(width, 8), nn.Tanh(), nn.Linear(8, 1), nn.Flatten(-2)]
    net = nn.Sequential(*layers)
    g = cpu_generator(14)
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return net


@dataclasses.dataclass(frozen=True)
class Case:
    """An estimator to run: a registry entry or a variant of one."""

    id: str
    name: str
    make: Callable[[str, torch.dtype], Estimator]


def _registry_entry(name: str) -> Callable[[str, torch.dtype], Estimator]:
    def make(dist: str, dtype: torch.dtype) -> Estimator:
        estimator: Estimator = ESTIMATORS.get(name)()  # a fresh instance: state is per run
        return estimator

    return make


def _relax_with_net(dist: str, dtype: torch.dtype) -> Estimator:
    # r receives z in the estimators' working dtype: float32 for half-precision logits.
    return RELAX(control_net(dist).to(opmath(dtype)))


CASES = [Case(name, name, _registry_entry(name)) for name in NAMES] + [
    Case("reinforce-ema", "reinforce", lambda d, t: Reinforce(baseline="ema", decay=0.5)),
    Case("reinforce-optimal", "reinforce", lambda d, t: Reinforce(baseline="optimal")),
    Case("relax-net", "relax", _relax_with_net),
]
CASE_DIST = [
    pytest.param(case, dist, id=f"{case.id}-{dist}")
    for case in CASES
    for dist in dists_of(case.name)
]


def run_expectation(
    case: Case, dist: str, dtype: torch.dtype, device: torch.device, generator: torch.Generator
) -> Results:
    """One ``hg.expectation`` call and its backward; every tensor worth checking."""
    objective = OBJECTIVES[dist]().to(device=device, dtype=dtype)
    estimator = case.make(dist, dtype)
    if isinstance(estimator, nn.Module):
        estimator.to(device)
    logits = base_logits(dist).to(device=device, dtype=dtype).requires_grad_()
    upstream = UPSTREAM.to(device=device, dtype=dtype)
    num_samples = None if case.name == "exact" else 4
    with no_hidden_cpu_tensors(device):
        value = hg.expectation(
            objective,
            logits,
            dist=dist,
            estimator=estimator,
            num_samples=num_samples,
            generator=generator,
        )
        (value * upstream).sum().backward()
    results: Results = {"value": (value.detach(), dtype), "logits.grad": (logits.grad, dtype)}
    for name, p in objective.named_parameters():
        results[f"f.{name}.grad"] = (p.grad, dtype)
    if isinstance(estimator, nn.Module):
        for name, p in estimator.named_parameters():
            results[f"estimator.{name}"] = (p.detach(), p.dtype)
            results[f"estimator.{name}.grad"] = (p.grad, p.dtype)
        for name, b in estimator.named_buffers():
            results[f"estimator.{name}"] = (b, b.dtype)
    return results


# --------------------------------------------------------------------------------------
# 1. Every estimator through hg.expectation.
# --------------------------------------------------------------------------------------


def test_every_registered_estimator_is_covered(cuda_device) -> None:
    """The cases cover every registry entry (``cuda_device``: runs with this file)."""
    assert {case.name for case in CASES} == set(NAMES)
    assert set(NAMES) >= EAGER_ONLY


@pytest.mark.parametrize(("case", "dist"), CASE_DIST)
def test_expectation_on_device(case: Case, dist: str, dtype: torch.dtype, cuda_device) -> None:
    """Value, logits gradient, ``f``'s parameter gradients and the estimator's own state
    and parameter gradients (REBAR, RELAX, the EMA baseline): on the device, in dtype,
    finite, reproducible from the seed, and equal to the CPU's given the same noise."""
    first = run_expectation(case, dist, dtype, cuda_device, device_generator(cuda_device))
    second = run_expectation(case, dist, dtype, cuda_device, device_generator(cuda_device))
    check_results(first, second, cuda_device)
    grad = first["logits.grad"][0]
    assert grad is not None and bool(grad.abs().sum() > 0), "the logits got a zero gradient"
    if case.id == "reinforce-ema":
        assert int(first["estimator.steps"][0]) == 1
    with noise_from(cuda_device) as draws:
        cpu = run_expectation(case, dist, dtype, torch.device("cpu"), decoy_generator())
    assert (len(draws) == 0) == (case.name == "exact")
    for key, (tensor, _) in first.items():
        expected = cpu[key][0]
        assert tensor is not None and expected is not None
        if key.startswith("estimator.") and key.endswith(".grad") and dtype in HALF:
            # The variance gradient is a product of differences of half-precision values
            # of f: checked on the device above, not compared to the CPU's rounding.
            continue
        assert_agree(tensor, expected, dtype, key)


# --------------------------------------------------------------------------------------
# 2. hg.expectation under torch.compile(fullgraph=True).
# --------------------------------------------------------------------------------------

COMPILED_NAMES = [n for n in NAMES if n not in EAGER_ONLY]


@pytest.fixture
def fresh_dynamo() -> Iterator[None]:
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.compile
@pytest.mark.slow
def test_expectation_under_torch_compile(cuda_device, fresh_dynamo) -> None:
    """``hg.expectation`` under ``torch.compile(fullgraph=True)``, one graph per call, with
    every estimator the docs declare compilable (all but REBAR and RELAX), Bernoulli and, where
    defined, categorical, plus ``Reinforce(baseline="ema")``, with ``generator=None``
    (dynamo cannot take a generator). On the device, with inductor's ``fallback_random``
    (eager's random numbers), values and gradients equal eager's from the same
    ``torch.manual_seed`` (float32), are finite and stay on the device, and the moving
    average is updated alike."""
    device = cuda_device
    dtype = torch.float32
    bits = BitObjective().to(device=device, dtype=dtype)
    onehot = OneHotObjective().to(device=device, dtype=dtype)
    upstream = UPSTREAM.to(device=device, dtype=dtype)
    bernoulli_names = COMPILED_NAMES
    categorical_names = [n for n in COMPILED_NAMES if "categorical" in dists_of(n)]

    x0 = base_logits("bernoulli").to(device=device, dtype=dtype)
    y0 = base_logits("categorical").to(device=device, dtype=dtype)
    x0 = x0.expand(len(bernoulli_names) + 1, *x0.shape)
    y0 = y0.expand(len(categorical_names), *y0.shape)

    def run(compiled: bool) -> tuple[list[Tensor], Tensor, Tensor, Reinforce]:
        ema = Reinforce(baseline="ema", decay=0.5).to(device)
        x, y = x0.clone().requires_grad_(), y0.clone().requires_grad_()
        calls: list[tuple[Callable[..., Tensor], Tensor, int]] = []
        for i, name in enumerate(bernoulli_names):
            n = None if name == "exact" else 2
            call = functools.partial(hg.expectation, bits, estimator=name, num_samples=n)
            calls.append((call, x, i))
        ema_call = functools.partial(hg.expectation, bits, estimator=ema, num_samples=2)
        calls.append((ema_call, x, len(bernoulli_names)))
        for i, name in enumerate(categorical_names):
            n = None if name == "exact" else 2
            call = functools.partial(
                hg.expectation, onehot, dist="categorical", estimator=name, num_samples=n
            )
            calls.append((call, y, i))
        # One graph per call: inductor may reorder the random draws of independent calls
        # within one graph (seen on CUDA), so each graph holds one call's draws, and the
        # calls draw from the global generator in program order, as in eager mode.
        torch.manual_seed(5)
        values = []
        for call, leaf, i in calls:

            def fn(t: Tensor, call: Callable[..., Tensor] = call, i: int = i) -> Tensor:
                return call(t[i])

            if compiled:
                torch._dynamo.reset()
                with torch._inductor.config.patch(fallback_random=True):
                    values.append(torch.compile(fn, fullgraph=True)(leaf))
            else:
                values.append(fn(leaf))
        sum((v * upstream).sum() for v in values).backward()  # type: ignore[union-attr]
        assert x.grad is not None and y.grad is not None
        return [v.detach() for v in values], x.grad, y.grad, ema

    eager_values, eager_x, eager_y, eager_ema = run(compiled=False)
    values, grad_x, grad_y, ema = run(compiled=True)
    bernoulli_labels = [f"{n}-bernoulli" for n in bernoulli_names] + ["reinforce-ema-bernoulli"]
    categorical_labels = [f"{n}-categorical" for n in categorical_names]
    labels = bernoulli_labels + categorical_labels
    for label, got, expected in zip(labels, values, eager_values, strict=True):
        assert on(got, device) and got.dtype == dtype, label
        assert torch.isfinite(got).all(), label
        assert_agree(got, expected.cpu(), dtype, f"{label} value")
    for got, expected, names in (
        (grad_x, eager_x, bernoulli_labels),
        (grad_y, eager_y, categorical_labels),
    ):
        assert on(got, device) and got.dtype == dtype
        assert torch.isfinite(got).all()
        for i, label in enumerate(names):
            assert bool(got[i].abs().sum() > 0), f"{label}: zero gradient"
            assert_agree(got[i], expected[i].cpu(), dtype, f"{label} gradient")
    assert int(ema.steps) == int(eager_ema.steps) == 1
    assert on(ema.ema, device)
    assert_agree(ema.ema, eager_ema.ema.cpu(), dtype, "ema")


# --------------------------------------------------------------------------------------
# 3. hg.quantize with a learned scale and zero point (LSQ gradients).
# --------------------------------------------------------------------------------------


def _quantize_inputs(layout: str) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    g = cpu_generator(21)
    x = torch.randn(4, 6, generator=g, dtype=torch.float64) * 0.6
    x[0, :4] = torch.tensor([3.0, -3.0, 0.0, 1e3])  # saturating on both sides, zero, large
    if layout == "per_tensor":
        scale, zero_point = torch.tensor(0.1, dtype=torch.float64), torch.tensor(1.0)
    else:
        scale = torch.rand(4, 1, generator=g, dtype=torch.float64) * 0.1 + 0.05
        zero_point = torch.tensor([[0.0], [1.0], [-2.0], [3.0]])
    upstream = torch.randn(4, 6, generator=g, dtype=torch.float64)
    return x, scale, zero_point.double(), upstream


def run_quantize(layout: str, dtype: torch.dtype, device: torch.device) -> Results:
    x0, s0, z0, g0 = _quantize_inputs(layout)
    x = x0.to(device=device, dtype=dtype).requires_grad_()
    scale = s0.to(device=device, dtype=dtype).requires_grad_()
    zero_point = z0.to(device=device, dtype=dtype).requires_grad_()
    upstream = g0.to(device=device, dtype=dtype)
    with no_hidden_cpu_tensors(device):
        y = hg.quantize(x, scale, zero_point, quant_min=-8, quant_max=7, grad_scale=0.5)
        y.backward(upstream)
    return {
        "y": (y.detach(), dtype),
        "x.grad": (x.grad, dtype),
        "scale.grad": (scale.grad, dtype),
        "zero_point.grad": (zero_point.grad, dtype),
    }


@pytest.mark.parametrize("layout", ["per_tensor", "per_channel"])
def test_quantize_learned_scale_and_zero_point(
    layout: str, dtype: torch.dtype, cuda_device
) -> None:
    """Forward and the input's (masked) gradient bit-identical to the CPU's; the LSQ
    gradients of the scale and zero point on the device, in dtype, nonzero, and equal to
    the CPU's up to summation order; in float32 per-tensor the forward equals
    ``torch.fake_quantize_per_tensor_affine`` on the device."""
    first = run_quantize(layout, dtype, cuda_device)
    check_results(first, run_quantize(layout, dtype, cuda_device), cuda_device)
    cpu = run_quantize(layout, dtype, torch.device("cpu"))
    for key in ("y", "x.grad"):
        tensor = first[key][0]
        assert tensor is not None and cpu[key][0] is not None
        assert_bitwise(tensor, cpu[key][0], key)
    for key in ("scale.grad", "zero_point.grad"):
        tensor, expected = first[key][0], cpu[key][0]
        assert tensor is not None and expected is not None
        assert bool(tensor.abs().sum() > 0), f"{key} is zero"
        assert_agree(tensor, expected, dtype, key)
    if layout == "per_tensor" and dtype == torch.float32:
        x0, s0, z0, _ = _quantize_inputs(layout)
        reference = torch.fake_quantize_per_tensor_affine(
            x0.float().to(cuda_device),
            s0.float().to(cuda_device),
            z0.int().to(cuda_device),
            -8,
            7,
        )
        y = first["y"][0]
        assert y is not None and torch.equal(y, reference)


# --------------------------------------------------------------------------------------
# 4. hg.straight_through.
# --------------------------------------------------------------------------------------


def _step(x: Tensor) -> Tensor:
    return (x > 0).to(x.dtype)


def _one_hot_argmax(x: Tensor) -> Tensor:
    return torch.zeros_like(x).scatter(-1, x.argmax(-1, keepdim=True), 1.0)


STRAIGHT_THROUGH: dict[str, tuple[Callable[[Tensor], Tensor], Any]] = {
    "round-identity": (torch.round, None),
    "sign-tanh": (torch.sign, "tanh"),
    "step-sigmoid": (_step, hg.surrogates.Sigmoid(slope=4.0)),
    "floor-sin": (torch.floor, torch.sin),
    "argmax-softmax": (_one_hot_argmax, lambda x: torch.softmax(x, -1)),
}


def run_straight_through(key: str, dtype: torch.dtype, device: torch.device) -> Results:
    hard, soft = STRAIGHT_THROUGH[key]
    g = cpu_generator(31)
    x0 = torch.randn(4, 6, generator=g, dtype=torch.float64) * 2
    x0[0, :4] = torch.tensor([0.0, -0.0, 300.0, -1e3])  # zeros and large magnitudes
    x0[1, :2] = torch.tensor([0.5, -2.5])  # ties for round
    upstream = torch.randn(4, 6, generator=g, dtype=torch.float64).to(device=device, dtype=dtype)
    x = x0.to(device=device, dtype=dtype).requires_grad_()
    op = hg.straight_through(hard, soft)
    with no_hidden_cpu_tensors(device):
        y = op(x)
        y.backward(upstream)
    with torch.no_grad():
        assert_bitwise(y.detach(), hard(x.detach()).cpu(), f"{key}: forward vs hard(x)")
    return {"y": (y.detach(), dtype), "x.grad": (x.grad, dtype)}


@pytest.mark.parametrize("key", list(STRAIGHT_THROUGH))
def test_straight_through(key: str, dtype: torch.dtype, cuda_device) -> None:
    """The forward is ``hard(x)`` bit for bit on the device (zeros, ties and large values
    included) and equal to the CPU's; the gradient (identity, a surrogate, a callable's
    full vector-Jacobian product) is on the device, in dtype, finite and the CPU's."""
    first = run_straight_through(key, dtype, cuda_device)
    check_results(first, run_straight_through(key, dtype, cuda_device), cuda_device)
    cpu = run_straight_through(key, dtype, torch.device("cpu"))
    y, grad = first["y"][0], first["x.grad"][0]
    assert y is not None and grad is not None and cpu["y"][0] is not None
    assert_bitwise(y, cpu["y"][0], "forward")
    assert cpu["x.grad"][0] is not None
    assert_agree(grad, cpu["x.grad"][0], dtype, "gradient")


# --------------------------------------------------------------------------------------
# 4b. Sorting and solvers (deterministic ones: the relaxed backwards and blackbox).
# --------------------------------------------------------------------------------------


def _top2(theta: Tensor) -> Tensor:
    return torch.zeros_like(theta).scatter(-1, theta.topk(2, -1).indices, 1.0)


STRUCTURED: dict[str, Callable[[Tensor], Tensor]] = {
    "sort": lambda x: hg.sort(x, strength=0.7),
    "rank/neuralsort": lambda x: hg.rank(x, backward="neuralsort", strength=0.7),
    "soft_sort": lambda x: hg.soft_sort(x, strength=0.7),
    "soft_rank/kl": lambda x: hg.soft_rank(x, strength=0.7, regularization="kl"),
    "blackbox": lambda x: hg.blackbox(_top2, lam=2.0)(x),
}


def run_structured(key: str, n: int, dtype: torch.dtype, device: torch.device) -> Results:
    g = cpu_generator(47)
    x0 = torch.randn(3, n, generator=g, dtype=torch.float64) * 2
    upstream = torch.randn(3, n, generator=g, dtype=torch.float64).to(device=device, dtype=dtype)
    x = x0.to(device=device, dtype=dtype).requires_grad_()
    with no_hidden_cpu_tensors(device):
        y = STRUCTURED[key](x)
        y.backward(upstream)
    return {"y": (y.detach(), dtype), "x.grad": (x.grad, dtype)}


# n = 300: the soft sorts pool blocks by PAV (hardgrad.sorting._isotonic)
@pytest.mark.parametrize("n", [6, 300])
@pytest.mark.parametrize("key", list(STRUCTURED))
def test_sorting_and_solvers(key: str, n: int, dtype: torch.dtype, cuda_device) -> None:
    """Values and gradients on the device, in dtype, finite, reproducible and the CPU's
    (the PAV operator copies to the CPU inside itself: the watch sees only the operator)."""
    first = run_structured(key, n, dtype, cuda_device)
    check_results(first, run_structured(key, n, dtype, cuda_device), cuda_device)
    cpu = run_structured(key, n, dtype, torch.device("cpu"))
    for name in first:
        got, expected = first[name][0], cpu[name][0]
        assert got is not None and expected is not None
        assert_agree(got, expected, dtype, f"{key}: {name}")


# --------------------------------------------------------------------------------------
# 5. The units of Bengio et al. (2013).
# --------------------------------------------------------------------------------------


def _unit_inputs() -> tuple[Tensor, Tensor]:
    g = cpu_generator(41)
    a = torch.randn(5, 7, generator=g, dtype=torch.float64) * 2
    a[0, :3] = torch.tensor([-60.0, 0.0, 60.0])
    return a, torch.randn(5, 7, generator=g, dtype=torch.float64)


def run_sts(dtype: torch.dtype, device: torch.device, generator: torch.Generator) -> Results:
    a0, g0 = _unit_inputs()
    a = a0.to(device=device, dtype=dtype).requires_grad_()
    upstream = g0.to(device=device, dtype=dtype)
    with no_hidden_cpu_tensors(device):
        h = hg.stochastic_times_smooth(a, generator=generator)
        h.backward(upstream)
    return {"h": (h.detach(), dtype), "a.grad": (a.grad, dtype)}


def test_stochastic_times_smooth(dtype: torch.dtype, cuda_device) -> None:
    """On the device, in dtype, finite, reproducible; every entry 0 or
    ``sqrt(sigmoid(a))``, with both present; equal to the CPU's given the same noise."""
    first = run_sts(dtype, cuda_device, device_generator(cuda_device))
    check_results(first, run_sts(dtype, cuda_device, device_generator(cuda_device)), cuda_device)
    h = first["h"][0]
    assert h is not None
    a0, _ = _unit_inputs()
    smooth = torch.sigmoid(a0).sqrt().to(dtype)
    on_ = h.cpu() != 0
    assert on_.any() and (~on_).any()
    assert_agree(h.cpu()[on_], smooth[on_], dtype, "h where the gate is open")
    with noise_from(cuda_device) as draws:
        cpu = run_sts(dtype, torch.device("cpu"), decoy_generator())
    assert draws
    for key in first:
        tensor, expected = first[key][0], cpu[key][0]
        assert tensor is not None and expected is not None
        assert_agree(tensor, expected, dtype, key)


def run_noisy_rectifier(
    dtype: torch.dtype, device: torch.device, generator: torch.Generator
) -> Results:
    x0, g0 = _unit_inputs()
    x = x0.to(device=device, dtype=dtype).requires_grad_()
    upstream = g0.to(device=device, dtype=dtype)
    with no_hidden_cpu_tensors(device):
        h = hg.noisy_rectifier(x, sigma=0.7, generator=generator)
        h.backward(upstream)
    return {"h": (h.detach(), dtype), "x.grad": (x.grad, dtype)}


def test_noisy_rectifier(dtype: torch.dtype, cuda_device) -> None:
    """On the device, in dtype, finite, reproducible; equal to the documented
    ``relu(x + sigma z)`` with ``z`` the generator's standard normal draw (in float32 for
    half types), on the device and on the CPU; the gradient is the upstream gradient
    where ``h > 0`` and 0 elsewhere, exactly."""
    first = run_noisy_rectifier(dtype, cuda_device, device_generator(cuda_device))
    second = run_noisy_rectifier(dtype, cuda_device, device_generator(cuda_device))
    check_results(first, second, cuda_device)
    h, grad = first["h"][0], first["x.grad"][0]
    assert h is not None and grad is not None
    x0, g0 = _unit_inputs()
    noise_dtype = opmath(dtype)
    z = torch.randn(
        x0.shape, generator=device_generator(cuda_device), dtype=noise_dtype, device=cuda_device
    )
    x = x0.to(dtype)
    expected_device = torch.relu(x.to(cuda_device).to(noise_dtype) + 0.7 * z).to(dtype)
    assert torch.equal(h, expected_device)
    expected_cpu = torch.relu(x.to(noise_dtype) + 0.7 * z.cpu()).to(dtype)
    assert_bitwise(h, expected_cpu, "h against the CPU")
    assert (h > 0).any() and (h == 0).any()
    assert_bitwise(grad, torch.where(expected_cpu > 0, g0.to(dtype), 0), "gradient")


# --------------------------------------------------------------------------------------
# 6. Every hardgrad.nn module.
# --------------------------------------------------------------------------------------

SCHEDULE = hg.nn.anneal(1.0, 0.25, 4)


class _InDtype(nn.Module):
    """A layer with weights (6 to 6 features), or LIF (two steps: spikes plus membrane), run
    in the input's dtype on a ``(4, 6)`` input (as ``(4, 6, 1, 1)`` images for a convolution)."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.inner.to(x.dtype)
        if isinstance(self.inner, hg.nn.LIF):
            spk, mem = self.inner(x)
            spk, mem = self.inner(x, mem)
            return spk + mem
        if isinstance(self.inner, nn.Conv2d):
            return self.inner(x.reshape(4, 6, 1, 1)).reshape(4, -1)
        out: torch.Tensor = self.inner(x)
        return out


#: Factories ``(generator) -> module``; the key before "-" is the class name.
MODULES: dict[str, Callable[[torch.Generator], nn.Module]] = {
    "Round": lambda g: hg.nn.Round(),
    "Sign": lambda g: hg.nn.Sign(surrogate="tanh"),
    "Binarize": lambda g: hg.nn.Binarize(),
    "Heaviside": lambda g: hg.nn.Heaviside(surrogate=hg.surrogates.ATan(alpha=4.0)),
    "Clamp": lambda g: hg.nn.Clamp(-0.5, 0.75),
    "OneHotArgmax": lambda g: hg.nn.OneHotArgmax(tau=0.5),
    "Quantize-learned": lambda g: hg.nn.Quantize(bits=4),
    "Quantize-per-channel": lambda g: hg.nn.Quantize(bits=4, per_channel_dim=0),
    "Quantize-fixed": lambda g: hg.nn.Quantize(bits=8, learn_scale=False),
    "PACT": lambda g: hg.nn.PACT(bits=3, alpha=1.5),
    "PACT-fixed": lambda g: hg.nn.PACT(bits=8, alpha=2.0, learn_alpha=False),
    "Bernoulli-anneal": lambda g: hg.nn.Bernoulli(estimator="st_gumbel", tau=SCHEDULE, generator=g),
    "Categorical": lambda g: hg.nn.Categorical(
        estimator=hg.estimators.GumbelRao(k=4), tau=0.5, generator=g
    ),
    "VectorQuantize": lambda g: hg.nn.VectorQuantize(5, 6),
    "VectorQuantize-ema-rotation": lambda g: hg.nn.VectorQuantize(
        5, 6, estimator="rotation", codebook_update="ema"
    ),
    "VectorQuantize-heads": lambda g: hg.nn.VectorQuantize(
        5, 6, heads=2, separate_codebook_per_head=True, codebook_update="ema"
    ),
    "ResidualVQ": lambda g: hg.nn.ResidualVQ(3, 5, 6, estimator="rotation", codebook_dim=4),
    "FSQ": lambda g: hg.nn.FSQ([3, 5, 4, 2, 2, 3]),
    "FSQ-symmetric": lambda g: hg.nn.FSQ([3, 5, 4, 2, 2, 3], preserve_symmetry=True),
    "LFQ": lambda g: hg.nn.LFQ(6),
    "MoE": lambda g: hg.nn.MoE(6, num_experts=4, k=2),
    "MoE-dense": lambda g: hg.nn.MoE(6, num_experts=4, k=2, estimator="dense"),
    "MoE-default": lambda g: hg.nn.MoE(6, num_experts=4, k=2, estimator="default"),
    "HardConcreteGate": lambda g: hg.nn.HardConcreteGate(6, generator=g),
    "L0Linear": lambda g: _InDtype(hg.nn.L0Linear(6, 6, generator=g)),
    "L0Linear-local": lambda g: _InDtype(hg.nn.L0Linear(6, 6, local_rep=True, generator=g)),
    "L0Conv2d": lambda g: _InDtype(hg.nn.L0Conv2d(6, 6, 1, generator=g)),
    "LIF": lambda g: _InDtype(hg.nn.LIF(torch.full((6,), 0.75), 0.5, learn_beta=True)),
    "LIF-zero-reset": lambda g: _InDtype(hg.nn.LIF(0.9, 0.25, reset="zero", surrogate="atan")),
    "BinaryLinear": lambda g: _InDtype(hg.nn.BinaryLinear(6, 6, scale=True, activations=True)),
    "BinaryLinear-ternary": lambda g: _InDtype(hg.nn.BinaryLinear(6, 6, weights="ternary")),
    # +-1 weights and inputs: exact sums, also where cuDNN computes float32 in TF32.
    "BinaryConv2d": lambda g: _InDtype(hg.nn.BinaryConv2d(6, 6, 1, bias=False, activations=True)),
    "QuantLinear": lambda g: _InDtype(hg.nn.QuantLinear(6, 6, weight_bits=4, act_bits=8)),
    "QuantConv2d": lambda g: _InDtype(hg.nn.QuantConv2d(6, 6, 1, weight_bits=3, act_bits=6)),
}
#: Modules whose forward returns ``(z_q, indices, ...)`` with an optional scalar loss last
#: (the backward takes ``upstream`` into ``z_q`` and 1 into the loss).
TUPLE_OUTPUT = {"VectorQuantize", "ResidualVQ", "FSQ", "LFQ", "MoE"}
#: Stateless modules that copy small constants to the device on their first call, once
#: per device and dtype (FSQ's per-channel bounds, offsets and radix).
MAKES_CONSTANTS_ONCE = {"FSQ"}
#: Modules whose forward is a deterministic function of the input: bit-identical on the
#: CPU. Quantize's scale comes from a mean of the first batch (summation order differs).
EXACT_FORWARD = {"Round", "Sign", "Binarize", "Heaviside", "Clamp", "OneHotArgmax"}


def test_every_nn_module_is_covered(cuda_device) -> None:
    """:data:`MODULES` has a factory for every module class of ``hardgrad.nn``."""
    classes = {
        name
        for name in hg.nn.__all__
        if isinstance(getattr(hg.nn, name), type) and issubclass(getattr(hg.nn, name), nn.Module)
    }
    assert classes == {key.split("-")[0] for key in MODULES}


def run_module(
    key: str, dtype: torch.dtype, device: torch.device, generator: torch.Generator
) -> tuple[nn.Module, Results]:
    torch.manual_seed(SEED)  # VectorQuantize's initial codebook
    module = MODULES[key](generator).to(device)
    g = cpu_generator(51)
    x0 = torch.randn(4, 6, generator=g, dtype=torch.float64)
    x0[0, :3] = torch.tensor([0.0, 0.5, -0.5])  # at the step, and a rounding tie
    x = x0.to(device=device, dtype=dtype).requires_grad_()
    upstream = torch.randn(4, 6, generator=g, dtype=torch.float64).to(device=device, dtype=dtype)
    if key.split("-")[0] in MAKES_CONSTANTS_ONCE:
        module(x.detach())  # outside the watch: the one-time copy of its constants
    with no_hidden_cpu_tensors(device):
        out = module(x)
        if key.split("-")[0] in TUPLE_OUTPUT:
            y, indices, *loss = out
            total = (y * upstream).sum() + (loss[0] if loss else 0)
            total.backward()
        else:
            y, indices, loss = out, None, []
            y.backward(upstream)
    results: Results = {"y": (y.detach(), dtype), "x.grad": (x.grad, dtype)}
    if indices is not None:
        results["indices"] = (indices, indices.dtype)
    if loss:
        results["loss"] = (loss[0].detach(), loss[0].dtype)
    for name, p in module.named_parameters():
        results[name] = (p.detach(), p.dtype)
        results[f"{name}.grad"] = (p.grad, p.dtype)
    for name, b in module.named_buffers():
        results[name] = (b, b.dtype)
    return module, results


@pytest.mark.parametrize("key", list(MODULES))
def test_nn_module(key: str, dtype: torch.dtype, cuda_device) -> None:
    """Output, input gradient, and the module's parameters, their gradients (Quantize's
    LSQ scale) and buffers: on the device (the scale initialised from the first batch
    included), in dtype, finite, reproducible from the seed, and equal to the CPU's (the
    stochastic units given the same noise); a temperature schedule advances one step per
    training forward."""
    module, first = run_module(key, dtype, cuda_device, device_generator(cuda_device))
    _, second = run_module(key, dtype, cuda_device, device_generator(cuda_device))
    check_results(first, second, cuda_device)
    if key.startswith("Quantize"):
        assert "scale" in first and bool((first["scale"][0] > 0).all())  # type: ignore[operator]
        if module.learn_scale:  # type: ignore[union-attr]
            grad = first["scale.grad"][0]
            assert grad is not None and bool(grad.abs().sum() > 0)
    if key == "Bernoulli-anneal":
        assert module.step == 1  # type: ignore[union-attr]
        assert module.current_estimator().tau == pytest.approx(SCHEDULE(1))  # type: ignore[operator]
    with noise_from(cuda_device) as draws:
        _, cpu = run_module(key, dtype, torch.device("cpu"), decoy_generator())
    assert bool(draws) == key.startswith(("Bernoulli", "Categorical", "HardConcreteGate", "L0"))
    precision = dtype
    if key.startswith("Quantize"):
        # y = round(x / s) s with s a float32 parameter initialised from a batch mean
        # (summation order differs): in a float64 run, y is as precise as float32.
        precision = coarser(dtype, module.scale.dtype)  # type: ignore[arg-type]
    if key.startswith(("QuantLinear", "QuantConv2d")):
        precision = coarser(dtype, torch.float32)  # float32 scales, as for Quantize
    for name, (tensor, _) in first.items():
        expected = cpu[name][0]
        assert tensor is not None and expected is not None
        if name == "y" and key.split("-")[0] in EXACT_FORWARD | {"Bernoulli", "Categorical"}:
            assert_bitwise(tensor, expected, f"{key} forward")
        else:
            assert_agree(tensor, expected, precision, f"{key} {name}")


# --------------------------------------------------------------------------------------
# 7. Diagnostics.
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("dist", BOTH)
def test_exact_gradient(dist: str, dtype: torch.dtype, cuda_device) -> None:
    """``exact_gradient`` (no noise): on the device, in dtype, finite, reproducible, equal
    to the CPU's."""

    def run(device: torch.device) -> Results:
        objective = OBJECTIVES[dist]().to(device=device, dtype=dtype)
        logits = base_logits(dist).to(device=device, dtype=dtype)
        with no_hidden_cpu_tensors(device):
            gradient = hg.diagnostics.exact_gradient(objective, logits, dist=dist)
        return {"gradient": (gradient, dtype)}

    first = run(cuda_device)
    check_results(first, run(cuda_device), cuda_device)
    gradient, expected = first["gradient"][0], run(torch.device("cpu"))["gradient"][0]
    assert gradient is not None and expected is not None
    assert bool(gradient.abs().min() > 0)
    assert_agree(gradient, expected, dtype, "exact gradient")


SAMPLED = ["disarm", "rloo", "reinforce", "st", "gumbel_rao"]


@pytest.mark.parametrize("name", SAMPLED)
def test_gradient_samples(name: str, dtype: torch.dtype, cuda_device) -> None:
    """``gradient_samples`` with a generator on the device: ``(num_draws, *logits.shape)``
    on the device, in dtype, finite, reproducible, equal to the CPU's given the same
    noise."""

    def run(device: torch.device, generator: torch.Generator) -> Results:
        objective = BitObjective().to(device=device, dtype=dtype)
        logits = base_logits("bernoulli").to(device=device, dtype=dtype)
        with no_hidden_cpu_tensors(device):
            draws = hg.diagnostics.gradient_samples(
                objective, logits, estimator=name, num_draws=32, generator=generator
            )
        return {"draws": (draws, dtype)}

    first = run(cuda_device, device_generator(cuda_device))
    check_results(first, run(cuda_device, device_generator(cuda_device)), cuda_device)
    draws = first["draws"][0]
    assert draws is not None and draws.shape == (32, *BitObjective.shape)
    assert not all(torch.equal(draws[0], d) for d in draws[1:])  # independent draws
    with noise_from(cuda_device):
        expected = run(torch.device("cpu"), decoy_generator())["draws"][0]
    assert expected is not None
    assert_agree(draws, expected, dtype, "draws")


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
def test_compare(dtype: torch.dtype, cuda_device) -> None:
    """``compare`` on the device: the exact gradient it holds is on the device; every
    figure is finite and equal to the CPU's given the same noise (timings aside)."""

    def run(device: torch.device, generator: torch.Generator) -> hg.diagnostics.Comparison:
        objective = BitObjective().to(device=device, dtype=dtype)
        logits = base_logits("bernoulli").to(device=device, dtype=dtype)
        with no_hidden_cpu_tensors(device):
            return hg.diagnostics.compare(
                objective,
                logits,
                estimators=["disarm", "rloo", "st"],
                num_draws=64,
                generator=generator,
            )

    result = run(cuda_device, device_generator(cuda_device))
    again = run(cuda_device, device_generator(cuda_device))
    assert result.exact is not None and on(result.exact, cuda_device)
    assert result.exact.dtype == dtype
    with noise_from(cuda_device):
        cpu = run(torch.device("cpu"), decoy_generator())
    figures = ("bias", "std", "cosine", "snr", "mse")
    rtol = 1e-9 if dtype == torch.float64 else 1e-3
    for row, row_again, row_cpu in zip(result.rows, again.rows, cpu.rows, strict=True):
        assert row.estimator == row_cpu.estimator and row.num_draws == 64
        for figure in figures:
            value = getattr(row, figure)
            assert value is not None and math.isfinite(value), (row.estimator, figure)
            assert value == getattr(row_again, figure), (row.estimator, figure)
            assert value == pytest.approx(getattr(row_cpu, figure), rel=rtol, abs=rtol), (
                row.estimator,
                figure,
            )


PROBED: dict[str, Callable[[Tensor], Tensor]] = {
    "round": hg.round,
    "sign": hg.sign,
    "heaviside": hg.heaviside,
    "clamp": lambda x: hg.clamp(x, 0.0, 1.0),
    "quantize": lambda x: hg.quantize(x, 0.25, quant_min=-4, quant_max=3),
}


@pytest.mark.parametrize("key", list(PROBED))
def test_probe(key: str, cuda_device) -> None:
    """``probe`` of an op that runs on the device reports what it reports on the CPU:
    the same values, autograd derivatives, kinks, jumps and conventions."""
    fn = PROBED[key]
    seen: list[torch.device] = []

    def on_device(x: Tensor) -> Tensor:
        y = fn(x.to(cuda_device))
        seen.append(y.device)
        return y

    points = [-2.0, -1.0, -0.5, 0.0, 0.3, 0.5, 1.0, 1.2]
    report = hg.diagnostics.probe(on_device, points)
    expected = hg.diagnostics.probe(fn, points)
    assert seen and all(d.type == cuda_device.type for d in seen)
    assert len(report.points) == len(expected.points) == len(points)
    for got, ref in zip(report.points, expected.points, strict=True):
        assert (got.point, got.value) == (ref.point, ref.value)
        assert (got.kink, got.jump, got.convention) == (ref.kink, ref.jump, ref.convention)
        assert got.autograd is not None and ref.autograd is not None
        assert got.autograd == pytest.approx(ref.autograd, rel=1e-12, abs=1e-15)
        assert got.left == pytest.approx(ref.left, rel=1e-9, abs=1e-9)
        assert got.right == pytest.approx(ref.right, rel=1e-9, abs=1e-9)


def test_audit(cuda_device) -> None:
    """``audit`` of a model on the device finds what it finds on the CPU (kind, op,
    count), and the model's results are on the device."""

    def train_step(device: torch.device) -> hg.diagnostics.AuditReport:
        model = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 2)).to(device)
        x = torch.randn(5, 4, generator=cpu_generator(61)).to(device)
        with hg.diagnostics.audit() as report:
            h = torch.round(model[0](x))  # zero gradient for model[0]
            y = model[1](h)
            loss = y.square().mean()
            loss.backward()
        assert on(loss, device)
        return report

    found = train_step(cuda_device)
    expected = train_step(torch.device("cpu"))
    assert found.findings
    summary = sorted((f.kind, f.op, f.count) for f in found.findings)
    assert summary == sorted((f.kind, f.op, f.count) for f in expected.findings)
    assert any(f.kind == "zero_gradient" and "round" in f.op for f in found.findings)
