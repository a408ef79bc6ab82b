r"""Assertions for testing your own hard ops, surrogates and gradient estimators.

hardgrad's own conformance suite is built on these helpers; they are public so that a
model's custom operations can be held to the same standard in the user's test suite
(pytest, unittest, or a plain script: each helper raises :class:`AssertionError` with a
readable message when the property does not hold, and returns quietly or with a report
when it does).

* :func:`assert_straight_through` — the forward of an op is bit-identical to the hard
  function it replaces, and its backward equals the vector-Jacobian product of a chosen
  surrogate, in every floating dtype, at discontinuities and at large magnitudes.
* :func:`assert_unbiased` — a seeded z-test of an estimator's mean gradient against the
  exact gradient by enumeration, with its false-failure rate stated and controlled.
* :func:`assert_unbiased_advantages` — the same z-test for your own policy-gradient
  advantage function (rewards and group ids -> advantages) on a small autoregressive policy,
  against the exact gradient over all its sequences.
* :func:`assert_compiles` — a function compiles with ``torch.compile(fullgraph=True)`` and
  gives the eager values and gradients.

Example:
    The detach trick, the straight-through round most blog posts write, is not exact: it
    turns ``round(-0.3) = -0.0`` into ``+0.0``; with an unbounded soft part it is worse
    (``sign`` of ``1e30`` comes out 0 in bfloat16):

    >>> import torch, hardgrad as hg
    >>> from hardgrad.testing import assert_straight_through
    >>> def my_round(x):
    ...     return x + (torch.round(x) - x).detach()
    >>> assert_straight_through(my_round, torch.round, lambda x: x)
    Traceback (most recent call last):
    ...
    AssertionError: forward of my_round differs from round in float64 at 12 of 88 inputs (the first: x[3]=-0.0352631: got 0, expected -0.0; ...
    >>> def my_sign(x):
    ...     return x + (torch.sign(x) - x).detach()
    >>> assert_straight_through(my_sign, torch.sign, lambda x: x, dtypes=[torch.bfloat16])
    Traceback (most recent call last):
    ...
    AssertionError: forward of my_sign differs from sign in bfloat16 at 4 of 88 inputs (the first: x[84]=1.00026e+30: got 0, expected 1; ...
    >>> assert_straight_through(hg.round, torch.round, lambda x: x)  # passes
"""

from ._compiles import assert_compiles
from ._straight_through import assert_straight_through, default_inputs
from ._unbiased import UnbiasednessTest, assert_unbiased
from ._unbiased_advantages import assert_unbiased_advantages

__all__ = [
    "UnbiasednessTest",
    "assert_compiles",
    "assert_straight_through",
    "assert_unbiased",
    "assert_unbiased_advantages",
    "default_inputs",
]
