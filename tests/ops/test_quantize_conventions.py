"""LSQ conventions (issue 13, part 4) and the quantization grid's fit (issue 14, item 6).

* ``in_range``: PyTorch's fake-quantize decides "in range" on the rounded level; the LSQ
  paper (Esser et al. 2020, eq. 3) and the LSQ code people copy decide on ``x/s`` before
  rounding. Both are offered; each is checked against an independent float64 formula and
  against the code it stands for (torch's learnable kernel; a hand-written detach-trick LSQ
  quantizer as public repositories write it).
* ``hg.nn.Quantize``: the gradient-scale count ``N``, ``init_scale``, ``init_from``,
  ``narrow``, and checkpoints that refuse to load into another grid.
"""

from __future__ import annotations

import math

import pytest
import torch

import hardgrad as hg
from hardgrad.ops._autograd import MASK_CONVERT_MIN_NUMEL

Q_MIN, Q_MAX = -8, 7


def _band_inputs(scale: float, zero_point: float = 0.0) -> torch.Tensor:
    """x/s + z on both sides of every edge of the half-step bands, and inside the range."""
    u = [
        *(Q_MAX + d for d in (-0.6, -0.5, -0.25, 0.0, 0.1, 0.25, 0.49, 0.5, 0.51, 1.0, 3.0)),
        *(Q_MIN - d for d in (-0.6, -0.5, -0.25, 0.0, 0.1, 0.25, 0.49, 0.5, 0.51, 1.0, 3.0)),
        *(k + 0.3 for k in range(Q_MIN, Q_MAX)),
        0.0,
    ]
    return (torch.tensor(u, dtype=torch.float64) - zero_point) * scale


def _reference_gradients(x, s, z, g, unrounded: bool):
    """(dx, ds, dz) in float64 from the formulas, independent of hardgrad's code."""
    x, g = x.double(), g.double()
    v = x / s
    level = torch.round(v) + z
    decide = v + z if unrounded else level
    inside = (decide >= Q_MIN) & (decide <= Q_MAX)
    below = decide < Q_MIN
    dx = torch.where(inside, g, 0.0)
    dy_ds = torch.where(inside, torch.round(v) - v, torch.where(below, Q_MIN - z, Q_MAX - z))
    dy_dz = torch.where(inside, 0.0, -s)
    return dx, (g * dy_ds).sum(), (g * dy_dz).sum()


@pytest.mark.parametrize("in_range", ["rounded", "unrounded"])
@pytest.mark.parametrize("zero_point", [0.0, 2.0, -1.5])
def test_each_convention_against_its_float64_formula(in_range, zero_point, dtype):
    scale = 0.25
    x = _band_inputs(scale, zero_point).to(dtype)
    g = torch.linspace(-1.0, 2.0, x.numel()).to(dtype)
    xr = x.clone().requires_grad_()
    s = torch.tensor(scale, dtype=torch.float32, requires_grad=True)
    z = torch.tensor(zero_point, dtype=torch.float32, requires_grad=True)
    y = hg.quantize(xr, s, z, quant_min=Q_MIN, quant_max=Q_MAX, in_range=in_range)
    y.backward(g)
    dx, ds, dz = _reference_gradients(x, scale, zero_point, g, in_range == "unrounded")
    assert torch.equal(xr.grad.double(), dx)
    tol = {torch.float64: 1e-6, torch.float32: 1e-5}.get(dtype, 2e-2)
    assert math.isclose(float(s.grad), float(ds), rel_tol=tol, abs_tol=tol)
    assert math.isclose(float(z.grad), float(dz), rel_tol=tol, abs_tol=tol)
    # The number-scale path (mask only) decides the same way.
    if zero_point == 0.0:
        xn = x.clone().requires_grad_()
        hg.quantize(xn, scale, quant_min=Q_MIN, quant_max=Q_MAX, in_range=in_range).backward(g)
        assert torch.equal(xn.grad.double(), dx)


