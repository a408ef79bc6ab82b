"""Stateful estimators of ``hg.expectation``: ``Reinforce(baseline="ema")``, ``REBAR`` and
``RELAX`` (API.md section 3, the stateful-estimator paragraph).

* the EMA baseline's arithmetic, its timing (a call uses the baseline from before it),
  eval mode, validation and repr;
* ``state_dict`` round trips;
* REBAR/RELAX parameter gradients against a central finite difference of
  ``sum((w * g_hat)^2)`` recomputed with the same noise, RELAX(None) == REBAR, the
  objective-free RELAX, and that training the estimator's parameters lowers the variance;
* ``hg.estimators.get`` makes stateful estimators afresh;
* two gloo ranks under ``DistributedDataParallel`` keep every piece of state identical;
  REBAR/RELAX reduce their variance gradients as the sum over ranks divided by ``W^2``,
  and a non-finite one on any rank skips the update on all of them
  (``tests/test_distributed.py`` compares a whole 2-rank training with one process).

Statistical tests are seeded (so deterministic) and each states the false-failure rate of
its threshold for a fresh seed.
"""

from __future__ import annotations

import io
import math
import os
import socket
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import Tensor

import hardgrad as hg
from _spawn import run_ranks
from hardgrad.estimators import REBAR, RELAX, RLOO, Reinforce

F64 = torch.float64


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _net(d: int, hidden: int = 8, seed: int = 0) -> torch.nn.Module:
    """A small control-variate network ``(n, *batch, d) -> (n, *batch)``."""
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(d, hidden),
        torch.nn.Tanh(),
        torch.nn.Linear(hidden, 1),
        torch.nn.Flatten(-2),
    )


# --------------------------------------------------------------------------------------
# 1. Reinforce(baseline="ema")
# --------------------------------------------------------------------------------------

COEF = torch.tensor([1.0, -2.0, 3.0, 0.5], dtype=F64)


def _recording_objective(seen: list[Tensor]) -> Callable[[Tensor], Tensor]:
    """``f(b) = 1 + b . COEF`` (one value per sample), recording every sample it sees."""

    def f(b: Tensor) -> Tensor:
        seen.append(b.detach().clone())
        return 1.0 + (b * COEF).sum(-1)

    return f


def _ema_call(
    est: Reinforce, theta: Tensor, seed: int, n: int = 4
) -> tuple[Tensor, Tensor, Tensor]:
    """One call; returns (samples, f values, logits gradient)."""
    seen: list[Tensor] = []
    theta.grad = None
    value = hg.expectation(
        _recording_objective(seen), theta, estimator=est, num_samples=n, generator=_gen(seed)
    )
    value.backward()
    assert len(seen) == 1, "Reinforce evaluates f once per call"
    (b,) = seen
    f = 1.0 + (b * COEF).sum(-1)
    torch.testing.assert_close(value.detach(), f.mean(), rtol=0, atol=0)
    assert theta.grad is not None
    return b, f, theta.grad.clone()


def _by_hand(b: Tensor, f: Tensor, theta: Tensor, beta: float) -> Tensor:
    """``mean_s (f_s - beta) (b_s - sigmoid(theta))``."""
    return ((f - beta).unsqueeze(-1) * (b - torch.sigmoid(theta.detach()))).mean(0)


