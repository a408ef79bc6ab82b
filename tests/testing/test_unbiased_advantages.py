"""hg.testing.assert_unbiased_advantages on users' advantage functions: RLOO (library and
hand-written) passes, GRPO's std scaling and a mean that includes the sample fail with the
measured bias and its interval; seeded; bad input. Policy: V = 3, token 0 ends, L <= 3 (15
sequences), float64. Each passing test has a false-failure rate of at most 1e-6 (the
default alpha, Bonferroni over the coordinates), and is seeded, so it is deterministic."""

from __future__ import annotations

import pytest
import torch

from hardgrad import policy as P
from hardgrad.testing import UnbiasednessTest, assert_unbiased_advantages

V, L, EOS = 3, 3, 0
TABLE = (0.8 * torch.randn(L, V + 1, V, generator=torch.Generator().manual_seed(0),
                           dtype=torch.float64)).requires_grad_()  # fmt: skip


def policy(prefix):
    t = prefix.shape[1]
    prev = torch.full((len(prefix),), V) if t == 0 else prefix[:, -1]
    return TABLE[t, prev]


def reward(y):
    is_eos = (y == EOS).int()
    m = (is_eos.cumsum(1) - is_eos) == 0
    return ((y == 2) & m).sum(1).double() + 0.8 * (y[:, 0] == 1).double() - 0.35 * m.sum(1)


def check(advantages, seed=0, **kwargs):
    return assert_unbiased_advantages(
        advantages, policy, reward, vocab_size=V, length=L, params=TABLE, eos_token=EOS,
        generator=torch.Generator().manual_seed(seed), **kwargs,
    )  # fmt: skip


def hand_rloo(rewards, groups):  # a user's own leave-one-out, per group
    out = torch.empty_like(rewards)
    for g in groups.unique():
        r = rewards[groups == g]
        out[groups == g] = r - (r.sum() - r) / (len(r) - 1)
    return out


@pytest.mark.parametrize("advantages", [P.rloo_advantages, hand_rloo])
def test_unbiased_advantages_pass(advantages):
    result = check(advantages, num_groups=2, group_size=3, num_draws=2000)
    assert isinstance(result, UnbiasednessTest) and result.passed
    assert result.false_failure_rate == 1e-6 and result.threshold > 5
    assert result.exact.shape == (TABLE.numel(),)


def test_reinforce_with_a_constant_baseline_passes():
    assert check(lambda r, g: P.reinforce_advantages(r, baseline=0.5), num_draws=3000).passed


def test_grpo_with_std_is_flagged_with_bias_and_interval():
    with pytest.raises(AssertionError) as info:
        check(P.grpo_advantages, group_size=4)
    message = str(info.value)
    assert message.startswith("grpo_advantages: BIASED")
    assert "measured bias |mean - exact| = " in message
    assert "0.999999 simultaneous interval" in message and "] bias " in message


def test_a_baseline_that_includes_the_sample_is_flagged():
    """The batch mean over all groups (the sample included): the gradient shrinks by
    (N - 1)/N = 3/4 in scale, a bias the test sees."""
    with pytest.raises(AssertionError, match=r"mean = 0\.7\d* x exact"):
        check(lambda r, g: r - r.mean(), group_size=2, num_groups=2)


def test_seeded_results_are_identical():
    a, b = (
        check(P.rloo_advantages, seed=5, num_draws=500),
        check(P.rloo_advantages, seed=5, num_draws=500),
    )
    assert torch.equal(a.mean, b.mean) and torch.equal(a.z, b.z)


def test_bad_input():
    with pytest.raises(TypeError, match="advantages"):
        check("rloo")
    with pytest.raises(ValueError, match="advantages"):
        check(lambda r, g: r[:1], num_draws=2)
    with pytest.raises(ValueError, match="num_draws"):
        check(P.rloo_advantages, num_draws=1)
    with pytest.raises(ValueError, match="false_failure_rate"):
        check(P.rloo_advantages, false_failure_rate=2.0)
    with pytest.raises(ValueError, match="group_size"):
        check(P.rloo_advantages, group_size=0)
    with pytest.raises(ValueError, match="every group"):  # RLOO's own error, groups of one
        check(P.rloo_advantages, group_size=1, num_draws=2)