@pytest.mark.parametrize("size", ["small", "large"])
@pytest.mark.parametrize("per_channel", [False, True], ids=["per_tensor", "per_channel"])
@pytest.mark.parametrize("in_range", ["rounded", "unrounded"])
def test_learned_scale_mask_and_partial_in_eager(in_range, per_channel, size, dtype, assert_same):
    """A scale that requires grad with a zero point of 0, in eager mode. Below
    MASK_CONVERT_MIN_NUMEL elements the forward computes the mask and the scale's partial
    from its x/s and keeps them (two tensors of x's size, not x); from there on it keeps no
    mask, and the backward recomputes it from x (which it saves for the scale's gradient
    anyway). Either way the same output, x gradient and scale gradient, bit for bit, as
    the general path (the zero point passed as a tensor: mask made in forward, partials by
    ``torch.where``), on the half-step bands, NaN and +-inf."""
    scale = 0.25
    row = torch.cat([_band_inputs(scale), torch.tensor([math.nan, math.inf, -math.inf])])
    if size == "large":  # (the NaN and infinities stay at the end of each row)
        row = torch.cat(
            [row[:-3].repeat(MASK_CONVERT_MIN_NUMEL // len(row[:-3]) // 3 + 1), row[-3:]]
        )
    x = torch.stack([row, row * 0.5, -row]).to(dtype)
    assert (x.numel() < MASK_CONVERT_MIN_NUMEL) == (size == "small")
    g = torch.linspace(-1.0, 2.0, x.numel()).reshape(x.shape).to(dtype)
    s0 = (
        torch.tensor([[scale], [scale * 1.5], [scale * 0.75]])
        if per_channel
        else torch.tensor(scale)
    )
    results = []
    for zero_point in (0.0, torch.zeros(())):
        xr, s = x.clone().requires_grad_(), s0.clone().requires_grad_()
        saved: list[torch.Tensor] = []

        def pack(t: torch.Tensor, saved: list[torch.Tensor] = saved) -> torch.Tensor:
            saved.append(t)
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            y = hg.quantize(xr, s, zero_point, quant_min=Q_MIN, quant_max=Q_MAX, in_range=in_range)
        y.backward(g)
        large = [t for t in saved if t.numel() > s.numel()]  # not the scale
        results.append((y.detach(), xr.grad, s.grad, large, xr.data_ptr()))
    (y, dx, ds, large, x_ptr), (y_ref, dx_ref, ds_ref, _, _) = results
    assert_same(y, y_ref)
    assert_same(dx, dx_ref)
    assert_same(ds, ds_ref)
    assert ds.isnan().all()  # NaN inputs give a NaN scale gradient, as torch's kernels do
    if size == "large":  # x alone, no mask (the general path saves one besides)
        assert {t.data_ptr() for t in large} == {x_ptr}
    else:  # the mask and the partial, not x
        assert len(large) == 2 and x_ptr not in {t.data_ptr() for t in large}
    # Without the NaN column, the scale gradient against the float64 formula.
    finite = x[:, :-3]
    xr, s = finite.clone().requires_grad_(), s0.clone().requires_grad_()
    hg.quantize(xr, s, quant_min=Q_MIN, quant_max=Q_MAX, in_range=in_range).backward(g[:, :-3])
    tol = 2e-2 if dtype in (torch.float16, torch.bfloat16) else 1e-5  # (a float32 scale)
    total = 0.0
    for i in range(x.shape[0]):
        si = float(s0[i]) if per_channel else scale
        dx_i, ds_i, _ = _reference_gradients(finite[i], si, 0.0, g[i, :-3], in_range == "unrounded")
        assert torch.equal(xr.grad[i].double(), dx_i)
        if per_channel:
            assert math.isclose(float(s.grad[i]), float(ds_i), rel_tol=tol, abs_tol=tol)
        total += float(ds_i)
    if not per_channel:
        assert math.isclose(float(s.grad), total, rel_tol=tol, abs_tol=tol)


@pytest.mark.parametrize("surrogate", ["masked", "identity"])
def test_forward_without_a_mask_gives_the_same_values(surrogate, dtype, assert_same):
    """Where the eager forward makes no mask (grad mode off, nothing requiring grad, or the
    identity surrogate with a fixed scale), the output is the masked forward's, bit for bit
    (NaN, infinities and the signed zero of small negative values included)."""
    row = torch.cat([_band_inputs(0.25), torch.tensor([math.nan, math.inf, -math.inf, -1e-3])])
    x = row.to(dtype)
    scale = torch.tensor(0.25)
    kwargs = {"quant_min": Q_MIN, "quant_max": Q_MAX, "surrogate": surrogate}
    # The general path: a zero point given as a tensor keeps the mask in the forward.
    reference = hg.quantize(x.clone().requires_grad_(), scale, torch.zeros(()), **kwargs).detach()
    with torch.no_grad():
        assert_same(hg.quantize(x, scale.clone().requires_grad_(), **kwargs), reference)
    assert_same(hg.quantize(x, scale, **kwargs), reference)
    assert_same(hg.quantize(x, scale.clone().requires_grad_(), **kwargs).detach(), reference)


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_an_evaluation_call_gives_the_training_values(mode, dtype, assert_same):
    """With grad mode off (evaluation) a learned quantizer skips the Function and the mask:
    the output is the recorded call's bit for bit, for a tensor scale, a learned
    (non-integral) zero point and ``hg.nn.Quantize`` with a negative raw scale, on the
    bands, NaN, infinities and the signed zero of small negative values."""
    row = torch.cat(
        [_band_inputs(0.25), _band_inputs(0.25, -1.3), torch.tensor([math.nan, math.inf, -1e-3])]
    )
    x = torch.stack([row, -row]).to(dtype)
    scale = torch.tensor([[0.25], [0.375]], requires_grad=True)
    zero = torch.tensor([[-1.3], [2.0]], requires_grad=True)
    q = hg.nn.Quantize(bits=4, per_channel_dim=0, init_scale=torch.tensor([0.25, 0.375]))
    with torch.no_grad():
        q.scale.neg_()
    calls = [
        lambda v: hg.quantize(v, scale, quant_min=Q_MIN, quant_max=Q_MAX),
        lambda v: hg.quantize(v, scale, zero, quant_min=Q_MIN, quant_max=Q_MAX),
        q,
    ]
    context = torch.no_grad if mode == "no_grad" else torch.inference_mode
    for call in calls:
        recorded = call(x.clone().requires_grad_())
        assert recorded.grad_fn is not None
        with context():
            evaluated = call(x)
        assert evaluated.grad_fn is None
        assert_same(evaluated, recorded.detach())


def test_conventions_differ_exactly_in_the_half_step_bands():
    scale = 0.25
    x = _band_inputs(scale)
    rounded, unrounded = x.clone().requires_grad_(), x.clone().requires_grad_()
    y1 = hg.quantize(rounded, scale, quant_min=Q_MIN, quant_max=Q_MAX)
    y2 = hg.quantize(unrounded, scale, quant_min=Q_MIN, quant_max=Q_MAX, in_range="unrounded")
    assert torch.equal(y1, y2)  # the forward is the same
    y1.sum().backward()
    y2.sum().backward()
    v = x / scale
    band = ((v > Q_MAX) & (v < Q_MAX + 0.5)) | ((v < Q_MIN) & (v >= Q_MIN - 0.5))
    differ = rounded.grad != unrounded.grad
    assert torch.equal(differ, band)


def test_rounded_is_torch_learnable_fake_quantize():
    """PyTorch's learnable kernel (the "rounded" convention, and hardgrad's default)."""
    scale = 0.25
    x = _band_inputs(scale).float()
    g = torch.linspace(-1.0, 2.0, x.numel())
    ours_x = x.clone().requires_grad_()
    ours_s = torch.tensor([scale], requires_grad=True)
    hg.quantize(ours_x, ours_s, quant_min=Q_MIN, quant_max=Q_MAX, in_range="rounded").backward(g)
    torch_x = x.clone().requires_grad_()
    torch_s = torch.tensor([scale], requires_grad=True)
    zero = torch.tensor([0.0])
    torch._fake_quantize_learnable_per_tensor_affine(
        torch_x, torch_s, zero, Q_MIN, Q_MAX, 1.0
    ).backward(g)
    assert torch.equal(ours_x.grad, torch_x.grad)
    torch.testing.assert_close(ours_s.grad, torch_s.grad, rtol=1e-5, atol=1e-6)


def _detach_trick_lsq(x: torch.Tensor, s: torch.Tensor, g_scale: float) -> torch.Tensor:
    """The LSQ quantizer as public code writes it (grad_scale and round_pass by detach)."""
    s_scaled = (s - s * g_scale).detach() + s * g_scale
    v = torch.clamp(x / s_scaled, Q_MIN, Q_MAX)
    rounded = (v.round() - v).detach() + v
    return rounded * s_scaled


@pytest.mark.parametrize("per_channel", [False, True])
def test_unrounded_is_the_common_lsq_code(per_channel):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(6, 40, generator=gen, dtype=torch.float64) * 1.2
    x[0, :5] = torch.tensor([1.76, 1.80, -2.05, -2.12, 1.875])  # in the bands (s = 0.25)
    shape = (6, 1) if per_channel else ()
    s0 = torch.full(shape, 0.25, dtype=torch.float64)
    s0 = (
        s0 * (1 + 0.1 * torch.arange(6.0, dtype=torch.float64).reshape(6, 1)) if per_channel else s0
    )
    g_scale = 1 / math.sqrt(x.numel() * Q_MAX)
    upstream = torch.randn(x.shape, generator=gen, dtype=torch.float64)

    ours_x, ours_s = x.clone().requires_grad_(), s0.clone().requires_grad_()
    y = hg.quantize(
        ours_x, ours_s, quant_min=Q_MIN, quant_max=Q_MAX, grad_scale=g_scale, in_range="unrounded"
    )
    (y * upstream).sum().backward()
    ref_x, ref_s = x.clone().requires_grad_(), s0.clone().requires_grad_()
    y_ref = _detach_trick_lsq(ref_x, ref_s, g_scale)
    (y_ref * upstream).sum().backward()
    torch.testing.assert_close(y.detach(), y_ref.detach(), rtol=0, atol=1e-12)
    # The detach trick's input gradient is s * (1/s) * g, ours g: equal up to rounding, and
    # zero at the same places (the band elements included).
    assert torch.equal(ours_x.grad == 0, ref_x.grad == 0)
    torch.testing.assert_close(ours_x.grad, ref_x.grad, rtol=1e-14, atol=0)
    torch.testing.assert_close(ours_s.grad, ref_s.grad, rtol=1e-10, atol=1e-12)


def test_in_range_is_checked():
    with pytest.raises(ValueError, match="`in_range`"):
        hg.quantize(torch.zeros(3), 0.5, in_range="paper")
    with pytest.raises(ValueError, match="`in_range`"):
        hg.nn.Quantize(in_range="before")


# --------------------------------------------------------------------------------------
# The grid must fit the input's dtype (issue 14, item 6): no silent inf.
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("scale", [1000.0, 513.0])
def test_a_grid_beyond_float16_is_an_error_not_inf(scale):
    x = torch.tensor([65504.0, -65504.0, 1.0], dtype=torch.float16)
    with pytest.raises(ValueError, match="`x`'s dtype"):
        hg.quantize(x, scale)
    with pytest.raises(ValueError, match="`x`'s dtype"):
        hg.quantize(x, torch.tensor(scale))
    with pytest.raises(ValueError, match="`x`'s dtype"):
        hg.quantize(x, 1.0, torch.tensor(-70000.0), quant_min=-128, quant_max=127)


def test_per_channel_scales_are_checked_channel_by_channel():
    """Per-channel scales are read by their extremes: the largest decides whether the
    grid fits (wherever it sits), the smallest whether every scale is a normal number,
    and the error lists the offending values."""
    x = torch.tensor([[65504.0, 1.0]] * 3, dtype=torch.float16)
    for position in range(3):
        scales = torch.full((3, 1), 2.0)
        scales[position] = 1000.0  # 128 * 1000 > 65504
        with pytest.raises(ValueError, match="`x`'s dtype"):
            hg.quantize(x, scales)
        scales[position] = 511.0  # fits
        assert bool(torch.isfinite(hg.quantize(x, scales)).all())
        scales[position] = 1e-45  # subnormal in float32
        with pytest.raises(ValueError, match=r"`scale` > 0.*1\.4"):
            hg.quantize(x, scales)


def test_the_largest_grid_that_fits_float16_is_accepted_and_finite():
    x = torch.tensor([65504.0, -65504.0, 1.0], dtype=torch.float16)
    y = hg.quantize(x, 511.0)  # 128 * 511 = 65408 <= 65504
    assert bool(torch.isfinite(y).all())
    assert torch.equal(
        y, torch.fake_quantize_per_tensor_affine(x.float(), 511.0, 0, -128, 127).half()
    )


# --------------------------------------------------------------------------------------
# nn.Quantize: N in the gradient scale, init_scale, init_from, narrow.
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("elements", ["per_scale", "tensor"])
def test_grad_scale_elements_sets_n(elements):
    x = torch.randn(3, 16, generator=torch.Generator().manual_seed(1))
    q = hg.nn.Quantize(bits=4, per_channel_dim=0, grad_scale_elements=elements)
    q.init_from(x)
    q(x).sum().backward()
    n = 16 if elements == "per_scale" else 48
    s = q.scale.detach().clone().reshape(3, 1).requires_grad_()
    hg.quantize(x, s, quant_min=-8, quant_max=7, grad_scale=1 / math.sqrt(n * 7)).sum().backward()
    torch.testing.assert_close(q.scale.grad, s.grad.reshape(3))


def test_init_scale_and_init_from_skip_the_first_batch_init():
    x = torch.randn(32, generator=torch.Generator().manual_seed(2))
    q = hg.nn.Quantize(bits=4, init_scale=0.3)
    assert q.initialized and float(q.scale.detach()) == pytest.approx(0.3)
    q(x)
    assert float(q.scale.detach()) == pytest.approx(0.3)  # the batch did not overwrite it
    weights = torch.randn(5, 8, generator=torch.Generator().manual_seed(3))
    per_channel = hg.nn.Quantize(bits=4, per_channel_dim=0).init_from(weights)
    expected = 2 * weights.abs().mean(1) / math.sqrt(7)
    torch.testing.assert_close(per_channel.scale.detach(), expected)
    given = hg.nn.Quantize(bits=4, per_channel_dim=0, init_scale=torch.full((5,), 0.1))
    assert torch.equal(given(weights), hg.quantize(weights, 0.1, quant_min=-8, quant_max=7))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"init_scale": 0.0}, "init_scale"),
        ({"init_scale": -1.0}, "init_scale"),
        ({"init_scale": math.inf}, "init_scale"),
        ({"init_scale": torch.tensor([0.1, 0.2])}, "init_scale"),
        ({"init_scale": 0.5, "per_channel_dim": 0}, "init_scale"),
        ({"init_scale": torch.tensor([[0.1]]), "per_channel_dim": 0}, "init_scale"),
        ({"init_scale": torch.tensor([0.1, -0.2]), "per_channel_dim": 0}, "init_scale"),
        ({"narrow": True, "signed": False}, "narrow"),
        ({"grad_scale_elements": "channel"}, "grad_scale_elements"),
        ({"narrow": 1}, "narrow"),
    ],
)
def test_quantize_module_bad_settings(kwargs, match):
    with pytest.raises((TypeError, ValueError), match=f"`{match}`"):
        hg.nn.Quantize(**kwargs)