def test_reinforce_ema_baseline_arithmetic_and_timing():
    decay = 0.8
    est = Reinforce(baseline="ema", decay=decay)
    assert est.training
    # The average is kept in float32 (torch.compile drops float64 buffer updates), so the
    # baseline carries float32 rounding: comparisons involving it use rtol 1e-6.
    assert est.ema.dtype == torch.float32 and float(est.ema) == 0.0 and int(est.steps) == 0
    theta = torch.tensor([0.3, -0.7, 1.1, 0.0], dtype=F64, requires_grad=True)

    # First call: baseline 0; afterwards steps == 1 and the corrected baseline is mean f.
    b, f, grad = _ema_call(est, theta, seed=1)
    torch.testing.assert_close(grad, _by_hand(b, f, theta, 0.0), rtol=1e-6, atol=1e-6)
    assert int(est.steps) == 1
    ema = (1 - decay) * float(f.mean())
    assert float(est.ema) == pytest.approx(ema, rel=1e-6, abs=1e-7)
    assert float(est.ema) / (1 - decay) == pytest.approx(float(f.mean()), rel=1e-6)

    # Later calls: the gradient uses the baseline from BEFORE the call, then it updates.
    for step, seed in enumerate((2, 3, 4, 5), start=1):
        beta_before = ema / (1 - decay**step)
        b, f, grad = _ema_call(est, theta, seed=seed)
        expected = _by_hand(b, f, theta, beta_before)
        torch.testing.assert_close(grad, expected, rtol=1e-6, atol=1e-6)
        ema = decay * ema + (1 - decay) * float(f.mean())
        beta_after = ema / (1 - decay ** (step + 1))
        # The check discriminates: the updated baseline would give another gradient.
        assert abs(beta_after - beta_before) > 1e-3
        assert not torch.allclose(grad, _by_hand(b, f, theta, beta_after), rtol=1e-6, atol=1e-9)
        assert int(est.steps) == step + 1
        assert float(est.ema) == pytest.approx(ema, rel=1e-6)

    # Eval mode: the baseline is used but the state does not move.
    est.eval()
    ema_before, steps_before = est.ema.clone(), est.steps.clone()
    beta = float(est.ema) / (1 - decay ** int(est.steps))
    for seed in (6, 7):
        b, f, grad = _ema_call(est, theta, seed=seed)
        torch.testing.assert_close(grad, _by_hand(b, f, theta, beta), rtol=1e-6, atol=1e-6)
    assert torch.equal(est.ema, ema_before) and torch.equal(est.steps, steps_before)

    # Back in training mode it moves again.
    est.train()
    b, f, grad = _ema_call(est, theta, seed=8)
    torch.testing.assert_close(grad, _by_hand(b, f, theta, beta), rtol=1e-6, atol=1e-6)
    assert int(est.steps) == int(steps_before) + 1
    expected_ema = decay * float(ema_before) + (1 - decay) * float(f.mean())
    assert float(est.ema) == pytest.approx(expected_ema, rel=1e-6)


def test_reinforce_ema_weights_by_upstream_gradient_per_prefix_entry():
    """With a prefix, entry j's score is weighted by w_j (f_j - beta); beta = the EMA of the
    mean of all entries."""
    decay = 0.5
    est = Reinforce(baseline="ema", decay=decay)
    theta = torch.tensor(
        [[0.2, -0.4, 0.9, 0.1], [-1.0, 0.5, 0.0, 0.3]], dtype=F64, requires_grad=True
    )
    w = torch.tensor([1.5, -0.5], dtype=F64)
    seen: list[Tensor] = []
    f_obj = _recording_objective(seen)
    for seed in (11, 12):  # call 1 sets the baseline to call 1's mean f
        theta.grad = None
        (
            w * hg.expectation(f_obj, theta, estimator=est, num_samples=3, generator=_gen(seed))
        ).sum().backward()
    first, second = seen
    beta = float((1.0 + (first * COEF).sum(-1)).mean())
    f2 = 1.0 + (second * COEF).sum(-1)  # (3, 2)
    expected = w.unsqueeze(-1) * (
        (f2 - beta).unsqueeze(-1) * (second - torch.sigmoid(theta.detach()))
    ).mean(0)
    torch.testing.assert_close(theta.grad, expected, rtol=1e-6, atol=1e-6)  # float32 average


@pytest.mark.parametrize("decay", [0, 1, -1, 1.5, 0.0, 1.0, math.nan])
def test_reinforce_bad_decay_value(decay):
    with pytest.raises(ValueError, match="decay"):
        Reinforce(baseline="ema", decay=decay)


@pytest.mark.parametrize("decay", ["x", None, True, [0.9]])
def test_reinforce_bad_decay_type(decay):
    with pytest.raises(TypeError, match="decay"):
        Reinforce(baseline="ema", decay=decay)


@pytest.mark.parametrize("baseline", ["mean", "EMA", "", 3])
def test_reinforce_bad_baseline(baseline):
    with pytest.raises((ValueError, TypeError), match="baseline"):
        Reinforce(baseline=baseline)


def test_reinforce_repr_and_state():
    assert repr(Reinforce(baseline="ema", decay=0.8)) == "Reinforce(baseline='ema', decay=0.8)"
    assert "baseline='ema'" in repr(Reinforce("ema")) and "decay=0.9" in repr(Reinforce("ema"))
    assert "baseline=None" in repr(Reinforce())
    assert "baseline='optimal'" in repr(Reinforce("optimal"))
    assert set(Reinforce("ema").state_dict()) == {"ema", "steps"}
    assert list(Reinforce("ema").parameters()) == []


# --------------------------------------------------------------------------------------
# 2. state_dict round trips
# --------------------------------------------------------------------------------------

D_TOY = 4
TARGET = torch.tensor([0.45, 0.55, 0.3, 0.7])


def _toy(b: Tensor) -> Tensor:
    """A smooth, non-separable objective, one value per sample and row: ``(n, B)``."""
    t = TARGET.to(b.dtype)
    return ((b - t) ** 2).sum(-1) + 0.5 * b[..., 0] * b[..., 1] - 0.3 * b[..., 2] * b[..., 3]


