"""hg.nn.MoE's options of issue 42: any expert modules, noisy top-k gating with its
importance and load losses, the capacity factor with dropped-token accounting, the router
z-loss in aux_losses and the renormalisation's eps, each against a per-token float64 loop."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import hardgrad as hg

F64 = torch.float64


def _experts(n=4, d=4, o=3, seed=0):
    torch.manual_seed(seed)
    return [nn.Sequential(nn.Linear(d, 5), nn.Tanh(), nn.Linear(5, o)).double() for _ in range(n)]


def _x(n=10, d=4, seed=1, dtype=F64):
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _builtin(moe, j, x):
    return torch.nn.functional.gelu(x @ moe.w1[j] + moe.b1[j]) @ moe.w2[j] + moe.b2[j]


def _reference(moe, x, *, noise=None, capacity=None, eps=0.0):
    """A plain loop over tokens: logits, optional noise, top-k, renormalised gates with eps,
    capacity by (slot, token) priority, the weighted sum of the experts; with the
    auxiliary losses computed from their definitions."""
    n, e, k = x.shape[0], moe.num_experts, moe.k
    clean = x @ moe.router.weight.T
    logits, std = clean, None
    if noise is not None:
        std = torch.log1p(torch.exp(x @ moe.noise.weight.T)) + moe.noise_epsilon
        logits = clean + noise * std
    routes = []
    for t in range(n):
        p = torch.softmax(logits[t], -1)
        order = sorted(range(e), key=lambda j: -float(logits[t, j].detach()))[:k]
        total = sum(p[j] for j in order)
        if moe.normalize == "none":
            routes.append([(j, p[j]) for j in order])
        else:
            routes.append([(j, p[j] / (total + eps)) for j in order])
    kept = {(t, r): True for t in range(n) for r in range(k)}
    if capacity is not None:
        cap = math.ceil(capacity * n * k / e - 1e-9)
        used = [0] * e
        for r in range(k):
            for t in range(n):
                j = routes[t][r][0]
                kept[t, r] = used[j] < cap
                used[j] += 1
    ys = []
    for t in range(n):
        terms = [
            g
            * (
                moe.experts[j](x[t : t + 1])[0]
                if moe.experts is not None
                else _builtin(moe, j, x[t])
            )
            for r, (j, g) in enumerate(routes[t])
            if kept[t, r]
        ]
        ys.append(sum(terms) if terms else torch.zeros(moe.out_features, dtype=x.dtype))
    importance = [
        sum((g for rt in routes for (j, g) in rt if j == i), torch.zeros((), dtype=F64))
        for i in range(e)
    ]
    importance = torch.stack(importance)
    if noise is not None and k < e:
        load = []
        for i in range(e):
            total = 0
            for t in range(n):
                others = torch.cat([logits[t, :i], logits[t, i + 1 :]]).sort(descending=True).values
                z = (clean[t, i] - others[k - 1]) / std[t, i]
                total = total + 0.5 * torch.erfc(-z / math.sqrt(2))
            load.append(total)
        load = torch.stack(load)
    else:
        load = torch.tensor(
            [sum(j == i for rt in routes for (j, _) in rt) for i in range(e)], dtype=F64
        )

    def cv2(v):
        return ((v - v.mean()) ** 2).mean() / (v.mean() ** 2 + 1e-10)

    z = torch.stack([torch.logsumexp(logits[t], -1) ** 2 for t in range(n)]).mean()
    dropped = sum(not v for v in kept.values())
    aux = {"router_z": z, "importance": cv2(importance), "load": cv2(load)}
    return torch.stack(ys), aux, dropped


def _params(moe):
    return [p for _, p in sorted(moe.named_parameters())]


def _check(moe, x, **kwargs):
    """Forward, aux losses and every parameter's gradient against the loop."""
    y, _, _ = moe(x)
    aux = moe.aux_losses
    up = torch.randn(y.shape, generator=torch.Generator().manual_seed(7), dtype=F64)
    loss = (y * up).sum() + aux["router_z"] + aux["importance"] + aux["load"]
    grads = torch.autograd.grad(loss, _params(moe), allow_unused=True)
    y_ref, aux_ref, dropped = _reference(moe, x, **kwargs)
    torch.testing.assert_close(y, y_ref, rtol=1e-10, atol=1e-12)
    for key in aux_ref:
        torch.testing.assert_close(aux[key], aux_ref[key], rtol=1e-10, atol=1e-12)
    loss_ref = (y_ref * up).sum() + sum(aux_ref.values())
    ref = torch.autograd.grad(loss_ref, _params(moe), allow_unused=True)
    for got, want in zip(grads, ref, strict=True):
        if want is None:
            assert got is None or not got.any()
        else:
            torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-11)
    return dropped


