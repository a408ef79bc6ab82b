"""Hard Concrete gates: hg.hard_concrete, hg.gates.expected_l0 / hard_concrete_mean, hg.nn.HardConcreteGate."""

from __future__ import annotations

import math

import pytest
import torch

import hardgrad as hg
from hardgrad.gates import expected_l0, hard_concrete_mean

BETA, GAMMA, ZETA = 2 / 3, -0.1, 1.1


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def sigmoid(t: float) -> float:
    return 1 / (1 + math.exp(-t))


def test_forward_and_gradient_formula():
    log_alpha = torch.linspace(-3, 3, 13, dtype=torch.float64).requires_grad_(True)
    z = hg.hard_concrete(log_alpha, beta=0.5, gamma=-0.2, zeta=1.3, generator=gen(1))
    z.sum().backward()
    info = torch.finfo(torch.float64)
    u = torch.rand(13, generator=gen(1), dtype=torch.float64).clamp(info.tiny, 1 - info.eps)
    for i, (la, ui) in enumerate(zip(log_alpha.tolist(), u.tolist(), strict=True)):
        s = sigmoid((math.log(ui) - math.log(1 - ui) + la) / 0.5)
        stretched = s * 1.5 - 0.2
        assert z[i].item() == pytest.approx(min(1.0, max(0.0, stretched)), abs=1e-14)
        slope = 1.5 * s * (1 - s) / 0.5 if 0 < stretched < 1 else 0.0
        assert log_alpha.grad[i].item() == pytest.approx(slope, abs=1e-12)


@pytest.mark.statistical
def test_probabilities_of_exact_zero_and_one_and_expected_l0():
    """P(z = 0), P(z = 1) and P(z != 0) from 100000 draws per log alpha against the closed
    forms; z-tests at |z| < 5.5 on 15 proportions: false-failure rate below 6e-7."""
    values = [-2.0, 0.0, 1.5, 3.0, -0.5]
    n = 100000
    log_alpha = torch.tensor(values, dtype=torch.float64).repeat(n, 1)
    z = hg.hard_concrete(log_alpha, generator=gen(2))
    l0 = expected_l0(torch.tensor(values, dtype=torch.float64))
    for j, la in enumerate(values):
        p0 = sigmoid(BETA * math.log(-GAMMA / ZETA) - la)
        p1 = sigmoid(la - BETA * math.log((1 - GAMMA) / (ZETA - 1)))
        for p, observed in ((p0, (z[:, j] == 0)), (p1, (z[:, j] == 1)), (1 - p0, (z[:, j] != 0))):
            freq = observed.double().mean().item()
            assert abs(freq - p) / math.sqrt(p * (1 - p) / n) < 5.5
        assert l0[j].item() == pytest.approx(1 - p0, abs=1e-14)


def test_mean_gate_and_dtypes():
    la = torch.tensor([-5.0, -1.0, 0.0, 2.0, 5.0], dtype=torch.float64)
    expected = (torch.sigmoid(la) * 1.2 - 0.1).clamp(0, 1)
    torch.testing.assert_close(hard_concrete_mean(la), expected)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        x = (la * 100).to(dtype).requires_grad_(True)  # saturated ends stay exact 0 / 1
        z = hg.hard_concrete(x, generator=gen(3))
        assert z.dtype == dtype and z[0] == 0 and z[-1] == 1
        z.sum().backward()
        assert torch.isfinite(x.grad).all()


def test_module_training_eval_penalty_and_state():
    torch.manual_seed(0)
    gate = hg.nn.HardConcreteGate(5, dim=1, init_keep=0.7, generator=gen(4))
    x = torch.randn(2, 5, 3)
    y = gate(x)
    assert y.shape == x.shape
    ratio = (y / x)[0, :, 0]
    assert torch.allclose((y / x), ratio[None, :, None].expand_as(x))  # one draw per call
    assert ((ratio >= 0) & (ratio <= 1)).all()
    torch.testing.assert_close(gate.l0(), expected_l0(torch.full((5,), math.log(0.7 / 0.3))).sum())
    (y.sum() + 0.1 * gate.l0()).backward()
    assert gate.log_alpha.grad is not None and torch.isfinite(gate.log_alpha.grad).all()
    gate.eval()
    assert torch.equal(gate(x), gate(x))
    torch.testing.assert_close(gate(x), x * (0.7 * 1.2 - 0.1))
    with torch.no_grad():
        gate.log_alpha[:2] = -10.0
    assert gate.sparsity() == pytest.approx(0.4)
    other = hg.nn.HardConcreteGate(5, dim=1)
    other.load_state_dict(gate.state_dict())
    assert torch.equal(other.log_alpha, gate.log_alpha)
    with pytest.raises(RuntimeError, match="features"):
        hg.nn.HardConcreteGate(4, dim=1).load_state_dict(gate.state_dict())
    assert "HardConcreteGate(5, dim=1" in repr(gate)