def _call(est, theta: Tensor, seed: int, weights: Tensor | None = None, n: int = 2):
    """value, logits gradient and the estimator's parameter gradients for one call."""
    theta = theta.detach().clone().requires_grad_()
    if isinstance(est, torch.nn.Module):
        est.zero_grad(set_to_none=True)
    value = hg.expectation(_toy, theta, estimator=est, num_samples=n, generator=_gen(seed))
    w = torch.ones_like(value) if weights is None else weights
    (w * value).sum().backward()
    grads = {}
    if isinstance(est, torch.nn.Module):
        grads = {
            k: p.grad.detach().clone() for k, p in est.named_parameters() if p.grad is not None
        }
    return value.detach(), theta.grad, grads


def _train(est: torch.nn.Module, theta: Tensor, steps: int, seed: int, lr: float = 0.05) -> None:
    opt = torch.optim.Adam(est.parameters(), lr=lr)
    for k in range(steps):
        opt.zero_grad()
        _call(est, theta, seed=seed + k)
        opt.step()


def _assert_state_equal(a: torch.nn.Module, b: torch.nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb)
    for key in sa:
        assert torch.equal(sa[key], sb[key]), key


def _assert_same_call(a, b, theta: Tensor, seed: int) -> None:
    va, ga, pa = _call(a, theta, seed)
    vb, gb, pb = _call(b, theta, seed)
    assert torch.equal(va, vb)
    assert torch.equal(ga, gb)
    assert list(pa) == list(pb)
    for key in pa:
        assert torch.equal(pa[key], pb[key]), key


def _make_relax(seed: int) -> RELAX:
    return RELAX(_net(D_TOY, seed=seed), tau=0.4, scale=0.8)


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda seed: Reinforce("ema", decay=0.7), id="reinforce_ema"),
        pytest.param(lambda seed: REBAR(), id="rebar"),
        pytest.param(_make_relax, id="relax_net"),
    ],
)
def test_state_dict_round_trip(make):
    theta = torch.tensor([[0.3, -0.5, 1.2, 0.0], [-0.8, 0.4, 0.1, -1.5]])
    original = make(0)
    if list(original.parameters()):
        _train(original, theta, steps=5, seed=100)
    else:
        for k in range(5):
            _call(original, theta, seed=100 + k)
    fresh = make(1)  # another initialisation (another net seed for RELAX)
    # The round trip must carry something: the fresh instance starts elsewhere, and
    # (without loading) gives another gradient on the same seed.
    _, g_orig, _ = _call(original, theta, seed=7)
    _, g_fresh, _ = _call(fresh, theta, seed=7)
    assert not torch.equal(g_orig, g_fresh)
    assert any(not torch.equal(v, fresh.state_dict()[k]) for k, v in original.state_dict().items())

    buffer = io.BytesIO()  # through serialisation, as a checkpoint would go
    torch.save(original.state_dict(), buffer)
    buffer.seek(0)
    fresh.load_state_dict(torch.load(buffer, weights_only=True))
    _assert_state_equal(original, fresh)
    for seed in (8, 9):
        _assert_same_call(original, fresh, theta, seed)
    _assert_state_equal(original, fresh)  # state moved (EMA) identically
    if list(original.parameters()):  # and one identical optimizer step each
        for est in (original, fresh):
            _call(est, theta, seed=10)
            with torch.no_grad():
                for p in est.parameters():
                    p -= 0.1 * p.grad
        _assert_state_equal(original, fresh)
        _assert_same_call(original, fresh, theta, seed=11)
    if isinstance(original, Reinforce):
        assert int(original.steps) == int(fresh.steps) == 5 + 1 + 2  # training calls + probe + 2


# --------------------------------------------------------------------------------------
# 3. REBAR and RELAX
# --------------------------------------------------------------------------------------

W_UP = torch.tensor([0.5, -1.3, 2.0], dtype=F64)  # non-uniform upstream gradient


def _variance_objective(est, theta: Tensor, seed: int) -> float:
    """``sum((w * g_hat)^2)`` for one call: ``logits.grad`` is ``w * g_hat``."""
    _, grad, _ = _call(est, theta, seed, weights=W_UP, n=3)
    return float((grad**2).sum())


def _fd_cases():
    return [
        pytest.param(lambda: REBAR(tau=0.6, scale=0.9).double(), ["scale", "log_tau"], id="rebar"),
        pytest.param(
            lambda: RELAX(_net(D_TOY, seed=3), tau=0.7, scale=1.2).double(),
            ["scale", "log_tau", "control_variate.0.weight", "control_variate.2.bias"],
            id="relax_net",
        ),
        pytest.param(
            lambda: RELAX(_net(D_TOY, seed=4), use_objective=False).double(),
            ["control_variate.0.weight", "control_variate.0.bias", "control_variate.2.weight"],
            id="relax_net_only",
        ),
    ]


