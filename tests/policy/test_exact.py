"""hardgrad.policy.exact_sequence_gradient against a brute-force itertools.product loop (one
sequence, one token at a time), with and without an end token; its limits and errors;
sample_sequences' frequencies against the enumerated probabilities; the sampled estimate."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from hardgrad import policy as P


def mlp_policy(seed: int, V: int, dtype=torch.float64):  # noqa: N803
    """A tiny MLP over a one-hot of the last two tokens and the position: shared weights."""
    g = torch.Generator().manual_seed(seed)
    w1 = (0.7 * torch.randn(2 * (V + 1) + 4, 8, generator=g, dtype=torch.float64)).to(dtype)
    w2 = (0.7 * torch.randn(8, V, generator=g, dtype=torch.float64)).to(dtype)
    w1.requires_grad_()
    w2.requires_grad_()

    def policy(prefix):
        n, t = prefix.shape
        pad = torch.full((n, 2), V)
        last = torch.cat([pad, prefix], 1)[:, -2:]
        x = torch.cat(
            [
                torch.nn.functional.one_hot(last, V + 1).flatten(1).to(dtype),
                torch.nn.functional.one_hot(torch.full((n,), min(t, 3)), 4).to(dtype),
            ],
            1,
        )
        return torch.tanh(x @ w1) @ w2

    return policy, (w1, w2)


def reward(y):
    return torch.sin(y.double() @ torch.arange(1.0, y.shape[1] + 1, dtype=torch.float64))


def brute_force(policy, params, V, L, eos=None):  # noqa: N803
    value = 0.0
    seen = 0
    for seq in itertools.product(range(V), repeat=L):
        if eos is not None and eos in seq:
            end = seq.index(eos)
            if any(s != eos for s in seq[end:]):
                continue
        seen += 1
        logp = 0.0
        for t in range(L):
            if eos is not None and eos in seq[:t]:
                break
            prefix = torch.tensor([seq[:t]], dtype=torch.long).reshape(1, t)
            logp = logp + torch.log_softmax(policy(prefix)[0], -1)[seq[t]]
        value = value + torch.exp(logp) * reward(torch.tensor([seq]))[0]
    return value, torch.autograd.grad(value, params), seen


@pytest.mark.parametrize(("V", "L", "eos"), [(3, 3, None), (2, 4, None), (3, 3, 0), (4, 3, 2)])
def test_against_brute_force(V, L, eos):  # noqa: N803
    policy, params = mlp_policy(V * 10 + L, V)
    out = P.exact_sequence_gradient(
        policy, reward, vocab_size=V, length=L, params=params, eos_token=eos
    )
    value, grads, seen = brute_force(policy, params, V, L, eos)
    assert len(out.sequences) == seen
    torch.testing.assert_close(out.value, value.detach(), rtol=1e-12, atol=1e-12)
    for a, b in zip(out.grad, grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(out.probs.sum(), torch.tensor(1.0, dtype=torch.float64))
    assert isinstance(out.grad, tuple) and not out.value.requires_grad
    if eos is not None:  # after the end: eos tokens, masked
        ended = (out.sequences == eos).int()
        after = (ended.cumsum(1) - ended) > 0
        assert (out.sequences[after] == eos).all() and torch.equal(out.mask, ~after)


def test_single_tensor_params_and_lexicographic_order():
    table = torch.zeros(2, 2, dtype=torch.float64, requires_grad=True)
    out = P.exact_sequence_gradient(
        lambda s: table[s.shape[1]].expand(len(s), 2), reward, vocab_size=2, length=2, params=table
    )
    assert isinstance(out.grad, torch.Tensor) and out.grad.shape == (2, 2)
    assert out.sequences.tolist() == [list(s) for s in itertools.product(range(2), repeat=2)]
    torch.testing.assert_close(out.probs, torch.full((4,), 0.25, dtype=torch.float64))


def test_float32_policy():
    policy, params = mlp_policy(0, 3, torch.float32)
    out = P.exact_sequence_gradient(
        policy, lambda y: reward(y).float(), vocab_size=3, length=3, params=params
    )
    ref, ref_params = mlp_policy(0, 3, torch.float64)
    exact = P.exact_sequence_gradient(ref, reward, vocab_size=3, length=3, params=ref_params)
    assert out.value.dtype == torch.float32
    torch.testing.assert_close(out.grad[0].double(), exact.grad[0], rtol=1e-4, atol=1e-5)


def test_limits_and_errors():
    policy, params = mlp_policy(0, 3)
    with pytest.raises(ValueError, match=r"`vocab_size`\*\*`length`.*3\*\*13"):
        P.exact_sequence_gradient(policy, reward, vocab_size=3, length=13, params=params)
    with pytest.raises(ValueError, match="max_sequences=10"):
        P.exact_sequence_gradient(
            policy, reward, vocab_size=3, length=3, params=params, max_sequences=10
        )
    with pytest.raises(ValueError, match="`policy` to return logits of shape"):
        P.exact_sequence_gradient(policy, reward, vocab_size=4, length=2, params=params)
    with pytest.raises(ValueError, match="`reward`"):
        P.exact_sequence_gradient(
            policy, lambda y: y.double(), vocab_size=3, length=2, params=params
        )
    with pytest.raises(TypeError, match="`params`"):
        P.exact_sequence_gradient(policy, reward, vocab_size=3, length=2, params=[torch.zeros(2)])
    with pytest.raises(ValueError, match="`params`"):
        P.exact_sequence_gradient(policy, reward, vocab_size=3, length=2, params=[])
    with pytest.raises(ValueError, match="`eos_token`"):
        P.exact_sequence_gradient(
            policy, reward, vocab_size=3, length=2, params=params, eos_token=3
        )
    with pytest.raises(ValueError, match="`length`"):
        P.exact_sequence_gradient(policy, reward, vocab_size=3, length=0, params=params)
    with pytest.raises(TypeError, match="`policy`"):
        P.exact_sequence_gradient(None, reward, vocab_size=3, length=2, params=params)


@pytest.mark.statistical
def test_sample_frequencies_match_the_enumerated_probabilities():
    """40000 sequences (V = 3, L = 3, token 0 ends): each of the 15 sequences' count against
    its exact probability, |z| < 5 (binomial standard error; false-failure rate 15 * 5.7e-7);
    sampled log-probabilities equal the enumerated ones."""
    policy, params = mlp_policy(3, 3)
    exact = P.exact_sequence_gradient(
        policy, reward, vocab_size=3, length=3, params=params, eos_token=0
    )
    n = 40000
    s = P.sample_sequences(
        policy, n, vocab_size=3, length=3, eos_token=0, generator=torch.Generator().manual_seed(0)
    )
    index = (s.tokens * torch.tensor([9, 3, 1])).sum(1)
    table = (exact.sequences * torch.tensor([9, 3, 1])).sum(1)
    position = {int(k): i for i, k in enumerate(table)}
    which = torch.tensor([position[int(k)] for k in index])
    counts = torch.bincount(which, minlength=len(table)).double()
    p = exact.probs
    z = (counts - n * p) / torch.sqrt(n * p * (1 - p))
    assert (z.abs() < 5).all(), z
    torch.testing.assert_close(s.logprobs.detach().sum(1), exact.logprobs[which])
    assert torch.equal(s.mask, exact.mask[which])


def test_sample_sequences_edge_cases():
    policy, _ = mlp_policy(0, 3)
    empty = P.sample_sequences(policy, 0, vocab_size=3, length=2)
    assert empty.tokens.shape == (0, 2) and empty.logprobs.shape == (0, 2)
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    a = P.sample_sequences(policy, 6, vocab_size=3, length=3, generator=g1)
    b = P.sample_sequences(policy, 6, vocab_size=3, length=3, generator=g2)
    assert torch.equal(a.tokens, b.tokens) and a.mask.all()
    assert a.logprobs.requires_grad


@pytest.mark.slow
@pytest.mark.statistical
def test_sampled_sequence_gradient_is_unbiased():
    """The mean of 400 seeded estimates with 64 samples each against the exact gradient,
    z-test per coordinate (|z| < 5; 139 coordinates: false-failure rate 8e-5)."""
    policy, params = mlp_policy(4, 3)
    exact = P.exact_sequence_gradient(
        policy, reward, vocab_size=3, length=3, params=params, eos_token=0
    )
    g = torch.Generator().manual_seed(0)
    runs = [
        torch.cat(
            [
                x.flatten()
                for x in P.sampled_sequence_gradient(
                    policy,
                    reward,
                    vocab_size=3,
                    length=3,
                    params=params,
                    num_samples=64,
                    eos_token=0,
                    generator=g,
                ).grad
            ]
        )
        for _ in range(400)
    ]
    samples = torch.stack(runs)
    want = torch.cat([x.flatten() for x in exact.grad])
    se = samples.std(0) / math.sqrt(len(samples))
    live = se > 0
    z = (samples.mean(0)[live] - want[live]) / se[live]
    assert (z.abs() < 5).all(), z.abs().max()