def test_bad_input():
    la = torch.zeros(3)
    with pytest.raises(ValueError, match="`gamma` < 0"):
        hg.hard_concrete(la, gamma=0.1)
    with pytest.raises(ValueError, match="`zeta` > 1"):
        hg.hard_concrete(la, zeta=1.0)
    with pytest.raises(ValueError, match="`beta` > 0"):
        expected_l0(la, beta=0.0)
    with pytest.raises(TypeError, match="`log_alpha`"):
        hg.hard_concrete(torch.zeros(3, dtype=torch.long))
    with pytest.raises(TypeError, match="`generator`"):
        hg.hard_concrete(la, generator=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="`init_keep`"):
        hg.nn.HardConcreteGate(3, init_keep=1.0)
    with pytest.raises(ValueError, match="features=3"):
        hg.nn.HardConcreteGate(3)(torch.zeros(2, 4))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool, torch.complex64])
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_non_float_input_is_refused_naming_the_argument(dtype, training):
    """Before: an int64 input came back as truncated integers (0 or the value), a bool
    input as bools, with no error."""
    gate = hg.nn.HardConcreteGate(4).train(training)
    with pytest.raises(TypeError, match=rf"`x`.*floating-point.*{dtype}"):
        gate(torch.ones(2, 4, dtype=dtype))
    for function in (hg.hard_concrete, hard_concrete_mean, expected_l0):
        with pytest.raises(TypeError, match="`log_alpha`"):
            function(torch.ones(4, dtype=dtype))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
def test_eager_sample_and_penalty_are_the_formula_bit_for_bit(dtype):
    """The eager sample (cached 0-d constants, the uniform draw inlined) computes exactly
    the documented kernels in the compute dtype (float32 for half types), from the same
    uniforms as hardgrad's other samplers; the module's output and penalty too."""
    beta, gamma, zeta = 0.5, -0.2, 1.3
    compute = torch.float64 if dtype == torch.float64 else torch.float32
    info = torch.finfo(compute)
    log_alpha = (3 * torch.randn(40, generator=gen(6), dtype=torch.float64)).to(dtype)
    z = hg.hard_concrete(log_alpha, beta=beta, gamma=gamma, zeta=zeta, generator=gen(7))
    u = torch.rand(40, generator=gen(7), dtype=compute).clamp(info.tiny, 1 - info.eps)
    q = log_alpha.to(compute)
    logit = torch.log(u) - torch.log1p(-u) + q
    want = (torch.sigmoid(logit / beta) * (zeta - gamma) + gamma).clamp(0.0, 1.0).to(dtype)
    assert z.dtype == dtype and torch.equal(z, want)
    shift = beta * math.log(-gamma / zeta)
    assert torch.equal(
        expected_l0(log_alpha, beta=beta, gamma=gamma, zeta=zeta),
        torch.sigmoid(q - shift).to(dtype),
    )
    gate = hg.nn.HardConcreteGate(40, dim=1, beta=beta, gamma=gamma, zeta=zeta, generator=gen(7))
    gate = gate.to(dtype)
    with torch.no_grad():
        gate.log_alpha.copy_(log_alpha)
    x = torch.randn(3, 40, 2, generator=gen(8), dtype=torch.float64).to(dtype)
    y = gate(x)
    assert torch.equal(y, (x.to(compute) * want.to(compute).view(40, 1)).to(dtype))


# -- given noise (hg.hard_concrete(..., noise=u)) ------------------------------------------


def reference_sample(log_alpha: torch.Tensor, u: torch.Tensor, beta, gamma, zeta):
    """The reference code's quantile_concrete followed by hardtanh, in float64 (written
    from the paper's eq. 10 and l0_layers.py, independently of hardgrad)."""
    y = torch.sigmoid((torch.log(u) - torch.log(1 - u) + log_alpha) / beta)
    return torch.nn.functional.hardtanh(y * (zeta - gamma) + gamma, min_val=0.0, max_val=1.0)


