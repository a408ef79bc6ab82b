"""``hg.nn.LIF``: the recurrence against an independent float64 one, BPTT gradients against a
hand-written adjoint, snnTorch's conventions, state, compile and bad input."""

from __future__ import annotations

import functools
import io
import math

import pytest
import torch

import hardgrad as hg

T, B, N = 12, 3, 5


def _inputs(seed: int = 0, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(T, B, N, generator=g, dtype=torch.float64) * 1.2).to(dtype)


def reference(x, beta, threshold, reset, mem0=None):
    """The discrete LIF equations, written out with plain float64 tensors."""
    m = torch.zeros_like(x[0]) if mem0 is None else mem0.clone()
    spikes, membranes = [], []
    for x_t in x:
        r = (m > threshold).double()  # the previous step's spike
        if reset == "subtract":
            m = beta * m + x_t - r * threshold
        elif reset == "zero":
            m = beta * (m * (1 - r)) + x_t
        else:
            m = beta * m + x_t
        spikes.append((m > threshold).double())
        membranes.append(m)
    return torch.stack(spikes), torch.stack(membranes)


# --------------------------------------------------------------------------- forward


@pytest.mark.parametrize("reset", ["subtract", "zero", "none"])
@pytest.mark.parametrize("per_neuron", [False, True])
def test_forward_equals_the_float64_recurrence(reset, per_neuron):
    x = _inputs(1) - (0.3 if reset == "none" else 0.0)  # without reset, fire less
    g = torch.Generator().manual_seed(2)
    if per_neuron:
        beta = torch.rand(N, generator=g, dtype=torch.float64)
        threshold = 0.5 + torch.rand(N, generator=g, dtype=torch.float64)
    else:
        beta, threshold = 0.8, 0.9
    mem0 = torch.rand(B, N, generator=g, dtype=torch.float64) * 2
    lif = hg.nn.LIF(beta, threshold, reset=reset).double()
    spikes, membranes = reference(x, beta, threshold, reset, mem0)
    assert spikes.sum() > 5 and (spikes == 0).sum() > 5  # both outcomes occur
    got_s, got_m, final = lif.sequence(x, mem0, return_membranes=True)
    assert torch.equal(got_s, spikes) and torch.equal(got_m, membranes)
    assert torch.equal(final, membranes[-1])
    mem = mem0
    for t in range(T):  # the step API gives the same, step by step
        spk, mem = lif(x[t], mem)
        assert torch.equal(spk, spikes[t]) and torch.equal(mem, membranes[t])


def test_snntorch_conventions_by_hand():
    """snnTorch's Leaky: the spike is H(m_t - theta) of the new membrane; the reset is
    applied at the next step from that spike; subtract removes theta, zero zeroes the
    previous membrane but keeps the new input; the membrane at threshold does not fire."""
    x = torch.tensor([[0.6], [0.6], [0.6], [1.0]], dtype=torch.float64)
    sub = hg.nn.LIF(1.0, 1.0, reset="subtract")
    s, m, _ = sub.sequence(x, return_membranes=True)
    assert s.flatten().tolist() == [0, 1, 0, 1]
    assert m.flatten().tolist() == pytest.approx([0.6, 1.2, 0.8, 1.8])
    zero = hg.nn.LIF(1.0, 1.0, reset="zero")
    s, m, _ = zero.sequence(x, return_membranes=True)
    assert s.flatten().tolist() == [0, 1, 0, 1]
    assert m.flatten().tolist() == pytest.approx([0.6, 1.2, 0.6, 1.6])
    at = hg.nn.LIF(0.5, 1.0)
    spk, mem = at(torch.tensor([1.0]))
    assert spk.item() == 0.0 and mem.item() == 1.0  # strict inequality


def test_default_surrogate_is_snntorch_fast_sigmoid_and_atan_matches():
    lif = hg.nn.LIF(0.9)
    assert lif.surrogate == hg.surrogates.FastSigmoid(slope=25.0)
    u = torch.tensor([-0.3, 0.0, 0.01, 0.7], dtype=torch.float64)
    # snnTorch's formulas: fast_sigmoid 1/(25|u|+1)^2, atan alpha/2 / (1 + (pi/2 alpha u)^2)
    for surrogate, expected in (
        ("fast_sigmoid", 1 / (25 * u.abs() + 1) ** 2),
        ("atan", 1.0 / (1 + (math.pi / 2 * 2.0 * u) ** 2)),
    ):
        mem = (u + 1.0).requires_grad_()
        # one step from rest with beta 0: m = x, spike H(x - 1)
        spk, _ = hg.nn.LIF(0.0, surrogate=surrogate)(mem)
        spk.sum().backward()
        torch.testing.assert_close(mem.grad, expected)