def test_init_from_rejects_an_empty_tensor():
    with pytest.raises(ValueError, match="`x`"):
        hg.nn.Quantize().init_from(torch.zeros(0))


@pytest.mark.parametrize(("bits", "low", "high"), [(2, -1, 1), (4, -7, 7), (8, -127, 127)])
def test_narrow_range_is_symmetric(bits, low, high):
    q = hg.nn.Quantize(bits=bits, narrow=True, init_scale=1.0)
    assert (q.quant_min, q.quant_max) == (low, high)
    x = torch.tensor([-1000.0, 1000.0, 0.4])
    assert q(x).tolist() == [float(low), float(high), 0.0]
    assert "narrow=True" in repr(q)


# --------------------------------------------------------------------------------------
# Checkpoints: what defines the grid is stored and checked (issue 13.4 / 14.4).
# --------------------------------------------------------------------------------------


def _trained(**kwargs) -> hg.nn.Quantize:
    q = hg.nn.Quantize(**kwargs)
    q(torch.randn(4, 6, generator=torch.Generator().manual_seed(4)))
    return q


@pytest.mark.parametrize(
    ("saved", "loading", "words"),
    [
        ({"per_channel_dim": 1}, {}, ["scale", "(6,)", "per_channel_dim=None"]),
        # (one scale is stored as (1,), a shape a one-channel scale has too: the settings)
        ({}, {"per_channel_dim": 1}, ["'per_channel_dim'", "per_channel_dim=None", "=1"]),
        ({"bits": 4}, {"bits": 8}, ["'bits'", "bits=4", "bits=8"]),
        ({"signed": False}, {"signed": True}, ["'signed'", "signed=False", "signed=True"]),
        ({"narrow": True}, {}, ["'narrow'", "narrow=True", "narrow=False"]),
    ],
)
def test_a_checkpoint_for_another_grid_is_refused(saved, loading, words):
    state = _trained(**saved).state_dict()
    fresh = hg.nn.Quantize(**loading)
    with pytest.raises(RuntimeError) as info:
        fresh.load_state_dict(state)
    for word in words:
        assert word in str(info.value), (word, str(info.value))
    assert not fresh.initialized


