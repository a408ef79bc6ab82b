r"""Forward-mode rules (``jvp``) of the pathwise samplers: ``torch.func.jvp``, ``jacfwd``
and ``torch.autograd.forward_ad`` through ``hg.bernoulli`` and ``hg.categorical``.

A pathwise estimator's backward multiplies the incoming gradient by a surrogate Jacobian
:math:`J` of the sample with respect to the logits; its forward mode multiplies the
logits' tangent by the same :math:`J`. Every estimator here has a symmetric :math:`J`:

* straight-through, ST-Gumbel, gapped ST: :math:`\tfrac1\tau J(p)` with the softmax
  Jacobian :math:`J(p) = \operatorname{diag}(p) - p p^\top` at some probability vector;
* Gumbel-Rao: a mean of such matrices over conditional draws;
* ReinMax: :math:`2 J(\pi_1) - \tfrac12 J(\pi_0)`;
* the identity; and every Bernoulli form, which is diagonal.

So the tangent of the sample is the backward's formula applied to the tangent of the
logits, :math:`\dot y = J \dot\ell = J^\top \dot\ell`, computed by the very code the
backward runs (the same numbers for the same vector). The Gumbel-softmax relaxation's
Jacobian, :math:`\tfrac1\tau J(y)`, is symmetric too. The score-function estimators of
:func:`hardgrad.expectation` get the estimate's directional derivative (``_ScoreGradientJVP``);
REBAR and RELAX have none and say so. Each twin below saves for forward what its plain
class saves for backward; :func:`hardgrad.ops._autograd.apply_function` uses the twins only
under a ``torch.func`` transform or a forward-AD dual level (see
:func:`hardgrad.ops._autograd.forward_mode`).
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from ..ops._autograd import cached_signature, forward_mode
from ._gst import _BinaryGappedSample, _GappedSample
from ._gumbel_rao import _BinaryGumbelRaoSample, _GumbelRaoSample
from ._gumbel_softmax import _GumbelStraightThroughSample, _Relaxation
from ._pathwise import _BinaryPerturbedSample, _BinarySample
from ._reinmax import _ReinMaxSample
from ._score import _ScoreGradient
from ._straight_through import _IdentitySample, _StraightThroughSample


@forward_mode(_BinarySample)
@cached_signature
class _BinarySampleJVP(_BinarySample):
    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        _BinarySample.setup_context(ctx, inputs, output)
        saved = {"st": (inputs[0],), "reinmax": (inputs[0], output)}
        ctx.save_for_forward(*saved.get(ctx.kind, ()))

    @staticmethod
    def jvp(ctx: Any, tangent: Tensor, *_others: Any) -> Tensor | None:
        return _BinarySample.backward(ctx, tangent)[0]


@forward_mode(_BinaryPerturbedSample)
@cached_signature
class _BinaryPerturbedSampleJVP(_BinaryPerturbedSample):
    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
        _BinaryPerturbedSample.setup_context(ctx, inputs, output)
        ctx.save_for_forward(output[1])

    @staticmethod
    def jvp(ctx: Any, tangent: Tensor, *_others: Any) -> tuple[Tensor | None, None]:
        return _BinaryPerturbedSample.backward(ctx, tangent, None)[0], None


@forward_mode(_StraightThroughSample)
@cached_signature
class _StraightThroughSampleJVP(_StraightThroughSample):
    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        _StraightThroughSample.setup_context(ctx, inputs, output)
        ctx.save_for_forward(inputs[0])

    @staticmethod
    def jvp(ctx: Any, tangent: Tensor, *_others: Any) -> Tensor:
        return _StraightThroughSample.backward(ctx, tangent)[0]


@forward_mode(_IdentitySample)
@cached_signature
class _IdentitySampleJVP(_IdentitySample):
    @staticmethod
    def jvp(ctx: Any, tangent: Tensor, *_others: Any) -> Tensor:
        return tangent


@forward_mode(_GumbelStraightThroughSample)
@cached_signature
class _GumbelStraightThroughSampleJVP(_GumbelStraightThroughSample):
    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
        _GumbelStraightThroughSample.setup_context(ctx, inputs, output)
        ctx.save_for_forward(output[1])

    @staticmethod
    def jvp(ctx: Any, tangent: Tensor, *_others: Any) -> tuple[Tensor, None]:
        return _GumbelStraightThroughSample.backward(ctx, tangent, None)[0], None


@forward_mode(_Relaxation)
@cached_signature
class _RelaxationJVP(_Relaxation):
    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        _Relaxation.setup_context(ctx, inputs, output)
        ctx.save_for_forward(*((output,) if ctx.from_output else inputs[:2]))

    @staticmethod
    def jvp(ctx: Any, tangent: Tensor, *_others: Any) -> Tensor:
        return _Relaxation.backward(ctx, tangent)[0]


@forward_mode(_BinaryGappedSample)
@cached_signature
class _BinaryGappedSampleJVP(_BinaryGappedSample):
    """The rules of its base class's twin: the same saved difference and slope."""

    setup_context = staticmethod(_BinaryPerturbedSampleJVP.setup_context)
    jvp = staticmethod(_BinaryPerturbedSampleJVP.jvp)


