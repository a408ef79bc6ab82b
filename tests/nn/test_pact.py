"""hardgrad.nn.PACT: values against hg.quantize and a float64 reference, the paper's
straight-through gradients (ties, NaN, infinities), the clipping level's bounds, the
tensor path against the host path, transforms, validation, and training."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import hardgrad as hg
from hardgrad.nn import _pact


def _inputs(alpha: float, levels: int, dtype: torch.dtype) -> torch.Tensor:
    """Every region and edge: negatives, 0 and -0.0, the half-step bands of the grid,
    alpha itself and its neighbours in ``dtype``, beyond alpha, NaN and the infinities."""
    step = alpha / levels
    a = torch.tensor(alpha, dtype=dtype)
    near = [
        float(torch.nextafter(a, torch.tensor(-math.inf, dtype=dtype))),
        alpha,
        float(torch.nextafter(a, torch.tensor(math.inf, dtype=dtype))),
    ]
    grid = [(k + d) * step for k in range(levels + 1) for d in (-0.5, -0.25, 0.0, 0.25, 0.5)]
    special = [-5.0, -1e-3, -0.0, 0.0, 1e-30, 2 * alpha, 1e4, math.nan, math.inf, -math.inf]
    return torch.tensor(grid + near + special, dtype=torch.float64).to(dtype)


def _paper_gradients(x: torch.Tensor, alpha: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The masks of eq. 3 in float64: d/dx = [0 <= x < alpha], d/dalpha = [x >= alpha]."""
    wide = x.double()
    return ((wide >= 0) & (wide < alpha)).double(), (wide >= alpha).double()


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
def test_values_are_hg_quantize_after_the_clamp_bit_for_bit(bits, dtype, assert_same):
    """``hg.quantize(hg.clamp(x, 0, a), a / n, quant_min=0, quant_max=n)`` with the level
    in the compute dtype: the same values in every dtype (+0.0 for -0.0 included)."""
    levels = 2**bits - 1
    alpha = 2.7
    x = _inputs(alpha, levels, dtype)
    act = hg.nn.PACT(bits=bits, alpha=alpha)
    y = act(x)
    compute = torch.float64 if dtype == torch.float64 else torch.float32
    a = act.alpha.detach().to(compute)
    expected = hg.quantize(
        torch.clamp(x.to(compute), torch.zeros((), dtype=compute), a),
        a / levels,
        quant_min=0,
        quant_max=levels,
    ).to(dtype)
    assert_same(y.detach(), expected)
    assert (y[x.isnan()]).isnan().all() and not y[~x.isnan()].isnan().any()


def test_values_are_within_half_a_step_of_the_float64_formula(dtype):
    """Against the formula in float64, round(clamp(x, 0, a) * n / a) * a / n: within half a
    step plus the roundings of the dtype (ties may round either way after x/s rounds)."""
    levels, alpha = 15, 3.3
    x = torch.linspace(-2.0, 5.0, 4001, dtype=torch.float64).to(dtype)
    y = hg.nn.PACT(bits=4, alpha=alpha)(x).detach().double()
    a = float(torch.tensor(alpha))  # the float32 parameter
    wide = x.double().clamp(0.0, a)
    reference_level = torch.round(wide * levels / a)
    level = torch.round(y * levels / a)
    # the level: the float64 one except where x/s sits within the dtype's rounding of a tie
    assert ((level - reference_level).abs() <= 1).all()
    assert (level == reference_level).double().mean() > 0.99
    # the value: that level times the step, to the dtype's roundings of s and the product
    eps = torch.finfo(dtype).eps
    assert ((y - level * a / levels).abs() <= 2 * eps * a).all()
    assert ((y - wide).abs() <= 0.5 * a / levels * (1 + 4 * eps) + 2 * eps * a).all()


def test_gradients_are_the_papers_straight_through_estimates(dtype, assert_same):
    """x's gradient: the incoming one where 0 <= x < alpha (x = 0 included, x = alpha
    not); alpha's: the sum where x >= alpha (alpha itself, +inf); NaN in neither."""
    levels, alpha = 3, 3.0
    x0 = _inputs(alpha, levels, dtype)
    g = torch.linspace(0.5, 2.0, x0.numel(), dtype=torch.float64).to(dtype)
    act = hg.nn.PACT(bits=2, alpha=alpha)
    x = x0.clone().requires_grad_()
    grad_x, grad_alpha = torch.autograd.grad(act(x), [x, act.alpha], g)
    keep, above = _paper_gradients(x0, alpha)
    assert_same(grad_x, (g.double() * keep).to(dtype))
    expected = (g.double() * above).sum()
    assert grad_alpha.dtype == torch.float32 and grad_alpha.shape == (1,)  # alpha: (1,)
    assert math.isclose(float(grad_alpha), float(expected), rel_tol=1e-6)
    at = x0 == alpha
    assert at.any() and (grad_x[at] == 0).all() and (above[at] == 1).all()
    assert grad_x[x0 == 0].eq(g[x0 == 0]).all()