def test_a_checkpoint_with_another_channel_count_is_refused():
    state = _trained(per_channel_dim=1).state_dict()
    fresh = hg.nn.Quantize(per_channel_dim=1, init_scale=torch.ones(3))
    with pytest.raises(RuntimeError, match="6 channel scales, this Quantize has 3"):
        fresh.load_state_dict(state)


def test_the_prefix_appears_in_the_error_inside_a_model():
    model = torch.nn.Sequential(torch.nn.Linear(6, 6), _trained(bits=4))
    other = torch.nn.Sequential(torch.nn.Linear(6, 6), hg.nn.Quantize(bits=8))
    with pytest.raises(RuntimeError, match=r"\t1: setting 'bits'.*bits=4.*bits=8"):
        other.load_state_dict(model.state_dict())


def test_an_old_checkpoint_without_settings_still_loads_where_it_fits():
    q = _trained(per_channel_dim=1)
    state = dict(q.state_dict())  # no metadata: as earlier versions saved, or a plain dict
    fresh = hg.nn.Quantize(per_channel_dim=1)
    fresh.load_state_dict(state)
    assert fresh.initialized and torch.equal(fresh.scale, q.scale)
    per_tensor = hg.nn.Quantize()
    with pytest.raises(RuntimeError, match="per_channel_dim=None"):
        per_tensor.load_state_dict(state)