@pytest.mark.parametrize(("make", "names"), _fd_cases())
def test_parameter_gradients_are_the_variance_gradient(make, names):
    est = make()
    theta = torch.tensor(
        [[0.3, -0.5, 1.2, 0.0], [-0.8, 0.4, 0.1, -1.5], [1.0, 2.0, -0.2, 0.6]], dtype=F64
    )
    seed = 21
    _, _, grads = _call(est, theta, seed, weights=W_UP, n=3)
    params = dict(est.named_parameters())
    h = 1e-5
    checked = 0
    for name in names:
        p = params[name]
        assert name in grads, f"{name} received no gradient"
        assert grads[name].dtype == F64
        index = (0,) * p.dim()  # first element of each tensor
        with torch.no_grad():
            original = p[index].item()
            p[index] = original + h
        plus = _variance_objective(est, theta, seed)
        with torch.no_grad():
            p[index] = original - h
        minus = _variance_objective(est, theta, seed)
        with torch.no_grad():
            p[index] = original
        fd = (plus - minus) / (2 * h)
        analytic = float(grads[name][index])
        assert abs(fd) > 1e-4, f"{name}: degenerate check (fd={fd})"
        assert analytic == pytest.approx(fd, rel=1e-6, abs=1e-9), name
        checked += 1
    assert checked == len(names)


@pytest.mark.parametrize(("tau", "scale"), [(0.5, 1.0), (0.3, 0.7), (2.0, -0.4)])
def test_relax_without_network_is_rebar(tau, scale):
    theta = torch.tensor([[0.3, -0.5, 1.2, 0.0], [-0.8, 0.4, 0.1, -1.5]])
    w = torch.tensor([0.7, -1.1])
    rebar, relax = REBAR(tau=tau, scale=scale), RELAX(None, tau=tau, scale=scale)
    assert set(dict(rebar.named_parameters())) == set(dict(relax.named_parameters()))
    for seed in (0, 1, 2):
        v1, g1, p1 = _call(rebar, theta, seed, weights=w, n=3)
        v2, g2, p2 = _call(relax, theta, seed, weights=w, n=3)
        assert torch.equal(v1, v2) and torch.equal(g1, g2)
        assert set(p1) == set(p2) == {"scale", "log_tau"}
        for key in p1:
            assert torch.equal(p1[key], p2[key]), key


