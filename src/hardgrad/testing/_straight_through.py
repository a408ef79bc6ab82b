r""":func:`assert_straight_through`: exact forward, surrogate backward."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from ..surrogates import SURROGATES, Surrogate

__all__ = ["assert_straight_through", "default_inputs"]

_FLOAT_DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16)

#: Large but finite magnitudes per dtype (well inside the range, so that ``x / 3`` and the
#: surrogate's float64 reference stay finite).
_LARGE = {torch.float64: 1e300, torch.float32: 1e30, torch.float16: 6e4, torch.bfloat16: 1e30}

#: (rtol, atol) for a gradient computed in a dtype against the float64 reference; ``atol``
#: is relative to the largest magnitude of the reference (at least 1).
_TOLERANCE = {
    torch.float64: (1e-10, 1e-12),
    torch.float32: (1e-5, 1e-6),
    torch.float16: (1e-2, 4e-3),
    torch.bfloat16: (4e-2, 3e-2),
}

_SHOWN = 5  # mismatches listed in a failure message


def default_inputs(
    dtype: torch.dtype = torch.float32, device: torch.device | str | None = None
) -> Tensor:
    """The inputs :func:`assert_straight_through` uses when none are given (1-D).

    64 seeded normal values with standard deviation 3, every integer and half-integer in
    [-3, 3] (the discontinuities of rounding), +-0.0, +-1e-3, the smallest subnormal and
    normal numbers of ``dtype``, and large magnitudes (+-1e300 in float64, +-1e30 in
    float32 and bfloat16, +-6e4 in float16, and a third of each). All finite.

    Example:
        >>> from hardgrad.testing import default_inputs
        >>> x = default_inputs(torch.float16)
        >>> x.shape, x.dtype, bool(x.isfinite().all())
        (torch.Size([88]), torch.float16, True)
    """
    if dtype not in _FLOAT_DTYPES:
        raise TypeError(f"Expected `dtype` to be one of {list(_FLOAT_DTYPES)}, but found {dtype}")
    random = torch.randn(64, generator=torch.Generator().manual_seed(20260), dtype=torch.float32)
    halves = [k / 2 for k in range(-6, 7)]  # -3, -2.5, ..., 3 (0 once; -0.0 below)
    info = torch.finfo(dtype)
    large = _LARGE[dtype]
    special = [
        *halves,
        -0.0,
        1e-3,
        -1e-3,
        info.smallest_normal,
        -info.smallest_normal,
        info.smallest_normal * info.eps,  # the smallest subnormal
        -info.smallest_normal * info.eps,
        large,
        -large,
        large / 3,
        -large / 3,
    ]
    x = torch.cat([(3 * random).to(dtype), torch.tensor(special, dtype=torch.float64).to(dtype)])
    return x.to(device) if device is not None else x


def assert_straight_through(
    op: Callable[[Tensor], Tensor],
    hard: Callable[[Tensor], Tensor],
    surrogate: Callable[[Tensor], Tensor] | Surrogate | str,
    *,
    inputs: Tensor | None = None,
    dtypes: Sequence[torch.dtype] | None = None,
    grad_output: Tensor | None = None,
    signed_zeros: bool = True,
    rtol: float | None = None,
    atol: float | None = None,
) -> None:
    r"""Assert that ``op`` computes ``hard`` exactly and back-propagates ``surrogate``'s gradient.

    For every dtype, with :math:`x` the inputs in that dtype and :math:`\bar y` an upstream
    gradient:

    * **forward**: ``op(x)`` has the shape, dtype and device of ``hard(x)`` and the same
      bits (NaN where it is NaN and, with ``signed_zeros``, the same sign on zeros);
    * **backward**: the gradient of ``op`` at :math:`x` against :math:`\bar y` equals the
      surrogate's vector-Jacobian product :math:`J_s(x)^\top \bar y`, computed
      independently in float64 by autograd through ``surrogate(x)`` (a callable :math:`s`),
      or as :math:`\bar y \odot s'(x)` from a :class:`hardgrad.surrogates.Surrogate`'s
      ``derivative``. Tolerances are relative to float64 and depend on the dtype
      (``rtol`` 1e-10, 1e-5, 1e-2, 4e-2 for float64, float32, float16, bfloat16; ``atol``
      the same order, scaled by the largest expected magnitude).

    Straight-through ops are not ``gradcheck``-ed: their numerical derivative is 0 almost
    everywhere, which is the point of replacing it.

    It never passes vacuously: it fails when ``inputs`` is empty, when ``hard`` equals the
    surrogate's smooth function (the callable, or a :class:`~hardgrad.surrogates.Surrogate`'s
    ``function``) at every input (the inputs hit no kink or jump, so the smooth function
    itself would pass), and when the op's gradient is zero at every input (no gradient at
    all, or a surrogate whose derivative vanishes on every input).

    Args:
        op: the op under test, a function of one tensor (bind its settings with a lambda
            or :func:`functools.partial`).
        hard: the exact function it must reproduce, e.g. ``torch.round``.
        surrogate: a function :math:`s` whose autograd gradient the backward must equal
            (``lambda x: x`` for the identity straight-through estimator, ``torch.sigmoid``,
            ``lambda x: torch.clamp(x, -1, 1)``, ``lambda x: torch.softmax(x, -1)`` for a
            one-hot argmax...), or a surrogate by name (``"sigmoid"``) or instance
            (:class:`~hardgrad.surrogates.Surrogate`: elementwise :math:`s'`), as every
            op takes it.
        inputs: where to test (any shape and dtype); default :func:`default_inputs`,
            which includes the discontinuities of rounding and large magnitudes.
        dtypes: the dtypes to test; default all four floating dtypes when ``inputs`` is
            None, else the dtype of ``inputs``.
        grad_output: the upstream gradient :math:`\bar y` (default: seeded normal values).
        signed_zeros: also compare the sign of zeros in the forward (default True: the
            detach trick ``x + (round(x) - x).detach()`` gives ``+0.0`` where ``round``
            gives ``-0.0``).
        rtol: relative tolerance of the backward for every dtype (default per dtype).
        atol: absolute tolerance of the backward, relative to the largest expected value.

    Raises:
        AssertionError: the forward or the backward differs, with the first mismatches;
            or nothing would be checked (empty inputs, ``hard`` equal to the surrogate
            on every input, a gradient that is zero on every input).
        TypeError: an argument has the wrong type.
        ValueError: ``surrogate`` is a name no surrogate is registered under, ``dtypes``
            is empty, or ``grad_output`` is all zeros.

    Example:
        >>> import torch, hardgrad as hg
        >>> from hardgrad.testing import assert_straight_through
        >>> assert_straight_through(hg.sign, torch.sign, lambda x: torch.clamp(x, -1, 1))
        >>> assert_straight_through(
        ...     lambda x: hg.heaviside(x, surrogate="sigmoid"),
        ...     lambda x: (x > 0).to(x.dtype),
        ...     hg.surrogates.Sigmoid(),
        ... )
        >>> assert_straight_through(hg.sign, torch.sign, "clipped")
        >>> assert_straight_through(hg.sign, torch.sign, torch.tanh)
        Traceback (most recent call last):
        ...
        AssertionError: backward of sign is not the surrogate's gradient in float64 ...
    """
    if not callable(op):
        raise TypeError(f"Expected `op` to be callable, but found {type(op).__name__}")
    if not callable(hard):
        raise TypeError(f"Expected `hard` to be callable, but found {type(hard).__name__}")
    if isinstance(surrogate, str):
        named: Surrogate = SURROGATES.default(surrogate, "surrogate")  # unknown: lists the names
        surrogate = named
    elif not (callable(surrogate) or isinstance(surrogate, Surrogate)):
        raise TypeError(
            "Expected `surrogate` to be a callable, a surrogate name or a "
            f"hardgrad.surrogates.Surrogate, but found {type(surrogate).__name__}"
        )
    if inputs is not None and not (isinstance(inputs, Tensor) and inputs.is_floating_point()):
        raise TypeError(f"Expected `inputs` to be a floating tensor, but found {_describe(inputs)}")
    if dtypes is None:
        dtypes = _FLOAT_DTYPES if inputs is None else (inputs.dtype,)
    if len(dtypes) == 0:
        raise ValueError("Expected `dtypes` to hold at least one dtype, but found none")
    for dtype in dtypes:
        if dtype not in _FLOAT_DTYPES:
            raise TypeError(
                f"Expected `dtypes` to hold floating dtypes {list(_FLOAT_DTYPES)}, "
                f"but found {dtype!r}"
            )
    if grad_output is not None and not isinstance(grad_output, Tensor):
        raise TypeError(
            f"Expected `grad_output` to be a tensor, but found {_describe(grad_output)}"
        )
    if grad_output is not None and grad_output.numel() > 0 and not bool(grad_output.any()):
        raise ValueError(
            "Expected `grad_output` to have a non-zero entry (with an all-zero upstream "
            "gradient every backward is zero and nothing is checked), but found all zeros"
        )

    for dtype in dtypes:
        x = default_inputs(dtype) if inputs is None else inputs.detach().to(dtype)
        if x.numel() == 0:
            raise AssertionError(
                f"{_name(op)}: `inputs` is empty, so nothing is checked (pass inputs that "
                f"hit the kinks and jumps of {_name(hard)}, or leave the default)"
            )
        _check_forward(op, hard, x, signed_zeros)
        _check_hard_departs(hard, surrogate, x)
        _check_backward(op, surrogate, x, grad_output, rtol, atol)


def _check_hard_departs(
    hard: Callable[[Tensor], Tensor], surrogate: Callable[[Tensor], Tensor] | Surrogate, x: Tensor
) -> None:
    """Fail when ``hard`` equals the surrogate's smooth function at every input: then the
    plain smooth function passes forward and backward alike, and nothing is checked."""
    soft = surrogate.function if isinstance(surrogate, Surrogate) else surrogate
    try:
        with torch.no_grad():
            expected, smooth = hard(x), soft(x)
        if not (isinstance(smooth, Tensor) and smooth.shape == expected.shape):
            return  # reported by the backward's check of the surrogate
        same = (expected == smooth) | (expected.isnan() & smooth.isnan())
        agree = bool(same.all())
    except Exception:  # a surrogate that cannot run in this dtype: nothing to compare
        return
    if agree:
        raise AssertionError(
            f"{_name(hard)} equals the surrogate {_name(soft)} at every input in {_dtype(x)}: "
            f"the inputs hit no kink or jump of {_name(hard)}, so the surrogate itself would "
            "pass as the op and nothing is checked (include inputs where they differ, such "
            "as round's half-integers or sign's zero, or leave the default inputs)"
        )


def _check_forward(
    op: Callable[[Tensor], Tensor], hard: Callable[[Tensor], Tensor], x: Tensor, signed: bool
) -> None:
    got = op(x)
    expected = hard(x)
    where = f"forward of {_name(op)} differs from {_name(hard)} in {_dtype(x)}"
    if not isinstance(got, Tensor):
        raise AssertionError(f"{where}: op returned {type(got).__name__}, not a tensor")
    for attribute in ("shape", "dtype", "device"):
        if getattr(got, attribute) != getattr(expected, attribute):
            raise AssertionError(
                f"{where}: {attribute} {getattr(got, attribute)} instead of "
                f"{getattr(expected, attribute)}"
            )
    same = (got == expected) | (got.isnan() & expected.isnan())
    if signed:
        same &= torch.signbit(got) == torch.signbit(expected)
    if not bool(same.all()):
        raise AssertionError(
            f"{where} at {int((~same).sum())} of {same.numel()} inputs "
            f"(the first: {_mismatches(x, got, expected, ~same)})"
        )


def _check_backward(
    op: Callable[[Tensor], Tensor],
    surrogate: Callable[[Tensor], Tensor] | Surrogate,
    x: Tensor,
    grad_output: Tensor | None,
    rtol: float | None,
    atol: float | None,
) -> None:
    where = f"backward of {_name(op)}"
    leaf = x.detach().clone().requires_grad_()
    y = op(leaf)
    if not y.requires_grad:
        raise AssertionError(
            f"{where}: the output does not require grad (the op cuts the graph in {_dtype(x)})"
        )
    if grad_output is None:
        seeded = torch.Generator().manual_seed(7)
        upstream = torch.randn(y.shape, generator=seeded, dtype=torch.float32)
        upstream = upstream.to(device=y.device, dtype=y.dtype)
    else:
        upstream = grad_output.detach().to(device=y.device, dtype=y.dtype).expand_as(y)
    (got,) = torch.autograd.grad(y, leaf, upstream, allow_unused=True)
    if got is None:
        raise AssertionError(f"{where}: the input gets no gradient in {_dtype(x)}")
    if got.shape != x.shape or got.dtype != x.dtype or got.device != x.device:
        raise AssertionError(
            f"{where}: gradient of shape {tuple(got.shape)}, {got.dtype}, {got.device} for an "
            f"input of shape {tuple(x.shape)}, {x.dtype}, {x.device}"
        )
    expected = _surrogate_vjp(surrogate, x, upstream)
    default_rtol, default_atol = _TOLERANCE[x.dtype]
    rtol = default_rtol if rtol is None else rtol
    scale = max(1.0, float(expected.abs().nan_to_num(posinf=0.0).max())) if x.numel() else 1.0
    atol = (default_atol if atol is None else atol) * scale
    got64 = got.to(torch.float64)
    close = torch.isclose(got64, expected, rtol=rtol, atol=atol, equal_nan=True)
    if not bool(close.all()):
        raise AssertionError(
            f"{where} is not the surrogate's gradient in {_dtype(x)} at {int((~close).sum())} "
            f"of {close.numel()} inputs (rtol={rtol:g}, atol={atol:g}; the first: "
            f"{_mismatches(x, got64, expected, ~close)})"
        )
    if not bool(got.any()):
        raise AssertionError(
            f"{where}: the gradient is zero at every input in {_dtype(x)} (no gradient at "
            "all), and the surrogate's is zero (or below the tolerance) there too, so "
            "nothing is checked: pick inputs where the surrogate's derivative is not zero"
        )


def _surrogate_vjp(
    surrogate: Callable[[Tensor], Tensor] | Surrogate, x: Tensor, upstream: Tensor
) -> Tensor:
    """``J_s(x)^T upstream`` in float64: autograd through ``s``, or ``upstream * s'(x)``."""
    x64 = x.detach().to(torch.float64)
    g64 = upstream.detach().to(torch.float64)
    if isinstance(surrogate, Surrogate):
        return g64 * surrogate.derivative(x64)
    with torch.enable_grad():
        leaf = x64.clone().requires_grad_()
        soft = surrogate(leaf)
        if not isinstance(soft, Tensor) or soft.shape != x.shape:
            raise AssertionError(
                f"surrogate {_name(surrogate)} must map the input to a tensor of the same "
                f"shape {tuple(x.shape)}, but returned {_describe(soft)}"
            )
        if not soft.requires_grad:  # a constant surrogate: zero gradient
            return torch.zeros_like(x64)
        (vjp,) = torch.autograd.grad(soft, leaf, g64, allow_unused=True)
    return torch.zeros_like(x64) if vjp is None else vjp


def _mismatches(x: Tensor, got: Tensor, expected: Tensor, bad: Tensor) -> str:
    index = bad.nonzero()[:_SHOWN]
    parts = []
    for i in index.tolist():
        at = tuple(i)
        parts.append(
            f"x[{', '.join(map(str, at))}]={_value(x[at])}: got {_value(got[at])}, "
            f"expected {_value(expected[at])}"
        )
    return "; ".join(parts)


def _value(t: Tensor) -> str:
    v = float(t)
    return "-0.0" if v == 0 and torch.signbit(t) else f"{v:.6g}"


def _name(fn: object) -> str:
    return str(getattr(fn, "__name__", None) or type(fn).__name__)


def _dtype(x: Tensor) -> str:
    return str(x.dtype).removeprefix("torch.")


def _describe(obj: object) -> str:
    if isinstance(obj, Tensor):
        return f"a {obj.dtype} tensor of shape {tuple(obj.shape)}"
    return type(obj).__name__
