r""":func:`assert_compiles`: one graph under ``torch.compile``, eager's values and gradients."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch import Tensor

__all__ = ["assert_compiles"]


def assert_compiles(
    fn: Callable[..., Any],
    *args: Any,
    kwargs: Mapping[str, Any] | None = None,
    fullgraph: bool = True,
    backend: str = "inductor",
    dynamic: bool | None = None,
    check_grad: bool = True,
    seed: int | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    reset: bool = True,
) -> None:
    r"""Assert that ``fn(*args, **kwargs)`` compiles and computes what it computes eagerly.

    ``fn`` is run eagerly and through ``torch.compile(fn, fullgraph=fullgraph,
    backend=backend, dynamic=dynamic)`` on separate copies of the arguments. Then:

    * compiling must succeed: with ``fullgraph=True`` a graph break (an op or Python
      construct dynamo cannot trace) fails the assertion with dynamo's reason;
    * every tensor in the outputs (nested tuples, lists and dicts are walked) must have
      eager's shape, dtype and device, and equal values within ``rtol``/``atol``
      (:func:`torch.testing.assert_close`'s defaults per dtype; NaN equals NaN);
    * with ``check_grad``, the gradients of :math:`\sum_k \langle w_k, y_k\rangle` (seeded
      random weights :math:`w_k` on the floating outputs :math:`y_k`, zero where
      :math:`y_k` is not finite) with respect to every tensor argument that requires grad
      must match too.

    Random functions: a ``torch.Generator`` cannot be passed through a ``fullgraph``
    compile (torch 2.13), so ``fn`` must draw from the global RNG or take its noise as an
    argument. With ``seed``, the global RNG is seeded with it before each run and
    inductor is told to draw eager's random numbers (``fallback_random``), so that random
    ``fn`` can be compared value for value.

    Args:
        fn: the function to compile.
        *args: its positional arguments (tensors are copied for each run, keeping
            ``requires_grad``).
        kwargs: its keyword arguments.
        fullgraph: require one graph, no breaks (the default).
        backend: the ``torch.compile`` backend (``"inductor"``, ``"aot_eager"``,
            ``"eager"``...).
        dynamic: passed to ``torch.compile``.
        check_grad: compare the gradients of the tensor arguments that require grad.
        seed: seed the global RNG before each run (for random ``fn``).
        rtol: relative tolerance (give both or neither; default: by dtype).
        atol: absolute tolerance (give both or neither; default: by dtype).
        reset: clear dynamo's caches (``torch.compiler.reset()``) before compiling, so
            that an earlier compile of the same code cannot hide a failure, and after, so
            that nothing compiled outlives the check.

    Raises:
        AssertionError: compiling fails, or the outputs or gradients differ.
        TypeError: ``fn`` is not callable.
        ValueError: only one of ``rtol`` and ``atol`` is given.

    Example:
        >>> import torch, hardgrad as hg
        >>> from hardgrad.testing import assert_compiles
        >>> x = torch.randn(16, requires_grad=True)
        >>> assert_compiles(lambda t: hg.sign(t) * hg.round(3 * t), x, backend="aot_eager")
        >>> def breaks(t):
        ...     if t.sum() > 0:  # Python control flow on a tensor's value: a graph break
        ...         return t
        ...     return -t
        >>> assert_compiles(breaks, x, backend="aot_eager")
        Traceback (most recent call last):
        ...
        AssertionError: breaks does not compile with fullgraph=True (backend 'aot_eager'): ...
    """
    if not callable(fn):
        raise TypeError(f"Expected `fn` to be callable, but found {type(fn).__name__}")
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise TypeError(f"Expected `kwargs` to be a mapping, but found {type(kwargs).__name__}")
    if (rtol is None) != (atol is None):
        raise ValueError(
            f"Expected both `rtol` and `atol`, or neither, but found rtol={rtol}, atol={atol}"
        )
    keywords = dict(kwargs or {})
    name = getattr(fn, "__name__", type(fn).__name__)
    eager_args, eager_keywords = _copy(args), _copy(keywords)
    compiled_args, compiled_keywords = _copy(args), _copy(keywords)

    with _seeded(seed):
        eager = fn(*eager_args, **eager_keywords)
    if reset:
        torch.compiler.reset()
    try:
        _compare(
            fn,
            name,
            eager,
            eager_args,
            eager_keywords,
            compiled_args,
            compiled_keywords,
            fullgraph=fullgraph,
            backend=backend,
            dynamic=dynamic,
            check_grad=check_grad,
            seed=seed,
            rtol=rtol,
            atol=atol,
        )
    finally:
        if reset:  # drop what dynamo installed in fn's globals while they still exist
            torch.compiler.reset()


def _compare(
    fn: Callable[..., Any],
    name: str,
    eager: Any,
    eager_args: Any,
    eager_keywords: Any,
    compiled_args: Any,
    compiled_keywords: Any,
    *,
    fullgraph: bool,
    backend: str,
    dynamic: bool | None,
    check_grad: bool,
    seed: int | None,
    rtol: float | None,
    atol: float | None,
) -> None:
    compiled_fn = torch.compile(fn, fullgraph=fullgraph, backend=backend, dynamic=dynamic)
    try:
        with _seeded(seed), _eager_random(seed is not None and backend == "inductor"):
            compiled = compiled_fn(*compiled_args, **compiled_keywords)
    except Exception as error:  # dynamo and inductor raise many types; report them all
        reason = str(error).strip().splitlines()
        first = reason[0] if reason else ""
        raise AssertionError(
            f"{name} does not compile with fullgraph={fullgraph} (backend {backend!r}): "
            f"{type(error).__name__}: {first}"
        ) from error

    eager_out, compiled_out = list(_tensors(eager)), list(_tensors(compiled))
    if len(eager_out) != len(compiled_out):
        raise AssertionError(
            f"{name}: the compiled function returned {len(compiled_out)} tensors, eager "
            f"{len(eager_out)}"
        )
    for k, (e, c) in enumerate(zip(eager_out, compiled_out, strict=True)):
        _assert_close(c.detach(), e.detach(), rtol, atol, f"{name}: output {k}")

    if not check_grad:
        return
    eager_inputs = [t for t in _tensors((eager_args, eager_keywords)) if t.requires_grad]
    compiled_inputs = [t for t in _tensors((compiled_args, compiled_keywords)) if t.requires_grad]
    if not eager_inputs:
        return
    eager_grads = _gradients(eager_out, eager_inputs)
    compiled_grads = _gradients(compiled_out, compiled_inputs)
    for k, (e, c) in enumerate(zip(eager_grads, compiled_grads, strict=True)):
        _assert_close(c, e, rtol, atol, f"{name}: gradient of tensor argument {k}")


def _copy(obj: Any) -> Any:
    """A copy of every tensor in ``obj`` (leaves keep ``requires_grad``)."""
    if isinstance(obj, Tensor):
        copy = obj.detach().clone()
        return copy.requires_grad_() if obj.requires_grad else copy
    if isinstance(obj, tuple):
        return tuple(_copy(o) for o in obj)
    if isinstance(obj, list):
        return [_copy(o) for o in obj]
    if isinstance(obj, dict):
        return {k: _copy(v) for k, v in obj.items()}
    return obj


def _tensors(obj: Any) -> Iterator[Tensor]:
    """The tensors in ``obj``, depth first, in a fixed order."""
    if isinstance(obj, Tensor):
        yield obj
    elif isinstance(obj, (tuple, list)):
        for o in obj:
            yield from _tensors(o)
    elif isinstance(obj, dict):
        for key in obj:
            yield from _tensors(obj[key])


def _gradients(outputs: list[Tensor], inputs: list[Tensor]) -> list[Tensor]:
    generator = torch.Generator().manual_seed(0)
    total: Tensor | None = None
    for y in outputs:
        if not (y.requires_grad and y.is_floating_point()):
            continue
        w = torch.randn(y.shape, generator=generator).to(device=y.device, dtype=y.dtype)
        term = (y.where(y.isfinite(), 0) * w).sum()
        total = term if total is None else total + term
    if total is None:
        return [torch.zeros_like(t) for t in inputs]
    grads = torch.autograd.grad(total, inputs, allow_unused=True)
    return [torch.zeros_like(t) if g is None else g for g, t in zip(grads, inputs, strict=True)]


def _assert_close(
    actual: Tensor, expected: Tensor, rtol: float | None, atol: float | None, what: str
) -> None:
    for attribute in ("shape", "dtype", "device"):
        if getattr(actual, attribute) != getattr(expected, attribute):
            raise AssertionError(
                f"{what}: {attribute} {getattr(actual, attribute)} compiled, "
                f"{getattr(expected, attribute)} eager"
            )
    torch.testing.assert_close(
        actual,
        expected,
        rtol=rtol,
        atol=atol,
        equal_nan=True,
        msg=lambda message: f"{what} differs between compiled and eager: {message}",
    )


@contextlib.contextmanager
def _seeded(seed: int | None) -> Iterator[None]:
    if seed is not None:
        torch.manual_seed(seed)
    yield


@contextlib.contextmanager
def _eager_random(enabled: bool) -> Iterator[None]:
    """Make inductor's random ops call eager's (so that seeded runs draw the same numbers)."""
    if not enabled:
        yield
        return
    from torch._inductor import config  # only when inductor's random numbers matter

    with config.patch(fallback_random=True):
        yield
