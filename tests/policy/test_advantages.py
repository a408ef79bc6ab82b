"""hardgrad.policy's advantages against hand formulas: group handling (unsorted, sparse ids,
groups of one), all-equal rewards, bad input, dtypes, empty batches, the EMA baseline."""

from __future__ import annotations

import pytest
import torch

import hardgrad as hg
from hardgrad import policy as P

GROUP_FNS = [P.rloo_advantages, P.grpo_advantages, P.dr_grpo_advantages]


def loop_reference(rewards, groups, kind, correction=1, eps=1e-4):
    """A plain Python loop over the groups, in float64."""
    r = rewards.double().tolist()
    g = groups.tolist()
    out = []
    for i, ri in enumerate(r):
        members = [r[j] for j in range(len(r)) if g[j] == g[i]]
        n = len(members)
        mean = sum(members) / n
        if kind == "rloo":
            out.append(ri - (sum(members) - ri) / (n - 1))
        elif kind == "dr_grpo":
            out.append(ri - mean)
        else:
            var = sum((x - mean) ** 2 for x in members) / max(n - correction, 1)
            out.append((ri - mean) / (var**0.5 + eps) if len(set(members)) > 1 else 0.0)
    return torch.tensor(out, dtype=torch.float64)


def test_unsorted_sparse_group_ids_match_the_loop():
    g = torch.Generator().manual_seed(0)
    rewards = torch.randn(12, generator=g, dtype=torch.float64)
    groups = torch.tensor([40, -3, 7, 40, 7, -3, 40, 7, -3, 7, 40, 7])
    for kind, fn in [("rloo", P.rloo_advantages), ("dr_grpo", P.dr_grpo_advantages)]:
        torch.testing.assert_close(fn(rewards, groups), loop_reference(rewards, groups, kind))
    for correction in (0, 1):
        got = P.grpo_advantages(rewards, groups, correction=correction)
        want = loop_reference(rewards, groups, "grpo", correction=correction)
        torch.testing.assert_close(got, want)
    # eps = 0: exactly unit (sample) standard deviation per group
    a = P.grpo_advantages(rewards, groups, eps=0.0)
    for gid in groups.unique():
        torch.testing.assert_close(a[groups == gid].std(), torch.tensor(1.0, dtype=torch.float64))


def test_permutation_equivariance():
    g = torch.Generator().manual_seed(1)
    rewards = torch.randn(9, generator=g, dtype=torch.float64)
    groups = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2, 2])
    perm = torch.randperm(9, generator=g)
    for fn in GROUP_FNS:
        torch.testing.assert_close(fn(rewards[perm], groups[perm]), fn(rewards, groups)[perm])


def test_rloo_is_dr_grpo_times_n_over_n_minus_one():
    rewards = torch.tensor([1.0, 0.0, 0.5, 2.0, 3.0], dtype=torch.float64)
    groups = torch.tensor([0, 0, 0, 1, 1])
    n = torch.tensor([3, 3, 3, 2, 2], dtype=torch.float64)
    torch.testing.assert_close(
        P.rloo_advantages(rewards, groups), P.dr_grpo_advantages(rewards, groups) * n / (n - 1)
    )


def test_group_of_one():
    rewards = torch.tensor([1.0, 2.0, 3.0])
    groups = torch.tensor([0, 0, 5])
    with pytest.raises(ValueError, match=r"`groups`.*at least 2.*group id 5"):
        P.rloo_advantages(rewards, groups)
    # GRPO / Dr. GRPO: the lone sample carries no signal: 0, never NaN
    for fn in (P.grpo_advantages, P.dr_grpo_advantages):
        assert fn(rewards, groups)[2] == 0
    assert P.grpo_advantages(rewards, groups, eps=0.0)[2] == 0


@pytest.mark.parametrize("value", [0.1, 1.0, -7.3, 1e30])
@pytest.mark.parametrize("eps", [1e-4, 0.0])
def test_all_equal_rewards_give_exact_zeros(value, eps):
    """0.1 three times: sum/3 != 0.1 in floating point; the result is still exactly 0."""
    rewards = torch.full((3,), value, dtype=torch.float64)
    groups = torch.zeros(3, dtype=torch.long)
    assert torch.equal(P.grpo_advantages(rewards, groups, eps=eps), torch.zeros(3).double())
    assert torch.equal(P.rloo_advantages(rewards, groups), torch.zeros(3).double())


@pytest.mark.parametrize("fn", [*GROUP_FNS, lambda r, g: P.reinforce_advantages(r)])
def test_nan_and_inf_rewards_are_refused(fn):
    groups = torch.tensor([0, 0])
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValueError, match="`rewards`"):
            fn(torch.tensor([1.0, bad]), groups)