def test_matching_checkpoints_round_trip_with_the_new_settings():
    q = _trained(bits=3, narrow=True, in_range="unrounded", grad_scale_elements="tensor")
    fresh = hg.nn.Quantize(bits=3, narrow=True)
    fresh.load_state_dict(q.state_dict())  # in_range and N are training choices: not checked
    assert torch.equal(fresh.scale, q.scale) and fresh.initialized


# --------------------------------------------------------------------------------------
# torch.compile of an uninitialised module: the first-batch init runs outside the graph.
# --------------------------------------------------------------------------------------


@pytest.mark.compile
# torch 2.11's Dynamo reads ``.grad`` of the non-leaf scale view it takes as an input of the
# frame after the initialisation's graph break (builder.safe_has_grad), hiding torch's
# warning with a filter that filterwarnings = error overrides; hardgrad reads no .grad.
@pytest.mark.filterwarnings(
    "ignore:The .grad attribute of a Tensor that is not a leaf Tensor:UserWarning"
)
def test_compiling_an_uninitialised_module_initialises_it_outside_the_graph():
    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(5))
    eager = hg.nn.Quantize(bits=4, per_channel_dim=1)
    compiled_module = hg.nn.Quantize(bits=4, per_channel_dim=1)
    compiled = torch.compile(compiled_module, backend="aot_eager")
    assert torch.equal(compiled(x), eager(x))
    assert compiled_module.initialized and torch.equal(compiled_module.scale, eager.scale)
    torch._dynamo.reset()


