r"""The exact expected reward of a small autoregressive policy and its gradient, by enumerating
every sequence; sampling sequences and an unbiased Monte-Carlo estimate for larger ones.

A *policy* here is a function from a batch of prefixes, a ``LongTensor`` ``(M, t)`` of token
ids (``t = 0`` for the first token), to next-token logits ``(M, V)``; a *reward* is a function
from sequences ``(M, L)`` to rewards ``(M,)``. With ``eos_token`` set, a sequence ends at its
first ``eos_token`` (which counts as one of its tokens), and the positions after it hold
``eos_token``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from .._core.validation import check_int
from ._advantages import rloo_advantages
from ._loss import policy_loss

__all__ = [
    "SequenceGradient",
    "SequenceSample",
    "exact_sequence_gradient",
    "sample_sequences",
    "sampled_sequence_gradient",
]

Policy = Callable[[Tensor], Tensor]
Reward = Callable[[Tensor], Tensor]

#: The most sequences :func:`exact_sequence_gradient` enumerates unless told otherwise.
MAX_SEQUENCES = 10**6


@dataclass(frozen=True)
class SequenceGradient:
    """The expected reward and its gradient, from :func:`exact_sequence_gradient` (exact) or
    :func:`sampled_sequence_gradient` (an unbiased estimate).

    Attributes:
        value: the expected reward :math:`J = \\mathbb{E}_{y \\sim \\pi}[R(y)]` (0-dim,
            detached), or the sample mean of the rewards.
        grad: :math:`\\nabla J` with respect to ``params``: one tensor if ``params`` was a
            tensor, else a tuple with one tensor per parameter.
        sequences: ``(M, L)`` the sequences enumerated (every sequence once, in
            lexicographic order) or sampled.
        rewards: ``(M,)`` their rewards (detached).
        logprobs: ``(M,)`` their log-probabilities :math:`\\log\\pi(y)` (detached).
        mask: ``(M, L)`` bool, the tokens that belong to each sequence (all True without
            ``eos_token``).
    """

    value: Tensor
    grad: Tensor | tuple[Tensor, ...]
    sequences: Tensor
    rewards: Tensor
    logprobs: Tensor
    mask: Tensor

    @property
    def probs(self) -> Tensor:
        """``(M,)`` :math:`\\pi(y)`, the probability of each sequence."""
        return self.logprobs.exp()


@dataclass(frozen=True)
class SequenceSample:
    """Sequences sampled by :func:`sample_sequences`.

    Attributes:
        tokens: ``(N, L)`` token ids (``eos_token`` after a sequence's end).
        logprobs: ``(N, L)`` per-token log-probabilities, with gradient to the policy's
            parameters (0 after the end).
        mask: ``(N, L)`` bool, the tokens that belong to each sequence.
    """

    tokens: Tensor
    logprobs: Tensor
    mask: Tensor


def _check_policy_args(
    policy: Any, vocab_size: Any, length: Any, eos_token: Any
) -> tuple[int, int, int | None]:
    if not callable(policy):
        raise TypeError(f"Expected `policy` to be callable, but found {type(policy).__name__}")
    vocab_size = check_int(vocab_size, "vocab_size", low=1)
    length = check_int(length, "length", low=1)
    if eos_token is not None:
        eos_token = check_int(eos_token, "eos_token", low=0, high=vocab_size - 1)
    return vocab_size, length, eos_token


def _params(params: Any) -> tuple[Tensor, ...]:
    items = (params,) if isinstance(params, Tensor) else tuple(params)
    if not items:
        raise ValueError("Expected `params` to hold at least one tensor, but found none")
    for p in items:
        if not isinstance(p, Tensor) or not p.requires_grad:
            raise TypeError(
                f"Expected `params` to be tensors that require grad, but found "
                f"{type(p).__name__}" + (" without requires_grad" if isinstance(p, Tensor) else "")
            )
    return items


def _next_logits(policy: Policy, prefixes: Tensor, vocab_size: int) -> Tensor:
    logits = policy(prefixes)
    rows = prefixes.shape[0]
    if not isinstance(logits, Tensor) or logits.shape != (rows, vocab_size):
        found = tuple(logits.shape) if isinstance(logits, Tensor) else type(logits).__name__
        raise ValueError(
            f"Expected `policy` to return logits of shape ({rows}, {vocab_size}) for prefixes "
            f"of shape {tuple(prefixes.shape)}, but found {found}"
        )
    if not logits.is_floating_point():
        raise TypeError(f"Expected `policy` to return floating logits, but found {logits.dtype}")
    return logits


def _ended_before(tokens: Tensor, eos_token: int | None) -> Tensor:
    """``(M, L)`` bool: an ``eos_token`` occurs strictly before each position."""
    if eos_token is None:
        return torch.zeros_like(tokens, dtype=torch.bool)
    is_eos = (tokens == eos_token).int()
    return (is_eos.cumsum(dim=1) - is_eos) > 0


def _rewards(reward: Any, sequences: Tensor) -> Tensor:
    if not callable(reward):
        raise TypeError(f"Expected `reward` to be callable, but found {type(reward).__name__}")
    values = reward(sequences)
    if not isinstance(values, Tensor) or values.shape != sequences.shape[:1]:
        found = tuple(values.shape) if isinstance(values, Tensor) else type(values).__name__
        raise ValueError(
            f"Expected `reward` to return a tensor of shape ({sequences.shape[0]},), one reward "
            f"per sequence, but found {found}"
        )
    return values


@dataclass(frozen=True)
class _Enumeration:
    """Every sequence of a small policy once, from :func:`_enumerate`.

    ``sequences`` ``(M, L)`` in lexicographic order (with ``eos_token``, one representative per
    ended sequence); ``per_token`` ``(M, L)`` log-probabilities with gradient (0 after the
    end); ``ended`` ``(M, L)`` True after the end; ``node_logprobs`` the log-probabilities of
    the tree's nodes (prefix, next token) with gradient, each position's ``log_softmax`` rows
    ``(V**t, V)`` flattened and concatenated; ``nodes`` ``(M, L)`` long, the node of each
    token (``per_token == node_logprobs[nodes]`` where not ended)."""

    sequences: Tensor
    per_token: Tensor
    ended: Tensor
    node_logprobs: Tensor
    nodes: Tensor


def _enumerate(
    policy: Policy, vocab_size: int, length: int, eos_token: int | None, device: torch.device
) -> _Enumeration:
    """Every sequence with its log-probabilities (checked arguments; see :class:`_Enumeration`)."""
    count = vocab_size**length
    index = torch.arange(count, device=device)
    powers = vocab_size ** torch.arange(length - 1, -1, -1, device=device)
    sequences = (index[:, None] // powers) % vocab_size  # lexicographic order
    ended = _ended_before(sequences, eos_token)
    keep = None
    if eos_token is not None:  # one representative per ended sequence: eos after the end
        keep = (~ended | (sequences == eos_token)).all(dim=1)
    token_logprobs, nodes, tree, offset = [], [], [], 0
    for t in range(length):
        prefixes = sequences[:: vocab_size ** (length - t), :t]  # all V^t prefixes, in order
        logp = torch.log_softmax(_next_logits(policy, prefixes, vocab_size), dim=-1)
        row = index // vocab_size ** (length - t)
        token_logprobs.append(logp[row, sequences[:, t]])
        nodes.append(offset + row * vocab_size + sequences[:, t])
        tree.append(logp.reshape(-1))
        offset += logp.numel()
    per_token = torch.stack(token_logprobs, dim=1)
    per_token = torch.where(ended, torch.zeros_like(per_token), per_token)
    node_index = torch.stack(nodes, dim=1)
    if keep is not None:
        sequences, per_token, ended = sequences[keep], per_token[keep], ended[keep]
        node_index = node_index[keep]
    return _Enumeration(sequences, per_token, ended, torch.cat(tree), node_index)


def exact_sequence_gradient(
    policy: Policy,
    reward: Reward,
    *,
    vocab_size: int,
    length: int,
    params: Tensor | Iterable[Tensor],
    eos_token: int | None = None,
    max_sequences: int = MAX_SEQUENCES,
) -> SequenceGradient:
    r"""The exact expected reward of an autoregressive policy and its gradient, by enumerating
    all :math:`V^L` sequences.

    .. math::

        J(\theta) = \sum_{y \in \{0..V-1\}^L} \pi_\theta(y)\, R(y), \qquad
        \pi_\theta(y) = \prod_{t} \operatorname{softmax}(f_\theta(y_{<t}))_{y_t},

    and :math:`\nabla_\theta J` by autograd through the sum. The policy is called once per
    position :math:`t`, on all :math:`V^t` prefixes at once (about :math:`V^L \cdot
    V/(V-1)` rows in all), and the reward once, on all sequences. With ``eos_token``, the
    product stops at the first ``eos_token`` and each ended sequence is counted once (its
    positions after the end hold ``eos_token``), so the probabilities still sum to 1.

    The ground truth of :mod:`hardgrad.policy`'s estimators: an unbiased estimator's mean
    gradient equals ``grad`` (see the guide, "Policy gradients for sequences").

    Args:
        policy: prefixes ``(M, t)`` (long, on the device of ``params``) -> logits ``(M, V)``.
        reward: sequences ``(M, L)`` -> rewards ``(M,)``. A reward that depends on
            ``params`` contributes its own gradient too.
        vocab_size: :math:`V \ge 1`.
        length: :math:`L \ge 1`, the number of tokens (the maximum with ``eos_token``).
        params: the tensors (requiring grad) to differentiate with respect to, e.g.
            ``model.parameters()`` or one tensor.
        eos_token: a token id that ends a sequence, or None (all sequences have length L).
        max_sequences: refuse (``ValueError``) when :math:`V^L` exceeds it (default
            :math:`10^6`).

    Returns:
        A :class:`SequenceGradient` (``value``, ``grad``, and the enumerated ``sequences``,
        ``rewards``, ``logprobs``, ``mask``, ``probs``).

    Example:
        >>> import torch, hardgrad as hg
        >>> g = torch.Generator().manual_seed(0)
        >>> table = torch.randn(3, 2, generator=g, dtype=torch.float64).requires_grad_()
        >>> policy = lambda prefix: table[prefix.shape[1]].expand(len(prefix), 2)  # 2 tokens
        >>> reward = lambda y: y.sum(dim=1).double()  # number of ones
        >>> out = hg.policy.exact_sequence_gradient(
        ...     policy, reward, vocab_size=2, length=3, params=table)
        >>> out.value  # sum of sigmoid(table[:, 1] - table[:, 0])
        tensor(1.4996, dtype=torch.float64)
        >>> out.grad
        tensor([[-0.1187,  0.1187],
                [-0.0566,  0.0566],
                [-0.2439,  0.2439]], dtype=torch.float64)
    """
    vocab_size, length, eos_token = _check_policy_args(policy, vocab_size, length, eos_token)
    max_sequences = check_int(max_sequences, "max_sequences", low=1)
    items = _params(params)
    count = vocab_size**length
    if count > max_sequences:
        raise ValueError(
            f"Expected `vocab_size`**`length` <= max_sequences={max_sequences} sequences to "
            f"enumerate, but found {vocab_size}**{length} = {count}; use "
            f"sampled_sequence_gradient for larger spaces"
        )
    tree = _enumerate(policy, vocab_size, length, eos_token, items[0].device)
    sequences, ended = tree.sequences, tree.ended
    logprobs = tree.per_token.sum(dim=1)
    rewards = _rewards(reward, sequences)
    value = (logprobs.exp() * rewards.to(logprobs.dtype)).sum()
    grads = torch.autograd.grad(value, items, allow_unused=True)
    grads = tuple(
        torch.zeros_like(p) if g is None else g for p, g in zip(items, grads, strict=True)
    )
    return SequenceGradient(
        value=value.detach(),
        grad=grads[0] if isinstance(params, Tensor) else grads,
        sequences=sequences,
        rewards=rewards.detach(),
        logprobs=logprobs.detach(),
        mask=~ended,
    )


def sample_sequences(
    policy: Policy,
    num_samples: int,
    *,
    vocab_size: int,
    length: int,
    eos_token: int | None = None,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
) -> SequenceSample:
    r"""Sample ``num_samples`` sequences from an autoregressive policy, with their per-token
    log-probabilities (with gradient) for :func:`policy_loss`.

    Token :math:`t` is drawn from :math:`\operatorname{softmax}(f(y_{<t}))` with
    ``generator``; the policy is called ``length`` times on the whole batch. After a
    sequence's ``eos_token`` its tokens are ``eos_token``, its mask False and its
    log-probabilities 0.

    Args:
        policy: prefixes ``(N, t)`` -> logits ``(N, V)``.
        num_samples: :math:`N \ge 0`.
        vocab_size: :math:`V`.
        length: :math:`L`, the (maximum) number of tokens.
        eos_token: a token id that ends a sequence, or None.
        generator: the source of randomness (the global one when None).
        device: where the prefixes are made (the generator's device when None).

    Returns:
        A :class:`SequenceSample` (``tokens``, ``logprobs``, ``mask``).

    Example:
        >>> import torch, hardgrad as hg
        >>> logits = torch.tensor([0.0, 1.0, 1.0], requires_grad=True)
        >>> policy = lambda prefix: logits.expand(len(prefix), 3)  # token 0 ends
        >>> g = torch.Generator().manual_seed(0)
        >>> s = hg.policy.sample_sequences(policy, 3, vocab_size=3, length=4, eos_token=0, generator=g)
        >>> s.tokens
        tensor([[2, 2, 2, 2],
                [1, 2, 1, 2],
                [1, 2, 0, 0]])
        >>> s.mask
        tensor([[ True,  True,  True,  True],
                [ True,  True,  True,  True],
                [ True,  True,  True, False]])
    """
    vocab_size, length, eos_token = _check_policy_args(policy, vocab_size, length, eos_token)
    num_samples = check_int(num_samples, "num_samples", low=0)
    if device is None:
        device = generator.device if generator is not None else torch.device("cpu")
    tokens = torch.zeros(num_samples, 0, dtype=torch.long, device=device)
    ended = torch.zeros(num_samples, dtype=torch.bool, device=device)
    logprobs, masks = [], []
    for _ in range(length):
        logp = torch.log_softmax(_next_logits(policy, tokens, vocab_size), dim=-1)
        if num_samples:
            draw = torch.multinomial(logp.detach().exp().float(), 1, generator=generator)[:, 0]
        else:
            draw = torch.zeros(0, dtype=torch.long, device=logp.device)
        draw = draw.to(device)
        if eos_token is not None:
            draw = torch.where(ended, torch.full_like(draw, eos_token), draw)
        chosen = logp.gather(1, draw.to(logp.device)[:, None])[:, 0]
        live = (~ended).to(chosen.device)
        logprobs.append(torch.where(live, chosen, torch.zeros_like(chosen)))
        masks.append(~ended)
        tokens = torch.cat([tokens, draw[:, None]], dim=1)
        if eos_token is not None:
            ended = ended | (draw == eos_token)
    return SequenceSample(tokens, torch.stack(logprobs, dim=1), torch.stack(masks, dim=1))


def sampled_sequence_gradient(
    policy: Policy,
    reward: Reward,
    *,
    vocab_size: int,
    length: int,
    params: Tensor | Iterable[Tensor],
    num_samples: int,
    eos_token: int | None = None,
    generator: torch.Generator | None = None,
) -> SequenceGradient:
    r"""An unbiased Monte-Carlo estimate of :func:`exact_sequence_gradient`'s result, for
    spaces too large to enumerate.

    Samples :math:`N` = ``num_samples`` sequences (:func:`sample_sequences`) and returns
    their mean reward and the RLOO policy gradient
    :math:`\frac1N \sum_i (R_i - \frac{1}{N-1}\sum_{j\ne i} R_j)\nabla\log\pi(y_i)`
    (:func:`rloo_advantages` over one group, :func:`policy_loss` with ``"token-sum"`` and
    normaliser :math:`N`): both unbiased (Kool et al. 2019,
    https://openreview.net/forum?id=r1lgTGL5DE).

    Args:
        policy, reward, vocab_size, length, params, eos_token: as in
            :func:`exact_sequence_gradient`.
        num_samples: :math:`N \ge 2`.
        generator: the source of randomness.

    Returns:
        A :class:`SequenceGradient` over the sampled sequences (``probs`` are their
        probabilities, not weights of a sum).

    Example:
        >>> import torch, hardgrad as hg
        >>> table = torch.zeros(3, 2, dtype=torch.float64, requires_grad=True)
        >>> policy = lambda prefix: table[prefix.shape[1]].expand(len(prefix), 2)
        >>> reward = lambda y: y.sum(dim=1).double()
        >>> g = torch.Generator().manual_seed(0)
        >>> est = hg.policy.sampled_sequence_gradient(
        ...     policy, reward, vocab_size=2, length=3, params=table, num_samples=4000, generator=g)
        >>> est.grad  # exact: -0.25, 0.25 in every row
        tensor([[-0.2410,  0.2410],
                [-0.2512,  0.2512],
                [-0.2493,  0.2493]], dtype=torch.float64)
    """
    num_samples = check_int(num_samples, "num_samples", low=2)
    items = _params(params)
    sample = sample_sequences(
        policy,
        num_samples,
        vocab_size=vocab_size,
        length=length,
        eos_token=eos_token,
        generator=generator,
        device=items[0].device,
    )
    rewards = _rewards(reward, sample.tokens)
    groups = torch.zeros(num_samples, dtype=torch.long, device=rewards.device)
    advantages = rloo_advantages(rewards.detach(), groups)
    loss = policy_loss(
        sample.logprobs, advantages, sample.mask, aggregation="token-sum", normalizer=num_samples
    )
    grads = torch.autograd.grad(-loss, items, allow_unused=True)
    grads = tuple(
        torch.zeros_like(p) if g is None else g for p, g in zip(items, grads, strict=True)
    )
    return SequenceGradient(
        value=rewards.detach().mean(),
        grad=grads[0] if isinstance(params, Tensor) else grads,
        sequences=sample.tokens,
        rewards=rewards.detach(),
        logprobs=sample.logprobs.detach().sum(dim=1),
        mask=sample.mask,
    )
