"""hg.diagnostics.compare_sequence_estimators: the score machinery against autograd, the
named estimators against the same estimators written as trainer losses, the Monte-Carlo rows
against the exact expectations, bad input. The problem: V = 3 tokens, token 0 ends a
sequence, L <= 3 (15 sequences of lengths 1 to 3), a reward of the whole sequence and its
length, float64. Every z-test uses |z| < 5 (two-sided 5.7e-7 per test)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import hardgrad as hg
from hardgrad import policy as P
from hardgrad.diagnostics._sequences import _SequenceProblem

V, L, EOS = 3, 3, 0
G = torch.Generator().manual_seed(0)
TABLE = (0.8 * torch.randn(L, V + 1, V, generator=G, dtype=torch.float64)).requires_grad_()


def policy(prefix):
    t = prefix.shape[1]
    prev = torch.full((len(prefix),), V) if t == 0 else prefix[:, -1]
    return TABLE[t, prev]


def reward(y):
    is_eos = (y == EOS).int()
    m = (is_eos.cumsum(1) - is_eos) == 0
    twos = ((y == 2) & m).sum(1).double()
    return twos + 0.8 * (y[:, 0] == 1).double() - 0.35 * m.sum(1).double()


KW = {"vocab_size": V, "length": L, "params": TABLE, "eos_token": EOS}


def run(estimators, n=4, draws=3000, seed=0, **kwargs):
    return hg.diagnostics.compare_sequence_estimators(
        policy, reward, estimators=estimators, group_size=n, num_draws=draws,
        generator=torch.Generator().manual_seed(seed), **KW, **kwargs,
    )  # fmt: skip


def test_scores_and_exact_gradient_against_autograd():
    problem = _SequenceProblem(policy, reward, **KW)
    exact = P.exact_sequence_gradient(policy, reward, **KW)
    torch.testing.assert_close(problem.exact, exact.grad.flatten(), rtol=1e-12, atol=1e-14)
    for m in (0, 5, 14):  # the score of one sequence, by autograd on its own
        y = problem.sequences[m : m + 1]
        total = sum(
            torch.log_softmax(policy(y[:, :t]), -1)[0, y[0, t]]
            for t in range(int(problem.lengths[m]))
        )
        (score,) = torch.autograd.grad(total, TABLE)
        torch.testing.assert_close(
            problem.sequence_scores[m], score.flatten(), rtol=1e-12, atol=1e-14
        )
    torch.testing.assert_close(
        problem.sequence_scores.T @ (problem.probs * problem.rewards), problem.exact
    )


@pytest.mark.parametrize(
    ("name", "advantages", "aggregation"),
    [
        ("rloo", P.rloo_advantages, "token-sum"),
        ("grpo", P.grpo_advantages, "sequence-mean"),
        ("rloo-token-mean", P.rloo_advantages, "token-mean"),
    ],
)
def test_named_estimators_equal_the_same_loss_written_by_hand(name, advantages, aggregation):
    def loss(r, g, lp, m):
        kw = {"normalizer": len(r)} if aggregation == "token-sum" else {}
        return P.policy_loss(lp, advantages(r, g), m, aggregation=aggregation, **kw)

    problem = _SequenceProblem(policy, reward, **KW)
    index = problem.sample(200 * 4, torch.Generator().manual_seed(1)).reshape(100, 8)
    named = problem.draws(P._estimators.SEQUENCE_ESTIMATORS[name], index, 4, 2)
    by_hand = problem.draws(loss, index, 4, 2)
    torch.testing.assert_close(named, by_hand, rtol=1e-10, atol=1e-12)


def test_rows_flag_grpo_and_pass_rloo():
    result = run(["rloo", "dr-grpo", "grpo", "grpo-token-sum", "reinforce-ema"], n=4)
    rows = {r.estimator: r for r in result.rows}
    rloo, dr, grpo = rows["rloo"], rows["dr-grpo"], rows["grpo"]
    assert rloo.bias < rloo.noise_floor + 5 * rloo.bias_se and rloo.exact_bias < 1e-12
    assert abs(rloo.scale - 1) < 5 * rloo.cosine_se * 10 + 0.05
    assert abs(dr.exact_cosine - 1) < 1e-12 and abs(dr.scale - 0.75) < 0.05
    for row in (grpo, rows["grpo-token-sum"]):  # the direction is biased, measurably
        assert 1 - row.cosine > 5 * row.cosine_se and row.exact_cosine < 0.99
    assert rows["reinforce-ema"].exact_cosine is None  # stateful: no enumeration
    assert (
        rows["reinforce-ema"].bias
        < rows["reinforce-ema"].noise_floor + 5 * rows["reinforce-ema"].bias_se
    )
    assert grpo.variance < rloo.variance  # the price of RLOO's unbiasedness here
    text = str(result)
    assert (
        "cosine_se" in text
        and "grpo-token-sum" in text
        and result.to_markdown().startswith("| estimator")
    )


@pytest.mark.parametrize("name", ["grpo", "rloo-sequence-mean", "rloo-token-mean"])
def test_monte_carlo_mean_matches_the_enumerated_expectation(name):
    problem = _SequenceProblem(policy, reward, **KW)
    estimator = P._estimators.SEQUENCE_ESTIMATORS[name]
    index = problem.sample(20000 * 2, torch.Generator().manual_seed(2)).reshape(20000, 2)
    draws = problem.draws(estimator, index, 2, 1)
    expected = problem.expected(estimator, 2)
    se = draws.std(0) / 20000**0.5
    varies = se > 0
    z = (draws.mean(0) - expected)[varies] / se[varies]
    assert z.abs().max() < 5, z


def test_seeded_and_dict_labels():
    a = run({"mine": "rloo"}, draws=200, seed=3)
    b = run({"mine": "rloo"}, draws=200, seed=3)
    same = [dataclasses.replace(r, seconds_per_draw=0.0) for r in a.rows + b.rows]
    assert same[0] == same[1] and a.rows[0].estimator == "mine" and a.settings["sequences"] == 15


def test_bad_input():
    with pytest.raises(TypeError, match="estimators"):
        run("rloo")
    with pytest.raises(ValueError, match="Unknown sequence estimator 'ppo'"):
        run(["ppo"])
    with pytest.raises(TypeError, match="estimators"):
        run([3])
    with pytest.raises(ValueError, match="at least one"):
        run([])
    with pytest.raises(ValueError, match="num_draws"):
        run(["rloo"], draws=1)
    with pytest.raises(ValueError, match="group_size"):
        run(["rloo"], n=0)
    with pytest.raises(ValueError, match="scalar loss"):
        run([lambda r, g, lp, m: lp.sum(1)], draws=2)
    with pytest.raises(ValueError, match="max_sequences"):
        run(["rloo"], max_sequences=10)
    with pytest.raises(ValueError, match="every group"):  # RLOO on groups of one
        run(["rloo"], n=1, draws=2)