def test_learned_scale_backward_twice_on_a_retained_graph():
    """The small-tensor path keeps its mask and partial from forward: a second backward of
    a retained graph must find them unchanged (the same gradients again)."""
    x = torch.linspace(-3.0, 3.0, 96).reshape(8, 12).requires_grad_()
    scale = torch.full((8, 1), 0.3, requires_grad=True)
    y = hg.quantize(x, scale, quant_min=-4, quant_max=3, grad_scale=0.5)
    g = torch.linspace(-1.0, 1.0, 96).reshape(8, 12)
    first = torch.autograd.grad(y, (x, scale), g, retain_graph=True)
    second = torch.autograd.grad(y, (x, scale), g)
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))


@pytest.mark.parametrize("per_channel", [False, True], ids=["per_tensor", "per_channel"])
@pytest.mark.parametrize("in_range", ["rounded", "unrounded"])
def test_quantize_module_small_path_is_the_general_one_bit_for_bit(
    in_range, per_channel, dtype, assert_same, monkeypatch
):
    """``hg.nn.Quantize`` on fewer than MASK_CONVERT_MIN_NUMEL elements records the lean
    small-tensor Function (the step size made from the raw scale inside it, the mask and
    partial from forward's x/s). Forced onto the general Function, the same output and
    gradients bit for bit: a negative raw scale (its sign in the gradient), the half-step
    bands, NaN, +-inf, -0.0; float32/half inputs (the factor +-g a tensor) and float64
    (the sign applied apart, the raw scale being float32)."""
    from hardgrad.ops import _quantize_routes

    scale = 0.25
    finite = torch.cat([_band_inputs(scale), torch.tensor([-0.0, 1e30, -1e30])])
    with_nan = torch.cat([finite, torch.tensor([math.nan, math.inf, -math.inf])])
    raw = torch.tensor([scale, -scale * 1.5, scale * 0.75]) if per_channel else torch.tensor(-scale)

    def run(row):
        x = torch.stack([row, row * 0.5, -row]).to(dtype)
        assert x.numel() < MASK_CONVERT_MIN_NUMEL
        g = torch.linspace(-1.0, 2.0, x.numel()).reshape(x.shape).to(dtype)
        q = hg.nn.Quantize(
            bits=4,
            per_channel_dim=0 if per_channel else None,
            in_range=in_range,
            init_scale=torch.ones(3) if per_channel else 1.0,
        )
        with torch.no_grad():
            q.scale.copy_(raw)
        xr = x.clone().requires_grad_()
        y = q(xr)
        return (y.detach(), *torch.autograd.grad(y, [xr, q.scale], g))

    for row in (finite, with_nan):
        small = run(row)
        with monkeypatch.context() as patch:
            patch.setattr(_quantize_routes, "MASK_CONVERT_MIN_NUMEL", 0)  # the general Function
            general = run(row)
        for a, b in zip(small, general, strict=True):
            assert_same(a, b)
    assert small[2].isnan().all()  # (the NaN inputs: a NaN scale gradient)


@pytest.mark.parametrize("zero_point", [None, "learned"])
@pytest.mark.parametrize("in_range", ["rounded", "unrounded"])
def test_a_backward_with_create_graph_is_linear_in_the_incoming_gradient(
    in_range, zero_point, assert_same, monkeypatch
):
    """``create_graph=True`` records the backward: the same first-order gradients, and a
    second derivative that treats the mask and the partials as constants (the surrogate
    Jacobian), the same bit for bit on the small path (partials made in forward) and the
    general one (partials remade in backward, once in place, which broke the recording)."""
    from hardgrad.ops import _quantize_routes

    x0 = torch.cat([_band_inputs(0.25), _band_inputs(0.25, 0.5)]).reshape(2, -1)

    def run(create_graph):
        x = x0.clone().requires_grad_()
        s = torch.tensor([[0.25], [0.375]], requires_grad=True)
        wanted = [x, s]
        args = [x, s]
        if zero_point:
            z = torch.tensor([[0.5], [-1.0]], requires_grad=True)
            wanted.append(z)
            args.append(z)
        y = hg.quantize(*args, quant_min=Q_MIN, quant_max=Q_MAX, in_range=in_range)
        first = torch.autograd.grad(y.pow(2).sum(), wanted, create_graph=create_graph)
        if not create_graph:
            return first, ()
        second = torch.autograd.grad(sum(t.sum() for t in first[1:]), wanted)
        return first, second

    results = []
    for threshold in (MASK_CONVERT_MIN_NUMEL, 0):  # the small path, then the general one
        with monkeypatch.context() as patch:
            patch.setattr(_quantize_routes, "MASK_CONVERT_MIN_NUMEL", threshold)
            plain, _ = run(False)
            first, second = run(True)
        for a, b in zip(first, plain, strict=True):
            assert_same(a.detach(), b)
        assert any(t.abs().sum() > 0 for t in second)  # (not vacuous)
        results.append(second)
    for a, b in zip(*results, strict=True):
        assert_same(a, b)