def test_half_and_float_keep_dtype():
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        x = _inputs(3, dtype)
        spikes, mem = hg.nn.LIF(0.75).sequence(x)
        assert spikes.dtype == dtype and mem.dtype == dtype
        ref, _ = reference(x.double(), 0.75, 1.0, "subtract")
        assert (spikes.double() != ref).float().mean() < 0.05  # rounding may flip a few


# --------------------------------------------------------------------------- backward


def _bptt(x, g, beta, th, reset, detach_reset, slope=25.0):
    """Hand-written backward of sum(g * spikes) (fast sigmoid), the adjoint recurrence."""
    _, m = reference(x, beta, th, reset)
    d = lambda u: 1 / (slope * u.abs() + 1) ** 2  # noqa: E731
    prev = torch.cat([torch.zeros_like(m[:1]), m[:-1]])
    r = (prev > th).double()
    delta = torch.zeros_like(m[0])
    grads_x = torch.zeros_like(x)
    grad_beta = torch.zeros_like(m[0])
    grad_th = torch.zeros_like(m[0])
    for t in reversed(range(len(x))):
        # dL/dm_t = direct through s_t + through m_{t+1}
        dm = g[t] * d(m[t] - th)
        if t + 1 < len(x):
            if reset == "subtract":
                dm = dm + delta * beta
                if not detach_reset:  # m_{t+1} -= H(m_t - th) th
                    dm = dm - delta * th * d(m[t] - th)
            elif reset == "zero":
                r_next = (m[t] > th).double()
                dm = dm + delta * beta * (1 - r_next)
                if not detach_reset:
                    dm = dm - delta * beta * m[t] * d(m[t] - th)
            else:
                dm = dm + delta * beta
        delta = dm
        grads_x[t] = delta
        if reset == "zero":
            grad_beta += delta * prev[t] * (1 - r[t])
        else:
            grad_beta += delta * prev[t]
        grad_th -= g[t] * d(m[t] - th)  # through s_t = H(m_t - th)
        if reset == "subtract":
            grad_th -= delta * r[t]
            if not detach_reset:  # r_t = H(m_{t-1} - th) depends on th too
                grad_th += delta * th * d(prev[t] - th)
        elif reset == "zero" and not detach_reset:
            grad_th += delta * beta * prev[t] * d(prev[t] - th)
    return grads_x, grad_beta.sum(), grad_th.sum()