def test_given_noise_matches_the_reference_values_and_gradients():
    la = (2 * torch.randn(5, 7, generator=gen(20), dtype=torch.float64)).requires_grad_(True)
    u = torch.rand(5, 7, generator=gen(21), dtype=torch.float64) * (1 - 2e-6) + 1e-6
    z = hg.hard_concrete(la, beta=0.5, gamma=-0.2, zeta=1.3, noise=u)
    ref_la = la.detach().clone().requires_grad_(True)
    want = reference_sample(ref_la, u, 0.5, -0.2, 1.3)
    torch.testing.assert_close(z, want, rtol=0, atol=1e-15)
    w = torch.randn(5, 7, generator=gen(22), dtype=torch.float64)
    (z * w).sum().backward()
    (want * w).sum().backward()
    torch.testing.assert_close(la.grad, ref_la.grad, rtol=1e-12, atol=1e-15)
    assert (z == 0).sum() > 0 and (z == 1).sum() > 0  # both clipped ends reached


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
def test_given_noise_reproduces_the_generator_draws(dtype):
    """The generator's draws, given as noise, give the same sample bit for bit."""
    la = (3 * torch.randn(3, 8, generator=gen(23))).to(dtype)
    compute = torch.float64 if dtype == torch.float64 else torch.float32
    info = torch.finfo(compute)
    u = torch.rand(3, 8, generator=gen(24), dtype=compute).clamp(info.tiny, 1 - info.eps)
    z = hg.hard_concrete(la, noise=u)
    assert z.dtype == dtype
    assert torch.equal(z, hg.hard_concrete(la, generator=gen(24)))


def test_per_example_gates_broadcast_and_sum_their_gradients():
    la = torch.tensor([-1.0, 0.0, 0.5, 2.0], dtype=torch.float64, requires_grad=True)
    u = torch.rand(6, 4, generator=gen(25), dtype=torch.float64)
    z = hg.hard_concrete(la, noise=u)
    assert z.shape == (6, 4)
    z.sum().backward()
    rows = la.detach().clone().requires_grad_(True)
    sum(reference_sample(rows, u[i], BETA, GAMMA, ZETA).sum() for i in range(6)).backward()
    torch.testing.assert_close(la.grad, rows.grad)
    # expand + generator gives a separate draw per row
    z = hg.hard_concrete(la.detach().expand(6, 4), generator=gen(26))
    assert z.shape == (6, 4) and len({tuple(r) for r in z.tolist()}) == 6


@pytest.mark.compile
def test_given_noise_empty_vmap_and_compile_with_changing_batch():
    la = torch.randn(4, generator=gen(27))
    assert hg.hard_concrete(la, noise=torch.rand(0, 4)).shape == (0, 4)
    u = torch.rand(5, 4, generator=gen(28)) * 0.98 + 0.01
    batched = torch.vmap(lambda v: hg.hard_concrete(la, noise=v))(u)
    assert torch.equal(batched, hg.hard_concrete(la, noise=u))
    grad = torch.func.grad(lambda q: hg.hard_concrete(q, noise=u[0]).sum())(la)
    q = la.clone().requires_grad_(True)
    hg.hard_concrete(q, noise=u[0]).sum().backward()
    torch.testing.assert_close(grad, q.grad)
    torch._dynamo.reset()
    compiled = torch.compile(
        lambda q, v: hg.hard_concrete(q, noise=v), fullgraph=True, dynamic=True, backend="aot_eager"
    )
    for batch in (3, 5, 2):
        v = torch.rand(batch, 4, generator=gen(batch)) * 0.98 + 0.01
        assert torch.equal(compiled(la, v), hg.hard_concrete(la, noise=v))
    torch._dynamo.reset()


def test_given_noise_bad_input():
    la = torch.zeros(4)
    with pytest.raises(ValueError, match="at most one of `noise` and `generator`"):
        hg.hard_concrete(la, noise=torch.full((4,), 0.5), generator=gen())
    with pytest.raises(TypeError, match=r"`noise`.*floating-point"):
        hg.hard_concrete(la, noise=torch.ones(4, dtype=torch.long))
    with pytest.raises(TypeError, match=r"`noise`.*torch.Tensor"):
        hg.hard_concrete(la, noise=0.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"`noise` broadcastable.*\(4,\).*\(3,\)"):
        hg.hard_concrete(la, noise=torch.full((3,), 0.5))
    for bad in (0.0, 1.0, float("nan"), 1.5):
        u = torch.full((2, 4), 0.5)
        u[1, 2] = bad
        with pytest.raises(ValueError, match=r"`noise` strictly inside \(0, 1\)"):
            hg.hard_concrete(la, noise=u)
    hg.set_validation(False)
    try:  # unchecked: u = 0 and 1 give the clipped ends, never NaN
        z = hg.hard_concrete(la.requires_grad_(True), noise=torch.tensor([0.0, 1.0, 0.5, 0.5]))
        z.sum().backward()
    finally:
        hg.set_validation(True)
    assert z.tolist() == [0.0, 1.0, 0.5, 0.5] and torch.isfinite(la.grad).all()