@pytest.mark.parametrize("network_dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("logits_dtype", [torch.float32, torch.float16])
def test_relax_with_a_half_precision_network(network_dtype, logits_dtype):
    """A ``.half()`` control-variate network gets z in its own dtype (it used to raise
    "mat1 and mat2 must have the same dtype"); the logits gradient and the network's
    variance gradient match those of the float32 copy of the network on the same draws, to
    the network dtype's rounding."""
    d = 5
    results = []
    for dtype in (torch.float32, network_dtype):
        net = _net(d, seed=3).to(dtype)
        est = RELAX(net)
        theta = torch.linspace(-1.5, 1.5, 3 * d).reshape(3, d).to(logits_dtype).requires_grad_()
        value = hg.expectation(
            lambda b: ((b - 0.4) ** 2).sum(-1), theta, estimator=est, num_samples=6,
            generator=_gen(11),
        )  # fmt: skip
        value.sum().backward()
        assert theta.grad is not None and theta.grad.dtype == logits_dtype
        weight = net[0].weight.grad
        assert weight is not None and weight.dtype == dtype
        assert bool(torch.isfinite(theta.grad).all()) and bool(torch.isfinite(weight).all())
        results.append((theta.grad.double(), weight.double()))
    (theta_ref, weight_ref), (theta_half, weight_half) = results
    tolerance = (
        {"rtol": 0.05, "atol": 0.02}
        if network_dtype == torch.float16
        else {"rtol": 0.2, "atol": 0.1}
    )
    torch.testing.assert_close(theta_half, theta_ref, **tolerance)
    scale = float(weight_ref.abs().max())
    torch.testing.assert_close(weight_half / scale, weight_ref / scale, **tolerance)


def test_relax_objective_free_evaluates_f_once():
    d = 5
    net = _net(d, seed=5)
    est = RELAX(net, use_objective=False)
    calls: list[Tensor] = []

    def f(b: Tensor) -> Tensor:  # not differentiable: integer arithmetic on the bits
        calls.append(b.detach().clone())
        return (b.long().sum(-1) % 2).to(b.dtype)

    theta = torch.randn(3, d, requires_grad=True)
    for k in range(3):
        before = len(calls)
        est.zero_grad(set_to_none=True)
        theta.grad = None
        hg.expectation(f, theta, estimator=est, num_samples=4, generator=_gen(k)).sum().backward()
        assert len(calls) == before + 1, "f must be evaluated once per call"
        assert calls[-1].shape == (4, 3, d)
        assert bool(((calls[-1] == 0) | (calls[-1] == 1)).all()), "only hard samples"
        assert theta.grad is not None and bool(torch.isfinite(theta.grad).all())
        for name, p in net.named_parameters():
            assert p.grad is not None, name
            assert bool(torch.isfinite(p.grad).all()) and float(p.grad.abs().sum()) > 0, name
        for p in (est.scale, est.log_tau):  # unused without the objective
            assert p.grad is None or float(p.grad.abs().sum()) == 0.0

    # With the objective, three evaluations per call (hard, relaxed z, relaxed z-tilde).
    counted: list[int] = []

    def smooth(b: Tensor) -> Tensor:
        counted.append(1)
        return ((b - 0.4) ** 2).sum(-1)

    for est in (REBAR(), RELAX(_net(d))):
        counted.clear()
        hg.expectation(
            smooth, theta, estimator=est, num_samples=4, generator=_gen(0)
        ).sum().backward()
        assert len(counted) == 3


# -- variance reduction ----------------------------------------------------------------

D_VAR = 6
THETA_VAR = torch.linspace(-1.0, 1.0, D_VAR, dtype=F64)


def _variance_toy(b: Tensor) -> Tensor:
    """``sum_i (b_i - 0.499)^2`` plus a non-separable term."""
    return ((b - 0.499) ** 2).sum(-1) + 0.5 * (b[..., 0] * b[..., 1] - b[..., 2]) ** 2


def _replica_grads(est, replicas: int, seed: int, n: int = 1) -> Tensor:
    """``(replicas, d)`` independent estimates of the logits gradient at THETA_VAR."""
    theta = THETA_VAR.expand(replicas, D_VAR).clone().requires_grad_()
    value = hg.expectation(_variance_toy, theta, estimator=est, num_samples=n, generator=_gen(seed))
    assert value.shape == (replicas,)
    value.sum().backward()
    return theta.grad.detach()


def _total_variance(est, replicas: int, seed: int) -> float:
    grads = _replica_grads(est, replicas, seed)
    est.zero_grad(set_to_none=True)
    return float(grads.var(0).sum())


@pytest.fixture
def one_thread():
    """Run on one intra-op thread: these many tiny ops are slowed by thread hand-offs
    (several times over on a loaded 2-core machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@pytest.mark.statistical
@pytest.mark.parametrize(
    ("make", "max_ratio"),
    [
        pytest.param(lambda: REBAR().double(), 0.7, id="rebar"),
        pytest.param(lambda: RELAX(_net(D_VAR, hidden=16)).double(), 0.3, id="relax_net"),
    ],
)
def test_training_the_estimator_lowers_its_variance(make, max_ratio, one_thread):
    """Fixed logits; the total variance of the logits gradient (sum over the 6 bits of the
    variance over 3000 replicas) before and after 80 Adam steps (lr 0.05, 128 replicas a
    step) on the estimator's own parameters, which receive sum((w g_hat)^2)'s gradient.

    Measured with these seeds: REBAR 1.16 -> 0.47 (ratio 0.41; REINFORCE without baseline
    is 4.1), RELAX with a 16-unit net 1.32 -> 0.06 (ratio 0.045). Over 40 fresh seeds
    (training, measuring and network seeds) the ratio had mean 0.414, sd 0.010, range
    [0.387, 0.431] for REBAR and mean 0.041, sd 0.012, range [0.025, 0.075] for RELAX; the
    thresholds 0.7 and 0.3 are more than 20 sd away, so the false-failure rate of this
    part for a fresh seed is far below 1e-6.

    After training the estimator must still be unbiased: the mean of 3000 replicas (3
    samples each) is within 5 standard errors of the exact gradient in each of the 6
    coordinates (false-failure rate about 6 * 5.7e-7 = 3.4e-6 per case).
    """
    est = make()
    before = _total_variance(est, replicas=3000, seed=1)
    opt = torch.optim.Adam(est.parameters(), lr=0.05)
    for k in range(80):
        opt.zero_grad()
        _replica_grads(est, replicas=128, seed=1000 + k)
        opt.step()
    after = _total_variance(est, replicas=3000, seed=2)
    assert after < max_ratio * before, (before, after)
    # the trained estimator is still unbiased
    theta = THETA_VAR.clone().requires_grad_()
    hg.expectation(_variance_toy, theta, estimator="exact").backward()
    grads = _replica_grads(est, replicas=3000, seed=3, n=3)
    z = (grads.mean(0) - theta.grad) / (grads.std(0) / math.sqrt(3000))
    assert float(z.abs().max()) < 5, z


# -- bad construction --------------------------------------------------------------------


@pytest.mark.parametrize("tau", [0, 0.0, -1.0, math.inf, math.nan])
@pytest.mark.parametrize("cls", [REBAR, RELAX])
def test_bad_tau(cls, tau):
    with pytest.raises(ValueError, match="tau"):
        cls(tau=tau)


@pytest.mark.parametrize("bad", ["net", 3, lambda z: z.sum(-1)])
def test_control_variate_must_be_a_module(bad):
    with pytest.raises(TypeError, match="control_variate"):
        RELAX(bad)


def test_objective_free_relax_needs_a_network():
    with pytest.raises(ValueError, match="control_variate"):
        RELAX(None, use_objective=False)
    with pytest.raises(ValueError, match="control_variate"):
        RELAX(use_objective=False)


@pytest.mark.parametrize("use_objective", [True, False])
def test_control_variate_of_the_wrong_shape(use_objective):
    d = 4
    wrong = torch.nn.Linear(d, 1)  # (n, B, d) -> (n, B, 1), not (n, B)
    est = RELAX(wrong, use_objective=use_objective)
    theta = torch.zeros(2, d, requires_grad=True)
    with pytest.raises(ValueError, match="control_variate"):
        hg.expectation(_toy, theta, estimator=est, generator=_gen(0))


# --------------------------------------------------------------------------------------
# 4. the registry makes stateful estimators afresh
# --------------------------------------------------------------------------------------


def test_get_makes_stateful_estimators_afresh():
    get = hg.estimators.get
    for name, cls in (("rebar", REBAR), ("relax", RELAX), ("reinforce", Reinforce)):
        a, b = get(name), get(name)
        assert type(a) is cls and type(b) is cls
        assert a is not b, name
    a, b = get("rebar"), get("rebar")
    with torch.no_grad():
        a.scale.fill_(3.0)
    assert float(b.scale.detach()) == 1.0 and float(get("rebar").scale.detach()) == 1.0
    assert a.scale is not b.scale
    assert get("rloo") is get("rloo")
    assert isinstance(get("rloo"), RLOO)


# --------------------------------------------------------------------------------------
# 5. Distributed: two gloo ranks under DistributedDataParallel
# --------------------------------------------------------------------------------------

DDP_IN, DDP_D, DDP_B, DDP_STEPS = 5, 4, 6, 4
DDP_KINDS = ("reinforce_ema", "rebar", "relax")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ddp_objective(b: Tensor) -> Tensor:
    target = torch.linspace(0.2, 0.8, DDP_D, dtype=b.dtype)
    return ((b - target) ** 2).sum(-1)  # (n, B)


def _ddp_estimator(kind: str, rank: int) -> torch.nn.Module:
    if kind == "reinforce_ema":
        return Reinforce("ema", decay=0.6)
    if kind == "rebar":
        return REBAR()
    # different initial network weights on each rank: rank 0's must win
    return RELAX(_net(DDP_D, hidden=6, seed=50 + rank))


class _MaybeInfinite(torch.nn.Module):
    """A control variate ``w * sum tanh(z)``, or (``poison``) one whose variance gradient
    in ``w`` is NaN (``|w (z - sg(z))|^1.5``, see ``_InfiniteCurvature``); same parameters."""

    def __init__(self, poison: bool) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones((), dtype=F64))
        self.poison = poison  # a plain attribute: not broadcast from rank 0

    def forward(self, z: Tensor) -> Tensor:
        if self.poison:
            return (self.w * (z - z.detach())).abs().pow(1.5).sum(-1)
        return self.w * torch.tanh(z).sum(-1)


def _reduction_case(rank: int) -> dict[str, Tensor]:
    """One RELAX call on rank ``rank``'s own logits, upstream weights and noise (the same
    initial estimator everywhere): its parameter gradients."""
    est = RELAX(_net(DDP_D, hidden=6, seed=70), tau=0.7, scale=0.9).double()
    theta = torch.randn(3, DDP_D, generator=_gen(300 + rank), dtype=F64)
    w = torch.randn(3, generator=_gen(310 + rank), dtype=F64)
    _, _, grads = _call(est, theta, seed=320 + rank, weights=w, n=2)
    return grads


def _nonfinite_case(rank: int) -> dict[str, Tensor]:
    """One objective-free RELAX call whose variance gradient is NaN on rank 0 only."""
    est = RELAX(_MaybeInfinite(poison=rank == 0), use_objective=False).double()
    theta = torch.randn(3, DDP_D, generator=_gen(330 + rank), dtype=F64)
    _, logits_grad, grads = _call(est, theta, seed=340 + rank, n=2)
    return {"logits": logits_grad, "w": grads["control_variate.w"]}


def _ddp_worker(rank: int, world: int, port: int, outdir: str) -> None:
    warnings.simplefilter("error")
    torch.set_num_threads(1)  # two ranks share the test machine's cores
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    try:
        results = {}
        for kind in DDP_KINDS:
            torch.manual_seed(0)  # the same model on every rank
            model = torch.nn.Linear(DDP_IN, DDP_D)
            ddp = torch.nn.parallel.DistributedDataParallel(model)
            est = _ddp_estimator(kind, rank)
            initial = {k: v.detach().clone() for k, v in est.state_dict().items()}
            model_initial = {k: v.detach().clone() for k, v in model.state_dict().items()}
            opt = torch.optim.Adam([*ddp.parameters(), *est.parameters()], lr=0.1)
            x = torch.randn(DDP_B, DDP_IN, generator=_gen(1000 + rank))  # data per rank
            sampler = _gen(2000 + rank)
            for _ in range(DDP_STEPS):
                opt.zero_grad()
                loss = hg.expectation(
                    _ddp_objective, ddp(x), estimator=est, num_samples=2, generator=sampler
                ).mean()
                loss.backward()
                opt.step()
            results[kind] = {
                "initial": initial,
                "final": {k: v.detach().clone() for k, v in est.state_dict().items()},
                "model_initial": model_initial,
                "model": {k: v.detach().clone() for k, v in model.state_dict().items()},
            }
        results["reduction"] = _reduction_case(rank)
        results["nonfinite"] = _nonfinite_case(rank)
        torch.save(results, Path(outdir) / f"rank{rank}.pt")
    finally:
        torch.distributed.destroy_process_group()


@pytest.fixture(scope="module")
def ddp_results(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    outdir = tmp_path_factory.mktemp("ddp")
    run_ranks(
        _ddp_worker,
        (2, _free_port(), str(outdir)),
        2,
        lambda: all((outdir / f"rank{r}.pt").exists() for r in range(2)),
    )
    return [torch.load(outdir / f"rank{r}.pt", weights_only=True) for r in range(2)]


@pytest.mark.distributed
@pytest.mark.parametrize("kind", DDP_KINDS)
def test_stateful_estimators_stay_identical_across_ranks(ddp_results, kind):
    r0, r1 = ddp_results[0][kind], ddp_results[1][kind]
    # the model: DDP's job, but the estimator must not break it
    for key in r0["model"]:
        assert torch.equal(r0["model"][key], r1["model"][key]), key
        assert not torch.equal(r0["model"][key], r0["model_initial"][key]), key
    # the estimator's state
    assert list(r0["final"]) == list(r1["final"])
    for key in r0["final"]:
        assert torch.equal(r0["final"][key], r1["final"][key]), key
    final, initial = r0["final"], r0["initial"]
    if kind == "reinforce_ema":
        assert set(final) == {"ema", "steps"}
        assert int(final["steps"]) == DDP_STEPS
        assert float(final["ema"]) != 0.0
    else:
        expected = {"scale", "log_tau"}
        if kind == "relax":
            expected |= {k for k in final if k.startswith("control_variate.")}
            assert len(expected) == 6
            # the ranks did start from different networks
            assert not torch.equal(
                ddp_results[0][kind]["initial"]["control_variate.0.weight"],
                ddp_results[1][kind]["initial"]["control_variate.0.weight"],
            )
        assert set(final) == expected
        for key in final:
            assert not torch.equal(final[key], initial[key]), f"{key} did not train"


@pytest.mark.distributed
def test_variance_gradients_are_summed_over_ranks_and_divided_by_w_squared(ddp_results):
    """Regression: REBAR/RELAX reduce their variance gradients as ``sum_r G_r / W^2``.

    Under DDP (gradients averaged across ranks) the gradient ``w`` flowing into a rank's
    expectation is ``W`` times what one process with the global batch would give those
    examples, and ``sum (w g_hat)^2`` is quadratic in ``w``; so the single process's
    variance gradient is the sum of the ranks' ``G_r`` over ``W^2`` (it was the mean, ``W``
    times too large). ``G_r`` is recomputed here, without a process group, from the same
    inputs and noise as rank ``r``'s call; both ranks must hold the reduced value.
    """
    local = [_reduction_case(rank) for rank in range(2)]
    assert len(local[0]) == 6  # scale, log_tau and the network's four tensors
    for key in local[0]:
        expected = (local[0][key] + local[1][key]) / 4
        assert float(expected.abs().max()) > 1e-6, key  # a factor 2 would show
        for rank in range(2):
            reduced = ddp_results[rank]["reduction"][key]
            torch.testing.assert_close(reduced, expected, rtol=1e-12, atol=1e-15, msg=key)


@pytest.mark.distributed
def test_non_finite_variance_gradient_on_one_rank_skips_the_update_on_all(ddp_results):
    """Regression: a NaN variance gradient on rank 0 only. As one process holding both
    ranks' examples would (its sum is NaN), every rank skips the update (zero gradient);
    before, rank 0 zeroed its own share and the average kept half of rank 1's."""
    local = _nonfinite_case(1)  # rank 1's share alone: finite and not zero
    assert bool(torch.isfinite(local["w"])) and float(local["w"].abs()) > 1e-6
    for rank in range(2):
        result = ddp_results[rank]["nonfinite"]
        assert float(result["w"]) == 0.0
        assert bool(torch.isfinite(result["logits"]).all())
        assert float(result["logits"].abs().max()) > 0


