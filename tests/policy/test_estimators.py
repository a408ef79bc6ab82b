"""The expected gradient of every advantage x loss combination of hardgrad.policy, against the
exact policy gradient of a tiny autoregressive policy (V = 3 tokens, token 0 ends a sequence,
L <= 3 tokens: 15 distinct sequences of lengths 1 to 3) in float64.

Exact expectations of an estimator at group size n enumerate all 15**n groups (tuple weights
prod p(y_i)); Monte-Carlo checks draw replicas of a group with hg.policy.sample_sequences and
z-test their mean gradient.
"""

from __future__ import annotations

import math

import pytest
import torch

from hardgrad import policy as P

V, L, EOS = 3, 3, 0
Z_MAX = 5.0  # two-sided p = 5.7e-7 per coordinate


def make_table(seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (0.8 * torch.randn(L, V + 1, V, generator=g, dtype=torch.float64)).requires_grad_()


TABLE = make_table()


def policy(prefix: torch.Tensor, table: torch.Tensor = TABLE) -> torch.Tensor:
    """Logits of token t from the previous token (V = start), a table per position."""
    t = prefix.shape[1]
    prev = torch.full((len(prefix),), V) if t == 0 else prefix[:, -1]
    return table[t, prev]


def valid_mask(y: torch.Tensor) -> torch.Tensor:
    is_eos = (y == EOS).int()
    return (is_eos.cumsum(1) - is_eos) == 0


def reward(y: torch.Tensor) -> torch.Tensor:
    """Depends on the whole sequence and on its length."""
    m = valid_mask(y)
    twos = ((y == 2) & m).sum(1).double()
    same = ((y[:, 0] == y[:, 1]) & m[:, 1]).double()
    return twos + 0.8 * (y[:, 0] == 1).double() + 0.5 * same - 0.35 * m.sum(1).double()


EXACT = P.exact_sequence_gradient(
    policy, reward, vocab_size=V, length=L, params=TABLE, eos_token=EOS
)
GRAD_J = EXACT.grad.flatten()
SEQ, PROB, REW = EXACT.sequences, EXACT.probs, EXACT.rewards
LEN = EXACT.mask.sum(1).double()
M = len(SEQ)


def sequence_logprobs(table: torch.Tensor = TABLE) -> torch.Tensor:
    """log pi(y_m) of the 15 sequences, with gradient, computed token by token here."""
    mask = valid_mask(SEQ)
    total = torch.zeros(M, dtype=torch.float64)
    for t in range(L):
        logp = torch.log_softmax(policy(SEQ[:, :t], table), -1).gather(1, SEQ[:, t : t + 1])[:, 0]
        total = total + torch.where(mask[:, t], logp, torch.zeros_like(logp))
    return total


def grad_of(coefficients: torch.Tensor) -> torch.Tensor:
    """grad_theta sum_m c_m log pi(y_m): the expected score-function gradient with per-sequence
    weights c_m (= E[sum_i k_i 1{y_i = m}])."""
    (g,) = torch.autograd.grad((coefficients.detach() * sequence_logprobs()).sum(), TABLE)
    return g.flatten()


def exact_expectation(advantages, aggregation: str, n: int) -> torch.Tensor:
    """E[-grad policy_loss] for one group of n sequences, by enumerating all M**n groups. The
    per-sequence loss weights k_i are written out here, independently of policy_loss."""
    idx = torch.cartesian_prod(*[torch.arange(M)] * n).reshape(-1, n)
    w = PROB[idx].prod(1)
    groups = torch.arange(len(idx)).repeat_interleave(n)
    adv = advantages(REW[idx].flatten(), groups).reshape(-1, n)
    lengths = LEN[idx]
    if aggregation == "token-sum":  # normalizer = n
        k = adv / n
    elif aggregation == "sequence-mean":
        k = adv / (lengths * n)
    else:  # token-mean
        k = adv / lengths.sum(1, keepdim=True)
    c = torch.zeros(M, dtype=torch.float64).index_add_(0, idx.flatten(), (w[:, None] * k).flatten())
    return grad_of(c)


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(a @ b / (a.norm() * b.norm()))


ADVANTAGES = {
    "rloo": P.rloo_advantages,
    "dr_grpo": P.dr_grpo_advantages,
    "grpo": P.grpo_advantages,
    "grpo_population": lambda r, g: P.grpo_advantages(r, g, correction=0),
    "reinforce": lambda r, g: P.reinforce_advantages(r, baseline=0.3),
}


def test_problem_is_non_trivial():
    assert M == 15 and torch.isclose(PROB.sum(), torch.tensor(1.0, dtype=torch.float64))
    assert set(LEN.tolist()) == {1.0, 2.0, 3.0}
    assert GRAD_J.norm() > 0.1 and REW.std() > 0.3


# ------------------------------------------------------------------ exact expectations


@pytest.mark.parametrize("n", [2, 3, 4])
@pytest.mark.parametrize("name", ["rloo", "reinforce"])
def test_unbiased_advantages_with_token_sum_are_exactly_unbiased(name, n):
    """RLOO and REINFORCE with a constant baseline, token-sum / N: E = grad J to rounding."""
    got = exact_expectation(ADVANTAGES[name], "token-sum", n)
    torch.testing.assert_close(got, GRAD_J, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("n", [2, 3, 4])
def test_dr_grpo_is_rloo_shrunk_by_g_minus_one_over_g(n):
    got = exact_expectation(P.dr_grpo_advantages, "token-sum", n)
    torch.testing.assert_close(got, (n - 1) / n * GRAD_J, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(("name", "half_width"), [("grpo", math.sqrt(2)), ("grpo_population", 2)])
def test_grpo_at_two_samples_matches_its_closed_form(name, half_width):
    """n = 2: A_1 = (d/2) / (|d|/w + eps), d = R_1 - R_2, w = sqrt(2) (sample std) or 2
    (population), so E = grad_theta sum_y p(y) h(y) log pi(y), h(y) = E_y'[g(R(y) - R(y'))]."""
    d = REW[:, None] - REW[None, :]
    gd = (d / 2) / (d.abs() / half_width + 1e-4)
    h = (gd * PROB[None, :]).sum(1)
    closed = grad_of(PROB * h)
    got = exact_expectation(ADVANTAGES[name], "token-sum", 2)
    torch.testing.assert_close(got, closed, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("n", [2, 4])
def test_grpo_std_scaling_biases_the_direction(n):
    """Measured: cosine(E[GRPO], grad J) = 0.9592 (n = 2), 0.9760 (n = 4) with token-sum;
    0.8945, 0.9115 with GRPO's sequence-mean. RLOO's and Dr. GRPO's are 1."""
    got = exact_expectation(P.grpo_advantages, "token-sum", n)
    assert 0.9 < cosine(got, GRAD_J) < 0.98  # still an ascent direction here, but tilted


def test_sequence_mean_with_rloo_matches_the_length_weighted_closed_form():
    """E[A_i | y_i] = R(y_i) - J for RLOO, so sequence-mean's expectation is
    grad_theta sum_y p(y) (R(y) - J) / |y| log pi(y): biased when lengths vary."""
    value = (PROB * REW).sum()
    closed = grad_of(PROB * (REW - value) / LEN)
    for n in (2, 3):
        got = exact_expectation(P.rloo_advantages, "sequence-mean", n)
        torch.testing.assert_close(got, closed, rtol=1e-10, atol=1e-12)
    assert cosine(closed, GRAD_J) < 0.99


def test_token_mean_with_rloo_is_biased_and_the_bias_shrinks_with_the_batch():
    """Token-mean divides by the batch's random token count: measured cosine to grad J
    0.9930 (n = 2), 0.9964 (3), 0.9979 (4), tending to 1 as the count concentrates."""
    cosines = [
        cosine(exact_expectation(P.rloo_advantages, "token-mean", n), GRAD_J) for n in (2, 3)
    ]
    assert cosines[0] < cosines[1] < 0.998


def test_equal_lengths_make_all_aggregations_agree_up_to_length():
    """Without an end token (all lengths L), sequence-mean = token-mean = token-sum / L."""
    exact = P.exact_sequence_gradient(policy, reward, vocab_size=V, length=L, params=TABLE)
    g = torch.Generator().manual_seed(1)
    s = P.sample_sequences(policy, 8, vocab_size=V, length=L, generator=g)
    adv = P.rloo_advantages(reward(s.tokens), torch.tensor([0, 1] * 4))
    losses = [
        P.policy_loss(s.logprobs, adv, s.mask, aggregation="sequence-mean"),
        P.policy_loss(s.logprobs, adv, s.mask, aggregation="token-mean"),
        P.policy_loss(s.logprobs, adv, s.mask, aggregation="token-sum", normalizer=8 * L),
    ]
    grads = [torch.autograd.grad(x, TABLE, retain_graph=True)[0] for x in losses]
    torch.testing.assert_close(grads[0], grads[1])
    torch.testing.assert_close(grads[0], grads[2])
    assert exact.sequences.shape == (27, 3)


# ------------------------------------------------------------------ Monte-Carlo z-tests


def replica_gradients(advantages, aggregation: str, n: int, reps: int, seed: int) -> torch.Tensor:
    """(reps, P) gradient estimates -grad policy_loss, one per group of n sampled sequences, all
    drawn at once by sample_sequences; the loss is hg.policy.policy_loss per replica (vmap)."""
    g = torch.Generator().manual_seed(seed)
    s = P.sample_sequences(policy, reps * n, vocab_size=V, length=L, eos_token=EOS, generator=g)
    groups = torch.arange(reps).repeat_interleave(n)
    adv = advantages(reward(s.tokens), groups).reshape(reps, n)
    leaf = s.logprobs.detach().reshape(reps, n, L)
    mask = s.mask.reshape(reps, n, L)
    kwargs = {"normalizer": n} if aggregation == "token-sum" else {}

    def loss(lp, a, m):
        return P.policy_loss(lp, a, m, aggregation=aggregation, **kwargs)

    coeff = torch.func.vmap(torch.func.grad(loss))(leaf, adv, mask)  # (reps, n, L) = dloss/dlogprob
    # d logprob_{i,t} / d table for each sampled token: one-hot row (t, prev) times e_tok - p
    tok = s.tokens
    prev = torch.cat([torch.full((len(tok), 1), V), tok[:, :-1]], 1)
    probs = torch.softmax(TABLE.detach()[torch.arange(L), prev], -1)  # (N, L, V)
    dlogp = torch.nn.functional.one_hot(tok, V).double() - probs
    per_token = -coeff.reshape(-1, L)[..., None] * dlogp  # (N, L, V), -dloss/dtable[t, prev]
    out = torch.zeros(reps, L, V + 1, V, dtype=torch.float64)
    rep = groups[:, None].expand(-1, L)
    pos = torch.arange(L)[None, :].expand(len(tok), -1)
    out.index_put_((rep, pos, prev), per_token, accumulate=True)
    return out.reshape(reps, -1)


def z_scores(samples: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    """z per coordinate; coordinates that never vary must equal the expectation exactly."""
    mean, se = samples.mean(0), samples.std(0) / math.sqrt(len(samples))
    flat = se == 0
    assert torch.allclose(mean[flat], expected[flat], atol=1e-12)
    return (mean[~flat] - expected[~flat]) / se[~flat]


@pytest.mark.statistical
def test_rloo_monte_carlo_mean_is_the_exact_gradient():
    """reps = 20000 groups of n = 4: z-test per coordinate (|z| < 5, ~26 varying coordinates:
    false-failure rate 1.5e-5). Also checks the Monte-Carlo machinery (vmap of policy_loss,
    sample_sequences) end to end."""
    grads = replica_gradients(P.rloo_advantages, "token-sum", 4, 20000, seed=0)
    z = z_scores(grads, GRAD_J)
    assert (z.abs() < Z_MAX).all(), z


@pytest.mark.statistical
@pytest.mark.parametrize("aggregation", ["token-sum", "sequence-mean"])
def test_grpo_monte_carlo_mean_is_its_exact_biased_expectation(aggregation):
    """GRPO, n = 4 (sequence-mean = the original GRPO loss): the Monte-Carlo mean matches the
    exact enumeration over 15**4 groups (|z| < 5, false-failure rate 1.5e-5 each) and misses
    the exact policy gradient grad J (up to GRPO's scale) by more than 8 standard errors."""
    grads = replica_gradients(P.grpo_advantages, aggregation, 4, 20000, seed=1)
    expected = exact_expectation(P.grpo_advantages, aggregation, 4)
    z = z_scores(grads, expected)
    assert (z.abs() < Z_MAX).all(), z
    scaled = GRAD_J * (expected @ GRAD_J) / (GRAD_J @ GRAD_J)  # best multiple of grad J
    assert z_scores(grads, scaled).abs().max() > 8


# ------------------------------------------------------------------ the library's enumeration


@pytest.mark.parametrize("aggregation", ["token-sum", "sequence-mean", "token-mean"])
@pytest.mark.parametrize("name", ["rloo", "grpo"])
def test_library_group_enumeration_matches_the_one_written_here(name, aggregation):
    """hardgrad.policy._estimators._expected_gradient_weights (used by
    hg.diagnostics.compare_sequence_estimators) against exact_expectation above."""
    from hardgrad.policy._estimators import _expected_gradient_weights

    for n in (2, 3):
        c = _expected_gradient_weights(ADVANTAGES[name], aggregation, PROB, REW, LEN, n)
        torch.testing.assert_close(grad_of(c), exact_expectation(ADVANTAGES[name], aggregation, n))
    with pytest.raises(ValueError, match="max_groups"):
        _expected_gradient_weights(P.rloo_advantages, "token-sum", PROB, REW, LEN, 6)
    with pytest.raises(ValueError, match="aggregation"):
        _expected_gradient_weights(P.rloo_advantages, "mean", PROB, REW, LEN, 2)