@pytest.mark.parametrize("fn", GROUP_FNS)
def test_bad_shapes_and_types(fn):
    r = torch.tensor([1.0, 2.0])
    with pytest.raises(TypeError, match="`groups`"):
        fn(r, torch.tensor([0.0, 0.0]))
    with pytest.raises(TypeError, match="`groups`"):
        fn(r, [0, 0])
    with pytest.raises(TypeError, match="`groups`"):
        fn(r, torch.tensor([True, True]))
    with pytest.raises(ValueError, match="`groups`"):
        fn(r, torch.tensor([0, 0, 0]))
    with pytest.raises(ValueError, match="`rewards`"):
        fn(r[None], torch.tensor([[0, 0]]))
    with pytest.raises(TypeError, match="`rewards`"):
        fn(torch.tensor([1, 2]), torch.tensor([0, 0]))


def test_bad_settings():
    r, g = torch.tensor([1.0, 2.0]), torch.tensor([0, 0])
    with pytest.raises(ValueError, match="`eps`"):
        P.grpo_advantages(r, g, eps=-1.0)
    with pytest.raises(ValueError, match="`correction`"):
        P.grpo_advantages(r, g, correction=2)
    with pytest.raises(TypeError, match="`scale_std`"):
        P.grpo_advantages(r, g, scale_std=1)
    with pytest.raises(TypeError, match="`baseline`"):
        P.reinforce_advantages(r, baseline="mean")
    with pytest.raises(ValueError, match="`baseline`"):
        P.reinforce_advantages(r, baseline=torch.zeros(3))
    with pytest.raises(ValueError, match="`baseline`"):
        P.reinforce_advantages(r, baseline=float("nan"))
    with pytest.raises(ValueError, match="`decay`"):
        P.EMABaseline(decay=1.0)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("fn", [*GROUP_FNS, lambda r, g: P.reinforce_advantages(r, baseline=0.5)])
def test_dtypes(fn, dtype):
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.25, 0.75, 0.0], dtype=dtype)
    groups = torch.tensor([1, 1, 1, 0, 0, 0], dtype=torch.int32)
    got = fn(rewards, groups)
    assert got.dtype == dtype and got.shape == (6,) and torch.isfinite(got).all()
    want = fn(rewards.double(), groups)
    tol = 1e-2 if dtype in (torch.float16, torch.bfloat16) else 1e-6
    torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("fn", GROUP_FNS)
def test_empty_batch(fn):
    got = fn(torch.zeros(0), torch.zeros(0, dtype=torch.long))
    assert got.shape == (0,) and got.dtype == torch.float32


def test_reinforce_baselines():
    r = torch.tensor([1.0, 2.0, 4.0], dtype=torch.float64)
    torch.testing.assert_close(P.reinforce_advantages(r), r)
    torch.testing.assert_close(P.reinforce_advantages(r, baseline=1.5), r - 1.5)
    per_sample = torch.tensor([0.0, 1.0, 2.0], dtype=torch.float64)
    torch.testing.assert_close(P.reinforce_advantages(r, baseline=per_sample), r - per_sample)
    assert P.reinforce_advantages(torch.zeros(0)).shape == (0,)


def test_ema_baseline_is_explicit_and_checkpointable():
    ema = P.EMABaseline(decay=0.75)
    r1, r2 = torch.tensor([2.0, 4.0]), torch.tensor([8.0, 8.0])
    torch.testing.assert_close(P.reinforce_advantages(r1, baseline=ema), r1)  # no update yet
    assert ema.value is None and ema.steps == 0  # reading does not update
    ema.update(r1)
    ema.update(torch.zeros(0))  # an empty batch changes nothing
    assert float(ema.value) == 3.0 and ema.steps == 1
    ema.update(r2)
    assert float(ema.value) == 0.75 * 3.0 + 0.25 * 8.0
    state = ema.state_dict()
    other = P.EMABaseline()
    other.load_state_dict(state)
    assert other.decay == 0.75 and other.steps == 2 and float(other.value) == float(ema.value)
    torch.testing.assert_close(
        P.reinforce_advantages(r2, baseline=other), P.reinforce_advantages(r2, baseline=ema)
    )
    with pytest.raises(ValueError, match="`state`"):
        other.load_state_dict({"decay": 0.5})
    assert "EMABaseline(decay=0.75" in repr(ema)


def test_public_names():
    assert hg.policy is P
    assert set(P.__all__) >= {
        "rloo_advantages",
        "grpo_advantages",
        "dr_grpo_advantages",
        "reinforce_advantages",
        "policy_loss",
        "kl_penalty",
        "exact_sequence_gradient",
    }
    assert "policy" in hg.__all__