@pytest.mark.compile
def test_ema_baseline_updates_under_torch_compile():
    """torch.compile(fullgraph=True) keeps the moving average's in-place update (torch 2.13
    drops float64 buffer updates, which is why the average is kept in float32): after three
    compiled calls the state equals the average of the three calls' mean f."""
    torch._dynamo.reset()
    est = Reinforce(baseline="ema", decay=0.5)
    means: list[float] = []

    def f(b: Tensor) -> Tensor:
        return b.sum(-1) + 1.0

    def loss(theta: Tensor) -> Tensor:
        return hg.expectation(f, theta, estimator=est, num_samples=4)

    compiled = torch.compile(loss, fullgraph=True)
    theta = torch.zeros(3, requires_grad=True)
    torch.manual_seed(0)
    for _ in range(3):
        value = compiled(theta)
        value.backward()
        means.append(float(value.detach()))
    expected = 0.0
    for m in means:
        expected = 0.5 * expected + 0.5 * m
    assert int(est.steps) == 3
    assert float(est.ema) == pytest.approx(expected, rel=1e-6)
    assert float(est.ema) > 0
    torch._dynamo.reset()


class _InfiniteCurvature(torch.nn.Module):
    """A control variate that is 0 with zero slope, but whose second derivative in ``w`` is
    0 * inf = NaN: ``|w (z - sg(z))|^1.5``."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(()))

    def forward(self, z: Tensor) -> Tensor:
        return (self.w * (z - z.detach())).abs().pow(1.5).sum(-1)


@pytest.mark.parametrize("use_objective", [True, False])
def test_non_finite_variance_gradients_are_dropped_not_spread(use_objective):
    """A variance gradient that is not finite (an infinite second derivative) leaves the
    estimator's parameters with a zero gradient for that step, and the logits' gradient
    finite, instead of NaN that Adam would copy into every later step."""
    net = _InfiniteCurvature()
    relax = RELAX(net, use_objective=use_objective)
    theta = torch.tensor([0.3, -0.4, 1.2], requires_grad=True)
    value = hg.expectation(
        lambda b: (b - 0.45).square().sum(-1),
        theta,
        estimator=relax,
        num_samples=2,
        generator=_gen(3),
    )
    value.backward()
    assert theta.grad is not None and bool(torch.isfinite(theta.grad).all())
    assert net.w.grad is not None and float(net.w.grad) == 0.0
    for p in relax.parameters():
        assert p.grad is not None and bool(torch.isfinite(p.grad).all())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_reinforce_ema_kept_with_python_numbers_matches_the_tensor_arithmetic(dtype):
    """On CPU in eager mode the moving average is read and updated with Python numbers
    (ten 0-d kernels fewer per call); the tensor arithmetic used elsewhere (compile,
    GPUs, several ranks) gives the same stored average, step count and bias-corrected
    baseline bit for bit, over many steps of rewards of every magnitude."""
    host = hg.estimators.Reinforce(baseline="ema", decay=0.93).to(dtype)
    tensor = hg.estimators.Reinforce(baseline="ema", decay=0.93).to(dtype)
    tensor._on_host = lambda f: False  # type: ignore[method-assign]
    gen = torch.Generator().manual_seed(0)
    for _ in range(500):
        scale = 10.0 ** float(torch.randint(-8, 9, (), generator=gen))
        f = (torch.rand(3, 5, generator=gen, dtype=torch.float64) * scale).to(torch.float32)
        assert torch.equal(f - host._current_ema(f), f - tensor._current_ema(f))
        host._update_ema(f)
        tensor._update_ema(f)
        assert host.ema.dtype == dtype
        assert torch.equal(host.ema, tensor.ema) and torch.equal(host.steps, tensor.steps)
    assert host.steps == 500 and host.ema != 0