# ----------------------------------------------------------------------------- experts


def test_any_expert_modules_values_and_gradients():
    moe = hg.nn.MoE(4, 3, k=2, experts=_experts()).double()
    assert moe.num_experts == 4 and moe.hidden_features is None
    _check(moe, _x())


def test_expert_modules_are_called_once_per_group_on_their_tokens():
    calls = []

    class Probe(nn.Linear):
        def forward(self, x):
            calls.append(x.shape[0])
            return super().forward(x)

    torch.manual_seed(0)
    moe = hg.nn.MoE(4, 3, k=2, experts=[Probe(4, 3) for _ in range(6)])
    _, indices, _ = moe(torch.randn(9, 4))
    counts = torch.bincount(indices.reshape(-1), minlength=6)
    assert sorted(calls) == sorted(c for c in counts.tolist() if c)


def test_expert_modules_bad_input():
    with pytest.raises(TypeError, match="`experts`"):
        hg.nn.MoE(4, experts=nn.Linear(4, 4))
    with pytest.raises(TypeError, match=r"`experts\[1\]`"):
        hg.nn.MoE(4, experts=[nn.Linear(4, 4), "mlp"])
    with pytest.raises(ValueError, match="at least one"):
        hg.nn.MoE(4, k=1, experts=[])
    with pytest.raises(ValueError, match="`num_experts` = len"):
        hg.nn.MoE(4, num_experts=3, experts=[nn.Linear(4, 4)] * 2)
    with pytest.raises(ValueError, match="`hidden_features`=None"):
        hg.nn.MoE(4, hidden_features=8, experts=[nn.Linear(4, 4)] * 2)
    moe = hg.nn.MoE(4, 3, experts=[nn.Linear(4, 2)] * 2)
    with pytest.raises(ValueError, match=r"`experts\[\d\]`.*out_features=3"):
        moe(torch.randn(5, 4))


# ----------------------------------------------------------------------------- noisy


@pytest.mark.parametrize("k", [1, 2, 4])
@pytest.mark.parametrize("custom", [False, True])
def test_noisy_gating_values_losses_and_gradients(k, custom):
    torch.manual_seed(0)
    kwargs = {"experts": _experts()} if custom else {"num_experts": 4}
    moe = hg.nn.MoE(
        4, 3, k=k, noisy_gating=True, generator=torch.Generator().manual_seed(3), **kwargs
    ).double()
    with torch.no_grad():  # away from the published zero init, so the noise scale varies
        moe.noise.weight.copy_(torch.randn(4, 4, generator=torch.Generator().manual_seed(5)))
    x = _x()
    noise = torch.randn(10, 4, generator=torch.Generator().manual_seed(3), dtype=F64)
    _check(moe, x, noise=noise)


def test_noisy_gating_evaluates_without_noise_and_seeds_reproduce():
    def make():
        torch.manual_seed(0)
        return hg.nn.MoE(
            4, num_experts=5, noisy_gating=True, generator=torch.Generator().manual_seed(1)
        )

    a, b = make(), make()
    x = _x(dtype=torch.float32)
    assert torch.equal(a(x)[0], b(x)[0])  # same seed, same noise
    a.eval()
    y, _, _ = a(x)
    plain = hg.nn.MoE(4, num_experts=5)
    plain.load_state_dict({k: v for k, v in a.state_dict().items() if not k.startswith("noise")})
    plain.eval()
    assert torch.equal(plain(x)[0], y)  # eval routes on the clean logits
    assert not a.aux_losses["load"].requires_grad  # counts, as published