@pytest.mark.parametrize("numel", [64, 70_000], ids=["float_masks", "bool_masks"])
def test_tensor_path_is_the_host_path_bit_for_bit(numel, dtype, assert_same, monkeypatch):
    """The forward reads alpha on the host on the CPU (Python numbers in the kernels);
    elsewhere (GPU, compile, transforms) it stays a tensor. Forced onto the tensor path, the
    same output and gradients bit for bit, with float (small) and bool (large) masks."""
    base = _inputs(1.7, 7, dtype)
    x0 = base.repeat(numel // base.numel() + 1)[:numel]
    g = torch.linspace(-1.0, 2.0, numel, dtype=torch.float64).to(dtype)

    def run():
        act = hg.nn.PACT(bits=3, alpha=1.7)
        x = x0.clone().requires_grad_()
        y = act(x)
        return (y, *torch.autograd.grad(y, [x, act.alpha], g))

    host = run()
    with monkeypatch.context() as patch:
        patch.setattr(_pact, "_host_path", lambda x, alpha: False)
        tensor = run()
    for a, b in zip(host, tensor, strict=True):
        assert_same(a.detach(), b.detach())


@pytest.mark.parametrize("alpha", [0.0, -2.0, 1e-45, 3e38, math.inf])
def test_the_clipping_level_is_bounded_and_learns_through_the_bounds(alpha, dtype):
    """An alpha driven to 0, below, to a subnormal, or past the dtype's range: finite
    output (every level finite in the dtype), and alpha's gradient straight through."""
    act = hg.nn.PACT(bits=4, alpha=1.0)
    with torch.no_grad():
        act.alpha.fill_(alpha)
    big = torch.finfo(dtype).max
    x = torch.tensor([-1.0, 0.0, 0.5, 3.0, big, -big], dtype=dtype, requires_grad=True)
    y = act(x)
    assert torch.isfinite(y).all()
    assert (y >= 0).all()
    y.sum().backward()
    assert torch.isfinite(x.grad).all() and torch.isfinite(act.alpha.grad)
    assert act.alpha.grad > 0  # (the largest input clips at every bound)


def test_half_types_compute_in_float32_and_round_once(assert_same):
    x = torch.linspace(-1.0, 4.0, 999)
    act = hg.nn.PACT(bits=5, alpha=3.1)
    wide = act(x).detach()
    for half in (torch.float16, torch.bfloat16):
        xh = x.to(half)
        assert_same(act(xh).detach(), act(xh.float()).detach().to(half))
    assert wide.dtype == torch.float32


def test_matches_the_usual_hand_written_pact_function_off_the_ties():
    """Public PACT code (a Function that clamps at alpha.item(), rounds with n/alpha and
    divides back): the same gradients where no input sits exactly on alpha, and values
    within the one-ulp difference of its formula."""

    class HandWritten(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, alpha, n):
            ctx.save_for_backward(x, alpha)
            scale = n / alpha
            return torch.round(torch.clamp(x, 0.0, alpha.item()) * scale) / scale

        @staticmethod
        def backward(ctx, grad):
            x, alpha = ctx.saved_tensors
            keep = (x >= 0) & (x <= alpha)
            return grad * keep, (grad * (x >= alpha)).sum(), None

    gen = torch.Generator().manual_seed(0)
    x0 = torch.randn(32, 48, generator=gen) * 3
    g = torch.randn(32, 48, generator=gen)
    act = hg.nn.PACT(bits=4, alpha=4.0)
    alpha = act.alpha.detach().reshape(()).clone().requires_grad_()  # stored as (1,)
    assert not (x0 == 4.0).any()
    x, xh = x0.clone().requires_grad_(), x0.clone().requires_grad_()
    y, yh = act(x), HandWritten.apply(xh, alpha, 15)
    torch.autograd.backward([y, yh], [g, g])
    assert torch.allclose(y, yh, rtol=0, atol=4e-7)
    assert torch.equal(x.grad, xh.grad)
    assert torch.allclose(act.alpha.grad, alpha.grad.reshape(1), rtol=1e-6)


def test_one_autograd_node_and_only_the_masks_needed():
    act = hg.nn.PACT(bits=4, alpha=2.0)
    x = torch.randn(8, 8, requires_grad=True)
    y = act(x)
    assert type(y.grad_fn).__name__ == "_PACTBackward"
    assert y.grad_fn.next_functions[0][0] is not None  # x's accumulator
    fixed = hg.nn.PACT(bits=4, alpha=2.0, learn_alpha=False)
    # (The output kept alive: torch 2.11 frees a custom Function's saved tensors when its
    # last output is freed, even while its grad_fn is still referenced; 2.13 keeps them.)
    out = fixed(x)
    saved = out.grad_fn.saved_tensors
    assert saved[1] is None and saved[0] is not None  # (no mask for a fixed alpha)
    with torch.no_grad():
        assert fixed(x).grad_fn is None


def test_forward_mode_vmap_and_func_grad_agree_with_backward(assert_same):
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(5, 7, generator=gen) * 2
    act = hg.nn.PACT(bits=3, alpha=1.5)
    params = dict(act.named_parameters())

    def f(p, v):
        return torch.func.functional_call(act, p, (v,))

    y, jvp_x = torch.func.jvp(lambda v: f(params, v), (x,), (torch.ones_like(x),))
    assert_same(y, act(x).detach())
    xr = x.clone().requires_grad_()
    (gx,) = torch.autograd.grad(act(xr).sum(), xr)
    assert_same(jvp_x, gx)  # (elementwise: the diagonal)
    _, jvp_alpha = torch.func.jvp(
        lambda a: f({"alpha": a}, x), (params["alpha"].detach(),), (torch.ones(1),)
    )
    assert_same(jvp_alpha, (x >= params["alpha"].detach()).float())
    batched = torch.func.vmap(act)(x)
    assert_same(batched, act(x).detach())
    grads = torch.func.grad(lambda p: f(p, x).sum())(params)
    act.zero_grad()
    act(x).sum().backward()
    assert_same(grads["alpha"], act.alpha.grad)
    per_example = torch.func.vmap(torch.func.grad(lambda p, v: f(p, v).sum()), (None, 0))(params, x)
    assert torch.allclose(per_example["alpha"].sum(), act.alpha.grad)


@pytest.mark.compile
def test_compiled_module_is_the_eager_one(assert_same):
    gen = torch.Generator().manual_seed(2)
    x0 = torch.randn(16, 9, generator=gen) * 2
    eager, compiled = hg.nn.PACT(bits=4, alpha=1.2), hg.nn.PACT(bits=4, alpha=1.2)
    run = torch.compile(compiled, fullgraph=True, backend="aot_eager")
    results = []
    for module, call in ((eager, eager), (compiled, run)):
        x = x0.clone().requires_grad_()
        y = call(x)
        y.pow(2).sum().backward()
        results.append((y.detach(), x.grad, module.alpha.grad))
    for a, b in zip(*results, strict=True):
        assert_same(a, b)


def test_bad_settings_and_inputs_raise_naming_the_argument():
    with pytest.raises(TypeError, match="bits"):
        hg.nn.PACT(bits=4.0)
    for bits in (0, 17):
        with pytest.raises(ValueError, match="bits"):
            hg.nn.PACT(bits=bits)
    for alpha in (0.0, -1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="alpha"):
            hg.nn.PACT(alpha=alpha)
    with pytest.raises(TypeError, match="learn_alpha"):
        hg.nn.PACT(learn_alpha=1)
    with pytest.raises(TypeError, match="x"):
        hg.nn.PACT()(torch.arange(4))


def test_state_and_repr():
    act = hg.nn.PACT(bits=3, alpha=6.0, learn_alpha=False)
    assert repr(act) == "PACT(bits=3, learn_alpha=False)"
    assert list(act.parameters()) == [] and set(act.state_dict()) == {"alpha"}
    learned = hg.nn.PACT(bits=3, alpha=6.0)
    assert [n for n, _ in learned.named_parameters()] == ["alpha"]
    learned.load_state_dict(act.state_dict())
    with pytest.raises(RuntimeError, match="bits"):
        hg.nn.PACT(bits=4).load_state_dict(act.state_dict())


def test_a_pact_mlp_learns_the_digits_and_alpha_moves():
    """A 4-bit PACT MLP on scikit-learn's digits (seeded, 150 full-batch steps): well
    above chance (10 %), with both clipping levels trained away from their start."""
    datasets = pytest.importorskip("sklearn.datasets")
    data = datasets.load_digits()
    x = torch.tensor(data.data, dtype=torch.float32) / 16.0
    t = torch.tensor(data.target)
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(64, 64), hg.nn.PACT(bits=4, alpha=2.0), nn.Linear(64, 64),
        hg.nn.PACT(bits=4, alpha=2.0), nn.Linear(64, 10),
    )  # fmt: skip
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(150):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), t).backward()
        opt.step()
    accuracy = (model(x).argmax(1) == t).float().mean()
    assert accuracy > 0.9
    assert all(
        abs(float(m.alpha.detach()) - 2.0) > 1e-3 for m in model if isinstance(m, hg.nn.PACT)
    )