def test_only_a_learning_call_records_the_small_function():
    """The lean Function is for calls that record a graph for a learned scale or zero
    point: under ``no_grad`` nothing is recorded, a fixed scale records the straight-through
    ops of the number scales, and above the size bound the general Function is used
    (visible as the output's ``grad_fn``); every one gives the same values."""
    x = torch.linspace(-3.0, 3.0, 96).reshape(8, 12).requires_grad_()
    learned = torch.full((8, 1), 0.3, requires_grad=True)
    fixed = learned.detach()

    def name(y):
        return type(y.grad_fn).__name__ if y.grad_fn is not None else None

    y = hg.quantize(x, learned, quant_min=-4, quant_max=3)
    assert name(y) == "_SmallLSQBackward"
    zero = torch.zeros(8, 1, requires_grad=True)
    assert name(hg.quantize(x, fixed, zero, quant_min=-4, quant_max=3)) == "_SmallLSQBackward"
    # A fixed scale: the straight-through backward alone, autograd's own mask product here.
    assert name(hg.quantize(x, fixed, quant_min=-4, quant_max=3)) == "MulBackward0"
    with torch.no_grad():
        assert name(hg.quantize(x, learned, quant_min=-4, quant_max=3)) is None
        assert torch.equal(hg.quantize(x, learned, quant_min=-4, quant_max=3), y.detach())
    big = torch.linspace(-3.0, 3.0, MASK_CONVERT_MIN_NUMEL).reshape(8, -1)
    assert name(hg.quantize(big, learned, quant_min=-4, quant_max=3)) == "_FakeQuantizeBackward"


@pytest.mark.parametrize("learns", ["both", "scale", "zero_point"])
@pytest.mark.parametrize("per_channel", [False, True], ids=["per_tensor", "per_channel"])
@pytest.mark.parametrize("in_range", ["rounded", "unrounded"])
def test_learned_zero_point_small_path_is_the_general_one_bit_for_bit(
    in_range, per_channel, learns, dtype, assert_same, monkeypatch
):
    """Below MASK_CONVERT_MIN_NUMEL elements a learned zero point's mask and partials come
    from forward's own x/s, by arithmetic (``lerp`` picks an end exactly); above it
    backward computes them with ``torch.where``. Forced onto the second path, the small
    tensor gives the same output and gradients bit for bit: integral and non-integral
    zero points, the half-step bands (of the non-integral level too), NaN, +-inf, -0.0."""
    from hardgrad.ops import _quantize_routes

    scale, zp = 0.25, -1.3
    row = torch.cat(
        [
            _band_inputs(scale),
            _band_inputs(scale, zp),
            torch.tensor([math.nan, math.inf, -math.inf, -0.0, 1e30, -1e30]),
        ]
    )
    x = torch.stack([row, row * 0.5, -row]).to(dtype)
    g = torch.linspace(-1.0, 2.0, x.numel()).reshape(x.shape).to(dtype)
    if per_channel:
        s0, z0 = (
            torch.tensor([[scale], [scale * 1.5], [scale * 0.75]]),
            torch.tensor([[zp], [2.0], [0.0]]),
        )
    else:
        s0, z0 = torch.tensor(scale), torch.tensor(zp)

    def run():
        xr = x.clone().requires_grad_()
        s = s0.clone().requires_grad_(learns != "zero_point")
        z = z0.clone().requires_grad_(learns != "scale")
        y = hg.quantize(
            xr, s, z, quant_min=Q_MIN, quant_max=Q_MAX, in_range=in_range, grad_scale=0.5
        )
        wanted = [t for t in (xr, s, z) if t.requires_grad]
        return (y.detach(), *torch.autograd.grad(y, wanted, g))

    small = run()
    with monkeypatch.context() as patch:
        patch.setattr(_quantize_routes, "MASK_CONVERT_MIN_NUMEL", 0)  # the general path
        general = run()
    assert len(small) == len(general)
    for a, b in zip(small, general, strict=True):
        assert_same(a, b)


