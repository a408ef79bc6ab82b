"""hardgrad.policy.policy_loss against hand formulas (padding, lengths, empty rows and
batches, bad input, dtypes) and kl_penalty's k1, k2, k3: values and expected gradients against
exact enumeration on a categorical and on a small sequence policy."""

from __future__ import annotations

import pytest
import torch

from hardgrad import policy as P

LOGP = torch.tensor([[-1.0, -2.0, -0.5, 0.0], [-0.3, -0.7, -1.1, -0.2], [-2.0, 0.0, 0.0, 0.0]])
MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 0, 0, 0]], dtype=torch.bool)
ADV = torch.tensor([0.5, -1.0, 2.0])


def reference(logp, adv, mask, aggregation, c=None):
    total, tokens, seq_mean = 0.0, 0, 0.0
    for i in range(logp.shape[0]):
        s = sum(-adv[i].item() * logp[i, t].item() for t in range(logp.shape[1]) if mask[i, t])
        n_i = int(mask[i].sum())
        total, tokens = total + s, tokens + n_i
        seq_mean += s / max(n_i, 1)
    if aggregation == "sequence-mean":
        return seq_mean / max(logp.shape[0], 1)
    if aggregation == "token-mean":
        return total / max(tokens, 1)
    return total / c


@pytest.mark.parametrize(
    ("aggregation", "c"), [("sequence-mean", None), ("token-mean", None), ("token-sum", 7.0)]
)
def test_aggregations_match_the_loop(aggregation, c):
    kw = {"normalizer": c} if c else {}
    lp = LOGP.clone().requires_grad_()
    loss = P.policy_loss(lp, ADV, MASK, aggregation=aggregation, **kw)
    assert loss.item() == pytest.approx(reference(LOGP, ADV, MASK, aggregation, c), rel=1e-6)
    loss.backward()
    assert (lp.grad[~MASK] == 0).all()  # padding gets no gradient
    # per-token advantages equal to the broadcast ones give the same loss
    per_token = ADV[:, None].expand(-1, 4)
    same = P.policy_loss(LOGP, per_token, MASK, aggregation=aggregation, **kw)
    torch.testing.assert_close(same, loss.detach())


def test_padding_values_are_ignored_even_inf_and_nan():
    lp = LOGP.clone()
    lp[~MASK] = float("-inf")
    lp[0, 3] = float("nan")
    lp.requires_grad_()
    for agg, kw in [("sequence-mean", {}), ("token-mean", {}), ("token-sum", {"normalizer": 3})]:
        loss = P.policy_loss(lp, ADV, MASK, aggregation=agg, **kw)
        assert torch.isfinite(loss)
        (g,) = torch.autograd.grad(loss, lp)
        assert torch.isfinite(g).all() and (g[~MASK] == 0).all()


def test_mask_as_float_and_advantages_detached():
    adv = ADV.clone().requires_grad_()
    loss = P.policy_loss(LOGP, adv, MASK.float())
    torch.testing.assert_close(loss, P.policy_loss(LOGP, ADV, MASK))
    assert not loss.requires_grad  # no gradient into the advantages


def test_empty_rows_and_batches():
    mask = MASK.clone()
    mask[2] = False  # a sequence with no valid token contributes 0, still counted in N
    got = P.policy_loss(LOGP, ADV, mask)
    assert got.item() == pytest.approx(reference(LOGP, ADV, mask, "sequence-mean"), rel=1e-6)
    empty = torch.zeros(0, 5, requires_grad=True)
    for agg, kw in [("sequence-mean", {}), ("token-mean", {}), ("token-sum", {"normalizer": 1})]:
        loss = P.policy_loss(
            empty, torch.zeros(0), torch.zeros(0, 5, dtype=torch.bool), aggregation=agg, **kw
        )
        assert loss.item() == 0.0 and loss.requires_grad


def test_bad_input():
    with pytest.raises(ValueError, match="`normalizer`"):
        P.policy_loss(LOGP, ADV, MASK, aggregation="token-sum")
    with pytest.raises(ValueError, match="`normalizer`"):
        P.policy_loss(LOGP, ADV, MASK, normalizer=3)
    with pytest.raises(ValueError, match="`normalizer`"):
        P.policy_loss(LOGP, ADV, MASK, aggregation="token-sum", normalizer=0)
    with pytest.raises(ValueError, match=r"`aggregation`.*token-mean"):
        P.policy_loss(LOGP, ADV, MASK, aggregation="mean")
    with pytest.raises(ValueError, match="`mask`"):
        P.policy_loss(LOGP, ADV, MASK[:, :3])
    with pytest.raises(ValueError, match="`advantages`"):
        P.policy_loss(LOGP, ADV[:2], MASK)
    with pytest.raises(ValueError, match="`logprobs`"):
        P.policy_loss(LOGP[0], ADV, MASK[0])
    with pytest.raises(TypeError, match="`logprobs`"):
        P.policy_loss(LOGP.long(), ADV, MASK)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
def test_dtypes(dtype):
    lp = LOGP.to(dtype, copy=True).requires_grad_()
    loss = P.policy_loss(lp, ADV.to(dtype), MASK, aggregation="token-mean")
    assert loss.dtype == dtype
    loss.backward()
    assert lp.grad.dtype == dtype
    tol = 2e-2 if dtype in (torch.float16, torch.bfloat16) else 1e-6
    assert loss.item() == pytest.approx(reference(LOGP, ADV, MASK, "token-mean"), rel=tol)