@forward_mode(_GappedSample)
@cached_signature
class _GappedSampleJVP(_GappedSample):
    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
        _GappedSample.setup_context(ctx, inputs, output)
        ctx.save_for_forward(output[1])

    @staticmethod
    def jvp(ctx: Any, tangent: Tensor, *_others: Any) -> tuple[Tensor, None]:
        return _GappedSample.backward(ctx, tangent, None)[0], None


@forward_mode(_GumbelRaoSample)
@cached_signature
class _GumbelRaoSampleJVP(_GumbelRaoSample):
    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        _GumbelRaoSample.setup_context(ctx, inputs, output)
        ctx.save_for_forward(inputs[0], output, inputs[2])  # (explicit draws here)

    @staticmethod
    def jvp(ctx: Any, tangent: Tensor, *_others: Any) -> Tensor:
        return _GumbelRaoSample.backward(ctx, tangent)[0]


@forward_mode(_BinaryGumbelRaoSample)
@cached_signature
class _BinaryGumbelRaoSampleJVP(_BinaryGumbelRaoSample):
    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
        _BinaryGumbelRaoSample.setup_context(ctx, inputs, output)
        ctx.save_for_forward(output[1])

    @staticmethod
    def jvp(ctx: Any, tangent: Tensor, *_others: Any) -> tuple[Tensor | None, None]:
        return _BinaryGumbelRaoSample.backward(ctx, tangent, None)[0], None


@forward_mode(_ReinMaxSample)
@cached_signature
class _ReinMaxSampleJVP(_ReinMaxSample):
    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        _ReinMaxSample.setup_context(ctx, inputs, output)
        ctx.save_for_forward(inputs[0], output)

    @staticmethod
    def jvp(ctx: Any, tangent: Tensor, *_others: Any) -> Tensor:
        return _ReinMaxSample.backward(ctx, tangent)[0]


@forward_mode(_ScoreGradient)
@cached_signature
class _ScoreGradientJVP(_ScoreGradient):
    r"""The score-function family's forward mode: the estimate's directional derivative.

    The backward hands the logits :math:`\hat g \,\bar y` (the estimated gradient times the
    incoming gradient); forward mode gives the output the tangent
    :math:`\langle \hat g, \dot\ell\rangle`, summed over the logits' trailing dimensions, so
    that ``jvp`` and ``grad`` agree on the same draw.
    """

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        _ScoreGradient.setup_context(ctx, inputs, output)
        ctx.save_for_forward(inputs[1])

    @staticmethod
    def jvp(ctx: Any, tangent: Tensor, *_others: Any) -> Tensor:
        (gradient,) = ctx.saved_tensors
        product = gradient * tangent
        if ctx.extra:
            product = product.sum(tuple(range(-ctx.extra, 0)))
        return product.to(tangent.dtype)