def test_noisy_gating_bad_input():
    with pytest.raises(ValueError, match="noisy_gating=True"):
        hg.nn.MoE(4, noisy_gating=True, estimator="st_gumbel")
    with pytest.raises(TypeError, match="`noisy_gating`"):
        hg.nn.MoE(4, noisy_gating=1)
    with pytest.raises(ValueError, match="`noise_epsilon`"):
        hg.nn.MoE(4, noisy_gating=True, noise_epsilon=-0.1)


# ----------------------------------------------------------------------------- capacity


@pytest.mark.parametrize("factor", [0.5, 0.75, 1.0, 4.0])
@pytest.mark.parametrize("k", [1, 2])
def test_capacity_drops_by_slot_then_token_order(factor, k):
    torch.manual_seed(0)
    moe = hg.nn.MoE(4, 3, num_experts=4, k=k, capacity_factor=factor).double()
    x = _x(12)
    dropped = _check(moe, x, capacity=factor)
    assert int(moe.dropped) == dropped
    assert moe.capacity == math.ceil(factor * 12 * k / 4)
    torch.testing.assert_close(moe.dropped_fraction, torch.tensor(dropped / (12 * k)))
    if factor == 4.0:
        assert dropped == 0


def test_capacity_with_expert_modules_and_noise_and_a_residual():
    torch.manual_seed(0)
    moe = hg.nn.MoE(
        4,
        4,
        k=2,
        experts=_experts(o=4),
        noisy_gating=True,
        capacity_factor=0.5,
        generator=torch.Generator().manual_seed(3),
    ).double()
    x = _x(12)
    noise = torch.randn(12, 4, generator=torch.Generator().manual_seed(3), dtype=F64)
    dropped = _check(moe, x, noise=noise, capacity=0.5)
    assert dropped > 0 and int(moe.dropped) == dropped
    # a token whose every assignment is dropped gets 0: x + y passes it through
    moe.generator.manual_seed(3)
    y, _, _ = moe(x)
    zero = (y == 0).all(-1)
    assert torch.equal((x + y)[zero], x[zero])


def test_capacity_rounding_and_bad_input():
    moe = hg.nn.MoE(4, num_experts=2, k=1, capacity_factor=1.1)
    moe(torch.randn(20, 4))
    assert moe.capacity == 11  # not 12 from binary 1.1's excess
    for bad in (0.0, -1.0, math.inf):
        with pytest.raises(ValueError, match="`capacity_factor`"):
            hg.nn.MoE(4, capacity_factor=bad)
    with pytest.raises(TypeError, match="`capacity_factor`"):
        hg.nn.MoE(4, capacity_factor="1")


# ----------------------------------------------------------------------------- eps, z-loss


def test_eps_and_the_aux_losses_of_a_plain_moe():
    torch.manual_seed(0)
    moe = hg.nn.MoE(4, 3, num_experts=5, k=2, eps=1e-2).double()
    _check(moe, _x(), eps=1e-2)
    assert "eps=0.01" in repr(moe)
    _, _, loss = moe(_x())
    assert moe.aux_losses["load_balancing"] is loss
    with pytest.raises(ValueError, match="`eps`=0 unless"):
        hg.nn.MoE(4, k=2, eps=1e-6, normalize="selected")
    with pytest.raises(ValueError, match="`eps`=0 for SparseMixer"):
        hg.nn.MoE(4, k=1, eps=1e-6, estimator="sparsemixer")


# ----------------------------------------------------------------------------- dtypes, empty


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_options_in_every_dtype_and_on_an_empty_batch(dtype):
    torch.manual_seed(0)
    experts = [nn.Linear(4, 4) for _ in range(4)]
    moe = hg.nn.MoE(4, k=2, experts=experts, noisy_gating=True, capacity_factor=0.75, eps=1e-6)
    y, _, _ = moe(torch.randn(9, 4).to(dtype))
    assert y.dtype == dtype and torch.isfinite(y).all()
    (y.float().sum() + sum(moe.aux_losses.values())).backward()
    assert moe.noise.weight.grad is not None and moe.noise.weight.grad.abs().sum() > 0
    moe.zero_grad(set_to_none=True)
    x = torch.zeros(0, 4, dtype=dtype, requires_grad=True)
    y, indices, _ = moe(x)
    assert y.shape == (0, 4) and indices.shape == (0, 2) and int(moe.dropped) == 0
    assert all(float(v.detach()) == 0 for v in moe.aux_losses.values())
    (y.float().sum() + sum(moe.aux_losses.values())).backward()
    for name, p in moe.named_parameters():
        assert p.grad is not None and not p.grad.any(), name