@pytest.mark.parametrize("reset", ["subtract", "zero", "none"])
@pytest.mark.parametrize("detach_reset", [True, False])
def test_gradients_equal_hand_written_bptt(reset, detach_reset):
    x = _inputs(4)
    g = torch.randn(T, B, N, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    beta, th = 0.85, 0.95
    lif = hg.nn.LIF(
        torch.tensor(beta, dtype=torch.float64),
        torch.tensor(th, dtype=torch.float64),
        reset=reset,
        learn_beta=True,
        learn_threshold=True,
        detach_reset=detach_reset,
    )
    leaf = x.clone().requires_grad_()
    spikes, _ = lif.sequence(leaf)
    (spikes * g).sum().backward()
    gx, gb, gt = _bptt(x, g, beta, th, reset, detach_reset)
    torch.testing.assert_close(leaf.grad, gx, rtol=1e-12, atol=1e-12)
    # (learned numbers are stored with shape (1,), see LIF)
    torch.testing.assert_close(lif.beta.grad.reshape(()), gb, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(lif.threshold.grad.reshape(()), gt, rtol=1e-12, atol=1e-12)
    assert leaf.grad.abs().sum() > 0 and lif.beta.grad != 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("reset", ["subtract", "zero", "none"])
@pytest.mark.parametrize("detach_reset", [True, False])
@pytest.mark.parametrize("threshold", [1.0, 0.95])
def test_number_settings_equal_tensor_settings_bit_for_bit(dtype, reset, detach_reset, threshold):
    """Number settings enter the eager kernels as cached 0-d tensors, and a threshold of 1
    skips its multiplication; spikes, membranes and the input gradient must stay those of
    the same settings given as tensors (buffers) of the input's dtype. (Half types keep
    computing with the numbers themselves, unrounded, as before.)"""
    x = _inputs(6, dtype)
    g = torch.randn(T, B, N, generator=torch.Generator().manual_seed(7)).to(dtype)
    results = []
    as_tensor = functools.partial(torch.tensor, dtype=dtype)
    for beta, th in ((0.85, threshold), (as_tensor(0.85), as_tensor(threshold))):
        lif = hg.nn.LIF(beta, th, reset=reset, detach_reset=detach_reset, surrogate="atan")
        leaf = x.clone().requires_grad_()
        spikes, membranes, _ = lif.sequence(leaf, return_membranes=True)
        (spikes * g).sum().backward()
        results.append((spikes, membranes.detach(), leaf.grad))
    for number, tensor in zip(*results, strict=True):
        assert torch.equal(number, tensor)
    assert results[0][0].sum() > 0  # some spikes


def test_per_neuron_learned_beta_gets_per_neuron_gradients():
    x = _inputs(6)
    beta = torch.full((N,), 0.85, dtype=torch.float64)
    lif = hg.nn.LIF(beta, 0.95, learn_beta=True)
    spikes, _ = lif.sequence(x)
    g = torch.randn(T, B, N, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    (spikes * g).sum().backward()
    # per neuron: the scalar-beta gradient summed over the batch only
    expected = torch.zeros(N, dtype=torch.float64)
    for n in range(N):
        gn = torch.zeros_like(g)
        gn[..., n] = g[..., n]
        expected[n] = _bptt(x, gn, 0.85, 0.95, "subtract", True)[1]
    torch.testing.assert_close(lif.beta.grad, expected, rtol=1e-12, atol=1e-12)


def test_learned_beta_is_clamped_in_the_forward():
    lif = hg.nn.LIF(0.5, learn_beta=True)
    with torch.no_grad():
        lif.beta.fill_(1.7)  # an optimizer step beyond 1
    _, m, _ = lif.sequence(torch.full((3, 1), 0.25), return_membranes=True)
    assert m.flatten().tolist() == [0.25, 0.5, 0.75]  # decay 1, not 1.7


# --------------------------------------------------------------------------- state


def test_init_hidden_keeps_the_membrane_and_returns_spikes_only():
    x = _inputs(8)
    kept = hg.nn.LIF(0.8, init_hidden=True).double()
    spikes = torch.stack([kept(x_t) for x_t in x])
    expected, membranes = reference(x, 0.8, 1.0, "subtract")
    assert torch.equal(spikes, expected) and torch.equal(kept.mem, membranes[-1])
    kept.detach_hidden()
    assert not kept.mem.requires_grad
    kept.reset_hidden()
    assert kept.mem is None
    spk_seq, mem = kept.sequence(x)
    assert torch.equal(spk_seq, expected) and torch.equal(kept.mem, mem)
    model = torch.nn.Sequential(torch.nn.Linear(4, N), hg.nn.LIF(0.9, init_hidden=True))
    assert model(torch.ones(2, 4)).shape == (2, N)
    with pytest.raises(ValueError, match="init_hidden"):
        kept(x[0], torch.zeros(B, N, dtype=torch.float64))


def test_state_dict_round_trip_and_settings():
    beta = torch.linspace(0.2, 0.9, N)
    lif = hg.nn.LIF(beta, torch.full((N,), 1.5), learn_beta=True, reset="zero")
    with torch.no_grad():
        lif.beta.add_(0.01)
    buffer = io.BytesIO()
    torch.save(lif.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    assert set(state) == {"beta", "threshold"}
    other = hg.nn.LIF(torch.zeros(N), torch.ones(N), learn_beta=True, reset="zero")
    other.load_state_dict(state)
    assert torch.equal(other.beta, lif.beta) and torch.equal(other.threshold, lif.threshold)
    x = torch.rand(5, 2, N)
    assert torch.equal(other.sequence(x)[0], lif.sequence(x)[0])
    wrong = hg.nn.LIF(torch.zeros(N), torch.ones(N), learn_beta=True, reset="subtract")
    with pytest.raises(RuntimeError, match="reset"):
        wrong.load_state_dict(state)
    fixed = hg.nn.LIF(0.5, 2.0)
    assert not fixed.state_dict()  # numbers are settings, checked on load
    with pytest.raises(RuntimeError, match="beta"):
        hg.nn.LIF(0.25, 2.0).load_state_dict(fixed.state_dict())


def test_repr():
    assert "beta=learned[5]" in repr(hg.nn.LIF(torch.ones(5) / 2, learn_beta=True))
    assert "detach_reset=False" in repr(hg.nn.LIF(0.5, detach_reset=False))


# --------------------------------------------------------------------------- compile


@pytest.mark.compile
def test_compiled_sequence_loop_fullgraph_equals_eager():
    torch._dynamo.reset()
    lif = hg.nn.LIF(0.9, 1.0, learn_beta=True)
    layer = torch.nn.Linear(6, 4)

    def run(x):
        spikes, mem = lif.sequence(layer(x))
        return spikes.sum() + mem.sum()

    compiled = torch.compile(run, fullgraph=True, backend="aot_eager")
    x = torch.rand(10, 3, 6, generator=torch.Generator().manual_seed(0)) * 2
    out_c = compiled(x)
    out_c.backward()
    grads_c = [p.grad.clone() for p in (lif.beta, layer.weight)]
    for p in (lif.beta, layer.weight):
        p.grad = None
    out_e = run(x)
    out_e.backward()
    assert torch.equal(out_c, out_e)
    for gc, p in zip(grads_c, (lif.beta, layer.weight), strict=True):
        torch.testing.assert_close(gc, p.grad)
    torch._dynamo.reset()


@pytest.mark.compile
def test_dynamic_shapes_compile_with_the_documented_setting():
    """dynamic=True from the start needs specialize_float (torch 2.13; the spiking guide)."""
    lif = hg.nn.LIF(0.9, 0.5)
    run = lambda x: lif.sequence(x)[0].sum(0)  # noqa: E731
    torch._dynamo.reset()
    with torch._dynamo.config.patch(specialize_float=True):
        compiled = torch.compile(run, dynamic=True, fullgraph=True, backend="aot_eager")
        for batch in (4, 3):
            x = torch.rand(5, batch, 2, generator=torch.Generator().manual_seed(batch))
            assert torch.equal(compiled(x), run(x))
    torch._dynamo.reset()


def test_torch_func_grad_and_vmap_agree_with_eager():
    lif = hg.nn.LIF(0.9, 0.5)
    x = _inputs(11).float()
    loss = lambda w: lif.sequence(x * w)[0].sum()  # noqa: E731
    w = torch.tensor(1.0, requires_grad=True)
    loss(w).backward()
    torch.testing.assert_close(torch.func.grad(loss)(torch.tensor(1.0)), w.grad)
    batched = torch.vmap(lambda xs: lif.sequence(xs)[0], in_dims=1, out_dims=1)(x)
    assert torch.equal(batched, lif.sequence(x)[0])


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "kwargs, error, name",
    [
        ({"beta": 1.5}, ValueError, "beta"),
        ({"beta": -0.1}, ValueError, "beta"),
        ({"beta": torch.tensor([0.5, 1.2])}, ValueError, "beta"),
        ({"beta": "0.5"}, TypeError, "beta"),
        ({"beta": 0.5, "threshold": 0.0}, ValueError, "threshold"),
        ({"beta": 0.5, "threshold": -1.0}, ValueError, "threshold"),
        ({"beta": 0.5, "threshold": torch.tensor([1.0, 0.0])}, ValueError, "threshold"),
        ({"beta": 0.5, "reset": "hard"}, ValueError, "reset"),
        ({"beta": 0.5, "surrogate": "masked"}, ValueError, "surrogate"),
        ({"beta": 0.5, "learn_beta": 1}, TypeError, "learn_beta"),
    ],
)
def test_bad_settings_name_the_argument(kwargs, error, name):
    with pytest.raises(error, match=f"`{name}`"):
        hg.nn.LIF(**kwargs)


def test_bad_shapes_name_the_argument():
    lif = hg.nn.LIF(0.5)
    with pytest.raises(ValueError, match="`mem`"):
        lif(torch.zeros(2, 3), torch.zeros(3, 2))
    with pytest.raises(ValueError, match="`mem`"):
        lif.sequence(torch.zeros(4, 2, 3), torch.zeros(4, 2, 3))
    with pytest.raises(ValueError, match="`x`"):
        lif.sequence(torch.tensor(1.0))
    with pytest.raises(TypeError, match="`x`"):
        lif(torch.zeros(3, dtype=torch.long))
    per_neuron = hg.nn.LIF(torch.full((3,), 0.5))
    with pytest.raises(ValueError, match="`beta`"):
        per_neuron(torch.zeros(2, 4))
    with pytest.raises(ValueError, match="`mem`"):
        lif(torch.zeros(2, 3), torch.zeros(2, 1, 3))
    # A state that broadcasts (snnTorch-style zeros(1)) or None (init_leaky) is accepted.
    x = torch.full((2, 3), 1.5)
    assert torch.equal(lif(x, torch.zeros(1))[1], lif(x, lif.init_leaky())[1])
    empty, mem = lif.sequence(torch.zeros(0, 2, 3))
    assert empty.shape == (0, 2, 3) and mem.shape == (2, 3)