# ------------------------------------------------------------------ KL estimators


def test_kl_values():
    lp, ref = torch.tensor([-1.0, -2.0, -0.1]), torch.tensor([-1.5, -1.0, -0.1])
    d = lp - ref
    torch.testing.assert_close(P.kl_penalty(lp, ref), d)
    torch.testing.assert_close(P.kl_penalty(lp, ref, estimator="k2"), d**2 / 2)
    torch.testing.assert_close(P.kl_penalty(lp, ref, estimator="k3"), torch.exp(-d) - 1 + d)
    mask = torch.tensor([True, False, True])
    ref_inf = ref.clone()
    ref_inf[1] = float("-inf")
    for est in P.KL_ESTIMATORS:
        out = P.kl_penalty(lp, ref_inf, estimator=est, mask=mask)
        assert out[1] == 0 and torch.isfinite(out).all()
    with pytest.raises(ValueError, match=r"`estimator`.*k1, k2, k3"):
        P.kl_penalty(lp, ref, estimator="k4")
    with pytest.raises(ValueError, match="`ref_logprobs`"):
        P.kl_penalty(lp, ref[:2])
    half = P.kl_penalty(lp.half(), (ref - 12).half(), estimator="k3")
    assert half.dtype == torch.float16 and torch.isfinite(half).all()


def test_kl_expectations_and_gradients_on_a_categorical():
    """Exact sums over 5 categories: E_pi[k1] = E_pi[k3] = KL(pi||ref) != E_pi[k2]; the expected
    gradient of each penalty with the sample fixed is 0 (k1), grad KL(pi||ref) (k2),
    grad KL(ref||pi) (k3)."""
    g = torch.Generator().manual_seed(0)
    theta = torch.randn(5, generator=g, dtype=torch.float64).requires_grad_()
    ref = torch.log_softmax(torch.randn(5, generator=g, dtype=torch.float64), 0)
    logp = torch.log_softmax(theta, 0)
    p = logp.exp().detach()
    kl_fwd = (logp.exp() * (logp - ref)).sum()
    kl_rev = (ref.exp() * (ref - logp)).sum()
    (g_fwd,) = torch.autograd.grad(kl_fwd, theta, retain_graph=True)
    (g_rev,) = torch.autograd.grad(kl_rev, theta, retain_graph=True)
    value, grads = {}, {}
    for est in P.KL_ESTIMATORS:
        expected = (p * P.kl_penalty(logp, ref, estimator=est)).sum()  # weights fixed
        value[est] = expected.item()
        (grads[est],) = torch.autograd.grad(expected, theta, retain_graph=True)
    assert value["k1"] == pytest.approx(kl_fwd.item()) == pytest.approx(value["k3"])
    assert abs(value["k2"] - kl_fwd.item()) > 1e-3
    torch.testing.assert_close(grads["k1"], torch.zeros(5, dtype=torch.float64))
    torch.testing.assert_close(grads["k2"], g_fwd)
    torch.testing.assert_close(grads["k3"], g_rev)
    assert (g_fwd - g_rev).abs().max() > 1e-2


def test_sequence_kl_in_the_reward_is_unbiased_per_token_k2_loss_is_not():
    """Sequences (V = 3, L = 3): REINFORCE with reward -sum_t k1_t (detached) has expected
    gradient -grad KL_seq(pi||ref) exactly; the per-token k2 loss term misses the effect of
    earlier tokens on later tokens' KL."""
    V, L = 3, 3  # noqa: N806
    g = torch.Generator().manual_seed(2)
    table = torch.randn(L, V + 1, V, generator=g, dtype=torch.float64).requires_grad_()
    ref_table = torch.randn(L, V + 1, V, generator=g, dtype=torch.float64)

    def logits(tab, prefix):
        prev = torch.full((len(prefix),), V) if prefix.shape[1] == 0 else prefix[:, -1]
        return tab[prefix.shape[1], prev]

    ex = P.exact_sequence_gradient(
        lambda s: logits(table, s), lambda y: y[:, 0].double(), vocab_size=V, length=L, params=table
    )
    y = ex.sequences
    tok_lp = torch.stack(
        [
            torch.log_softmax(logits(table, y[:, :t]), -1).gather(1, y[:, t : t + 1])[:, 0]
            for t in range(L)
        ],
        1,
    )
    tok_ref = torch.stack(
        [
            torch.log_softmax(logits(ref_table, y[:, :t]), -1).gather(1, y[:, t : t + 1])[:, 0]
            for t in range(L)
        ],
        1,
    )
    p = ex.probs
    seq_lp = tok_lp.sum(1)
    kl_seq = (seq_lp.exp() * (seq_lp - tok_ref.sum(1))).sum()
    (g_true,) = torch.autograd.grad(kl_seq, table, retain_graph=True)
    k1 = P.kl_penalty(tok_lp, tok_ref).sum(1).detach()
    (g_reward,) = torch.autograd.grad((p * k1 * seq_lp).sum(), table, retain_graph=True)
    torch.testing.assert_close(g_reward, g_true)
    k2 = P.kl_penalty(tok_lp, tok_ref, estimator="k2").sum(1)
    (g_k2,) = torch.autograd.grad((p * k2).sum(), table)
    assert (g_k2 - g_true).norm() > 0.05 * g_true.norm()