@pytest.mark.parametrize("per_channel", [False, True], ids=["per_tensor", "per_channel"])
@pytest.mark.parametrize("in_range", ["rounded", "unrounded"])
def test_affine_partials_by_arithmetic_equal_the_where_form(in_range, per_channel, dtype):
    """The eager zero-point partials (arithmetic, ``lerp`` choosing an end) against the
    ``torch.where`` form that compile and transforms use, bit for bit: random inputs over
    the whole range (every mantissa pattern of t - x/s next to a large c - z), the bands,
    NaN, +-inf, -0.0 and values beyond any level, integral and non-integral zero points."""
    from types import SimpleNamespace

    from hardgrad._core.kernels import mask_condition
    from hardgrad.ops import _quantize_functions, _quantize_grid

    gen = torch.Generator().manual_seed(7)
    scale, zp = 0.25, -1.3
    row = torch.cat(
        [
            torch.randn(400, generator=gen, dtype=torch.float64) * 3,
            _band_inputs(scale),
            _band_inputs(scale, zp),
            torch.tensor([math.nan, math.inf, -math.inf, -0.0, 1e30, -1e30], dtype=torch.float64),
        ]
    )
    x = torch.stack([row, row * 0.5, -row]).to(dtype)
    compute = torch.float64 if dtype == torch.float64 else torch.float32
    if per_channel:
        step = torch.tensor([[scale], [scale * 1.5], [scale * 0.75]], dtype=compute)
        zero_point = torch.tensor([[zp], [2.0], [0.0]], dtype=compute)
    else:
        step, zero_point = torch.tensor(scale, dtype=compute), torch.tensor(zp, dtype=compute)
    inverse = torch.reciprocal(step)
    bounds = (Q_MIN, Q_MAX)
    unrounded = in_range == "unrounded"
    keep, dy_ds, dy_dz, y = _quantize_grid._affine_partials(
        x, inverse, step, zero_point, bounds, unrounded, with_value=True
    )
    want_y, want_keep = _quantize_grid._fake_quantize(
        x, step, inverse, zero_point, *bounds, unrounded
    )
    assert torch.equal(keep.bool(), mask_condition(want_keep))
    ctx = SimpleNamespace(bounds=bounds, unrounded=unrounded)
    want_ds, want_dz = _quantize_functions._qparam_partials(ctx, want_keep, x, step, zero_point)
    y = y.to(dtype)
    for got, want in ((y, want_y), (dy_ds, want_ds), (dy_dz, want_dz)):
        assert got.dtype == want.dtype
        assert torch.equal(got.isnan(), want.isnan())
        same = got.nan_to_num() == want.nan_to_num()
        assert bool(same.all()), (got[~same][:5], want[~same][:5])


@pytest.mark.parametrize("numel", ["small", "large"])
@pytest.mark.parametrize("scale_shape", ["0-d", "one", "per_channel"])
@pytest.mark.parametrize("in_range", ["rounded", "unrounded"])
@pytest.mark.parametrize("surrogate", ["masked", "identity"])
def test_fixed_tensor_scale_route_is_the_general_function_bit_for_bit(
    surrogate, in_range, scale_shape, numel, dtype, assert_same, monkeypatch
):
    """A tensor scale that learns nothing (PACT's ``alpha.detach() / n``), zero point 0:
    the call records the straight-through ops alone (autograd's own nodes up to 8,192
    elements, the masked or identity Function above), a single CPU step read once and
    used as a number scale is. Forced onto :class:`_FakeQuantize`, the same output and
    input gradient bit for bit: the half-step bands, NaN, +-inf, -0.0, huge values."""
    from hardgrad.ops import _quantize_routes

    scale = 0.25
    row = torch.cat(
        [
            _band_inputs(scale),
            -_band_inputs(scale),
            torch.tensor([math.nan, math.inf, -math.inf, -0.0, 0.0, -0.01, 1e30, -1e30]),
        ]
    )
    rows = 3 if numel == "small" else 3 * (8192 // row.numel() + 1)
    x = (row * torch.linspace(0.5, 1.5, rows).unsqueeze(1)).to(dtype)
    assert (x.numel() <= 8192) == (numel == "small")
    g = torch.linspace(-1.0, 2.0, x.numel()).reshape(x.shape).to(dtype)
    step = {
        "0-d": torch.tensor(scale),
        "one": torch.tensor([scale]),
        "per_channel": torch.linspace(0.2, 0.4, rows).unsqueeze(1),
    }[scale_shape]

    def run():
        xr = x.clone().requires_grad_()
        y = hg.quantize(
            xr, step, quant_min=Q_MIN, quant_max=Q_MAX, surrogate=surrogate, in_range=in_range
        )
        return y, *torch.autograd.grad(y, xr, g)

    lean = run()
    native = numel == "small"
    expected_node = {
        (True, "masked"): "MulBackward0",
        (True, "identity"): "CloneBackward0",
        (False, "masked"): "MaskedGradientBackward",
        (False, "identity"): "IdentityGradientBackward",
    }[native, surrogate]
    assert type(lean[0].grad_fn).__name__ == expected_node
    route = _quantize_routes._eager_route

    def general_only(*args):
        found = route(*args)
        return None if found is _quantize_routes._FIXED_SCALE else found

    with monkeypatch.context() as patch:
        patch.setattr(_quantize_routes, "_eager_route", general_only)
        general = run()
    assert type(general[0].grad_fn).__name__ == "_FakeQuantizeBackward"
    for a, b in zip(lean, general, strict=True):
        assert_same(a.detach(), b.detach())
    assert lean[0].isnan().any() and (lean[0] == 0).any()  # (not vacuous)