# ----------------------------------------------------------------------------- compile


CONFIGS = {
    "experts": lambda: hg.nn.MoE(4, k=2, experts=[nn.Linear(4, 4) for _ in range(3)]),
    "noisy": lambda: hg.nn.MoE(4, num_experts=4, k=2, noisy_gating=True),
    "capacity": lambda: hg.nn.MoE(4, num_experts=4, k=2, capacity_factor=0.75),
    "all-dense": lambda: hg.nn.MoE(
        4,
        k=2,
        estimator="dense",
        experts=[nn.Linear(4, 4) for _ in range(3)],
        noisy_gating=True,
        capacity_factor=0.75,
        eps=1e-6,
    ),
}


@pytest.mark.parametrize(
    "name",
    [n if n == "experts" else pytest.param(n, marks=pytest.mark.slow) for n in sorted(CONFIGS)],
)
@pytest.mark.compile
def test_compile_with_a_changing_batch(name):
    torch.manual_seed(0)
    compiled_module = CONFIGS[name]()
    torch.manual_seed(0)
    eager = CONFIGS[name]()
    torch._dynamo.reset()
    compiled = torch.compile(compiled_module, fullgraph=True, dynamic=True, backend="aot_eager")
    for n in (8, 5, 3):
        x = torch.randn(n, 4, generator=torch.Generator().manual_seed(n))
        out = []
        for module, run in ((compiled_module, compiled), (eager, eager)):
            torch.manual_seed(n)
            y, indices, _ = run(x)
            (y.square().sum() + sum(module.aux_losses.values())).backward()
            out.append((y.detach(), indices, module.dropped.clone()))
        torch.testing.assert_close(out[0][0], out[1][0], rtol=1e-6, atol=1e-6)
        assert torch.equal(out[0][1], out[1][1]) and torch.equal(out[0][2], out[1][2])
        for a, b in zip(compiled_module.parameters(), eager.parameters(), strict=True):
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-6)
    torch._dynamo.reset()


@pytest.mark.parametrize("name", ["experts", "noisy-capacity"])
def test_torch_func_grad_is_autograd(name):
    """Under torch.func the layer takes its static-shape path (every expert on every token)."""
    torch.manual_seed(0)
    if name == "experts":
        moe = hg.nn.MoE(4, k=2, experts=[nn.Linear(4, 4) for _ in range(3)]).double()
    else:
        moe = hg.nn.MoE(4, num_experts=4, k=2, capacity_factor=0.75, noisy_gating=True).double()
    params = {k: v.detach() for k, v in moe.named_parameters()}
    x = _x(6)

    def loss(p):
        torch.manual_seed(1)
        y, _, _ = torch.func.functional_call(moe, p, (x,))
        return y.square().sum() + moe.aux_losses["load"] + moe.aux_losses["router_z"]

    got = torch.func.grad(loss)(params)
    want = torch.autograd.grad(loss(dict(moe.named_parameters())), list(moe.parameters()))
    for a, b in zip(got.values(), want, strict=True):
        torch.testing.assert_close(a, b)


def test_vmap_of_prob_in_top_k_over_tokens():
    g = torch.Generator().manual_seed(0)
    clean = torch.randn(5, 4, generator=g)
    noisy = clean + torch.randn(5, 4, generator=g)
    std = torch.rand(5, 4, generator=g) + 0.1

    def one(c, n, s):
        _, i, t = hg.topk_route(n.unsqueeze(0), 2, return_threshold=True)
        return hg.routing.prob_in_top_k(c[None], n[None], s[None], i, t)[0]

    _, i, t = hg.topk_route(noisy, 2, return_threshold=True)
    torch.testing.assert_close(
        torch.vmap(one)(clean, noisy, std), hg.routing.prob_in_top_k(clean, noisy, std, i, t)
    )
