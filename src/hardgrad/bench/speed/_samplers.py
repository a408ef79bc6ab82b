r"""The sampler part of the ``speed`` benchmark: hardgrad's samplers against torch's.

For every pathwise estimator ``E`` in :data:`hardgrad.estimators.ESTIMATORS` it times
forward plus backward of ``hg.categorical(logits, estimator=E, generator=gen)`` on float32
``(N, C)`` logits (the ``matrix`` setting), and of ``hg.bernoulli(logits, estimator=E,
generator=gen)`` on ``N * C`` log-odds, against the samplers people use instead:

* ``F.gumbel_softmax(logits, tau, hard=True)``: the same semantics as ``st_gumbel``
  (Gumbel-max sample forward, the relaxation's gradient backward);
* ``F.gumbel_softmax(logits, tau, hard=False)``: the same as ``gumbel_softmax``;
* ``torch.distributions.OneHotCategoricalStraightThrough(logits=logits).rsample()``: the
  same as ``st`` (sample forward, the softmax's Jacobian backward);
* for Bernoulli units, the hand-written straight-through ``p = sigmoid(l);
  torch.bernoulli(p) + (p - p.detach())``: the same as ``hg.bernoulli``'s ``st``;
  ``torch.distributions.RelaxedBernoulli(1.0, logits=l).rsample()``: the same as
  ``gumbel_softmax``; and that relaxed sample thresholded at 1/2 with the detach trick:
  the same as ``st_gumbel``.

An estimator with no counterpart in torch (``st_identity``, ``gumbel_rao``, ``reinmax``)
is compared with ``F.gumbel_softmax(hard=True)`` (the hand-written Bernoulli ST for
Bernoulli units) as a *common reference*, labelled as such: not the same computation, but
what people run otherwise. Each sampler draws fresh noise on every call, hardgrad's from a
``torch.Generator`` seeded once (torch's from the global RNG, which they take).

Before timing every candidate's forward is checked (an exact one-hot / {0, 1} sample for
hardgrad's discrete estimators, one-hot up to rounding for torch's detach tricks, a
probability vector for the relaxations; the column means of discrete samples against the
mean probabilities within 6 standard errors) and its gradient is checked to be finite;
where the matching alternative's gradient does not depend on the draw
(``OneHotCategoricalStraightThrough``, the hand-written Bernoulli ST), hardgrad's gradient
must equal it (``allclose``).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ... import estimators as _estimators
from ...stochastic import bernoulli as hg_bernoulli
from ...stochastic import categorical as hg_categorical
from .._task import BenchSettings, Progress
from .._timing import (
    call_counting_saved,
    compare_to_best,
    compile_warm,
    copy_floors,
    grad_step,
    median,
    ms,
    page_faults_per_call,
    time_interleaved,
)
from ._candidates import SpeedCheckError

#: The sampler families: ``hg.categorical`` on ``(N, C)`` logits, ``hg.bernoulli`` on ``N * C``.
KINDS = ("categorical", "bernoulli")

#: Alternatives with the same semantics as an estimator, per sampler family.
MATCHES: dict[str, dict[str, tuple[str, ...]]] = {
    "categorical": {
        "st_gumbel": ("gumbel_softmax_hard",),
        "gumbel_softmax": ("gumbel_softmax_soft",),
        "st": ("one_hot_st",),
    },
    "bernoulli": {
        "st": ("bernoulli_st",),
        "gumbel_softmax": ("relaxed_bernoulli",),
        "st_gumbel": ("relaxed_bernoulli_st",),
    },
}

#: What an estimator without a counterpart in torch is compared with, per family.
COMMON_REFERENCE = {"categorical": "gumbel_softmax_hard", "bernoulli": "bernoulli_st"}

SAME, COMMON = "same semantics", "common reference"


@dataclass(frozen=True)
class SamplerCandidate:
    """One sampler, as timed.

    Attributes:
        key: ``"hg.<estimator>"`` for hardgrad's, the alternative's key otherwise.
        label: short display name.
        code: what it computes, as code.
        fn: ``fn(logits) -> sample``, fresh noise on every call.
        discrete: its forward is a one-hot / {0, 1} sample (up to rounding).
        exact: that sample must be exactly one-hot / {0, 1} (hardgrad's are; torch's
            ``y_hard - y_soft.detach() + y_soft`` is off by rounding).
        noise_free_grad: its gradient does not depend on the draw.
    """

    key: str
    label: str
    code: str
    fn: Callable[[Tensor], Tensor]
    discrete: bool = True
    exact: bool = False
    noise_free_grad: bool = False

    @property
    def hardgrad(self) -> bool:
        return self.key.startswith("hg.")


# --------------------------------------------------------------------------- candidates


def pathwise_estimators() -> list[str]:
    """The registry's pathwise estimators, in registration order."""
    return [name for name, cls in _estimators.ESTIMATORS.items() if cls.pathwise]


def default_rows() -> tuple[str, ...]:
    """``categorical/<E>``, then ``bernoulli/<E>``, for every pathwise estimator."""
    return tuple(f"{kind}/{name}" for kind in KINDS for name in pathwise_estimators())


def resolve_rows(
    rows: tuple[str, ...] | None, compile_rows: tuple[str, ...] | None, compile: bool
) -> tuple[list[str], list[str]]:
    """The sampler rows to time eagerly and compiled; ``ValueError`` for unknown ones."""
    chosen = list(default_rows() if rows is None else rows)
    known = [f"{kind}/{name}" for kind in KINDS for name in pathwise_estimators()]

    def check(row: str, argument: str) -> None:
        if row not in known:
            raise ValueError(
                f"Unknown sampler {row!r} for `{argument}`; available: "
                + ", ".join(repr(k) for k in known)
            )

    for row in chosen:
        check(row, "samplers")
    if not compile:
        return chosen, []
    if compile_rows is None:
        return chosen, chosen
    for row in compile_rows:
        check(row, "compile_samplers")
    return chosen, [r for r in chosen if r in compile_rows]


def _tau(name: str) -> float:
    return float(getattr(_estimators.get(name), "tau", 1.0))


#: RelaxedBernoulli's temperature (the estimators' default tau), one tensor per device.
_ONE: dict[torch.device, Tensor] = {}


def _one(like: Tensor) -> Tensor:
    if like.device not in _ONE:
        _ONE[like.device] = torch.tensor(1.0, device=like.device)
    return _ONE[like.device]


def _one_hot_st(logits: Tensor) -> Tensor:
    return torch.distributions.OneHotCategoricalStraightThrough(logits=logits).rsample()


def _alternatives(kind: str, generator: torch.Generator | None) -> dict[str, SamplerCandidate]:
    if kind == "categorical":

        def hard(logits: Tensor) -> Tensor:
            return F.gumbel_softmax(logits, tau=1.0, hard=True)

        def soft(logits: Tensor) -> Tensor:
            return F.gumbel_softmax(logits, tau=1.0, hard=False)

        return {
            "gumbel_softmax_hard": SamplerCandidate(
                "gumbel_softmax_hard",
                "F.gumbel_softmax(hard=True)",
                "F.gumbel_softmax(l, tau=1, hard=True)",
                hard,
            ),
            "gumbel_softmax_soft": SamplerCandidate(
                "gumbel_softmax_soft",
                "F.gumbel_softmax(hard=False)",
                "F.gumbel_softmax(l, tau=1, hard=False)",
                soft,
                discrete=False,
            ),
            "one_hot_st": SamplerCandidate(
                "one_hot_st",
                "OneHotCategoricalStraightThrough",
                "torch.distributions.OneHotCategoricalStraightThrough(logits=l).rsample()",
                _one_hot_st,
                noise_free_grad=True,
            ),
        }

    def bernoulli_st(logits: Tensor) -> Tensor:
        p = torch.sigmoid(logits)
        return torch.bernoulli(p, generator=generator) + (p - p.detach())

    def relaxed(logits: Tensor) -> Tensor:
        return torch.distributions.RelaxedBernoulli(_one(logits), logits=logits).rsample()

    def relaxed_st(logits: Tensor) -> Tensor:
        soft = torch.distributions.RelaxedBernoulli(_one(logits), logits=logits).rsample()
        return (soft > 0.5).to(soft.dtype) - soft.detach() + soft

    gen = "" if generator is None else ", generator=gen"
    return {
        "relaxed_bernoulli": SamplerCandidate(
            "relaxed_bernoulli",
            "RelaxedBernoulli",
            "torch.distributions.RelaxedBernoulli(1.0, logits=l).rsample()",
            relaxed,
            discrete=False,
        ),
        "relaxed_bernoulli_st": SamplerCandidate(
            "relaxed_bernoulli_st",
            "RelaxedBernoulli + ST",
            "y = RelaxedBernoulli(1.0, logits=l).rsample(); (y > 0.5) - y.detach() + y",
            relaxed_st,
        ),
        "bernoulli_st": SamplerCandidate(
            "bernoulli_st",
            "hand-written Bernoulli ST",
            f"p = sigmoid(l); torch.bernoulli(p{gen}) + (p - p.detach())",
            bernoulli_st,
            exact=True,
            noise_free_grad=True,
        ),
    }


def _hardgrad(kind: str, name: str, generator: torch.Generator | None) -> SamplerCandidate:
    sampler = hg_categorical if kind == "categorical" else hg_bernoulli

    def fn(logits: Tensor) -> Tensor:
        return sampler(logits, estimator=name, generator=generator)

    gen = "" if generator is None else ", generator=gen"
    discrete = _estimators.ESTIMATORS.get(name).discrete
    return SamplerCandidate(
        f"hg.{name}",
        f"hg.{kind}({name})",
        f"hg.{kind}(l, estimator={name!r}{gen})",
        fn,
        discrete=discrete,
        exact=discrete,
    )


def compared_with(kind: str, name: str) -> tuple[str, tuple[str, ...]]:
    """How estimator ``name`` of ``kind`` is compared: (:data:`SAME` or :data:`COMMON`, keys)."""
    matches = MATCHES[kind].get(name)
    if matches is not None:
        if _tau(name) != 1.0:
            raise RuntimeError(
                f"The speed alternatives for {kind}/{name} assume tau=1, but the estimator's "
                f"default has tau={_tau(name)}"
            )
        return SAME, matches
    return COMMON, (COMMON_REFERENCE[kind],)


def candidates_for(
    kind: str, names: list[str], settings: BenchSettings, compiled: bool
) -> list[SamplerCandidate]:
    """hardgrad's samplers for ``names``, then the alternatives they are compared with.

    Eagerly, every sampler that takes a generator gets its own, seeded once; under
    ``torch.compile`` all draw from the global RNG (dynamo cannot trace an explicit
    ``torch.Generator`` argument).
    """

    def generator(offset: int) -> torch.Generator | None:
        if compiled:
            return None
        return torch.Generator(device=settings.device).manual_seed(settings.seed + 1000 + offset)

    hardgrad = [_hardgrad(kind, name, generator(i)) for i, name in enumerate(names)]
    needed = {key for name in names for key in compared_with(kind, name)[1]}
    alternatives = _alternatives(kind, generator(len(names)))
    return [*hardgrad, *(alt for key, alt in alternatives.items() if key in needed)]


# --------------------------------------------------------------------------- checks


def _nearest_sample(kind: str, y: Tensor) -> Tensor:
    if kind == "categorical":
        return torch.zeros_like(y).scatter_(-1, y.argmax(-1, keepdim=True), 1.0)
    return (y > 0.5).to(y.dtype)


def _check_forward(
    cand: SamplerCandidate, kind: str, y: Tensor, logits: Tensor, cols: int, where: str
) -> tuple[int, float]:
    """Raise unless ``y`` is a valid sample; (elements off the exact sample, max |diff|)."""
    if y.shape != logits.shape or y.dtype != logits.dtype:
        raise SpeedCheckError(
            f"{where}: {cand.label} returns shape {tuple(y.shape)} {y.dtype}, "
            f"expected {tuple(logits.shape)} {logits.dtype}"
        )
    y = y.detach()
    if not bool(torch.isfinite(y).all()):
        raise SpeedCheckError(f"{where}: {cand.label} returned non-finite values")
    eps = torch.finfo(y.dtype).eps
    if not cand.discrete:
        if float(y.min()) < -eps or float(y.max()) > 1 + eps:
            raise SpeedCheckError(f"{where}: {cand.label} returned values outside [0, 1]")
        if kind == "categorical":
            error = float((y.sum(-1) - 1).abs().max())
            if error > 1e-5 * y.shape[-1]:
                raise SpeedCheckError(f"{where}: {cand.label}'s rows sum to 1 ± {error:.3g}")
        return 0, 0.0
    sample = _nearest_sample(kind, y)
    mismatches = int((y != sample).sum())
    max_error = float((y - sample).abs().max()) if mismatches else 0.0
    if (cand.exact and mismatches) or max_error > 16 * eps:
        raise SpeedCheckError(
            f"{where}: {cand.label} is not a one-hot / {{0, 1}} sample: {mismatches} of "
            f"{y.numel()} elements differ (max |diff| {max_error:.3g})"
        )
    # Column means of the samples against the mean probabilities, within 6 standard errors.
    if kind == "categorical":
        probs = torch.softmax(logits.detach().double(), -1)
    else:
        probs = torch.sigmoid(logits.detach().double())
    probs, sample = probs.reshape(-1, cols), sample.double().reshape(-1, cols)
    rows = probs.shape[0]
    bound = 6 * (probs * (1 - probs)).mean(0).div(rows).sqrt() + 1e-6
    off = (sample.mean(0) - probs.mean(0)).abs()
    if bool((off > bound).any()):
        worst = int((off / bound).argmax())
        raise SpeedCheckError(
            f"{where}: {cand.label} does not sample the softmax/sigmoid of the logits: column "
            f"{worst} has mean {float(sample.mean(0)[worst]):.4f}, expected "
            f"{float(probs.mean(0)[worst]):.4f} ± {float(bound[worst]):.2g}"
        )
    return mismatches, max_error


# --------------------------------------------------------------------------- running


def _inputs(
    kind: str, config_matrix: tuple[int, int], settings: BenchSettings
) -> tuple[Tensor, Tensor]:
    generator = torch.Generator().manual_seed(settings.seed + sum(map(ord, kind)))
    rows, cols = config_matrix
    shape = (rows, cols) if kind == "categorical" else (rows * cols,)
    x = torch.randn(shape, generator=generator).to(settings.device)
    g = torch.randn(shape, generator=generator).to(settings.device)
    return x.requires_grad_(), g


def _run_group(
    kind: str,
    names: list[str],
    mode: str,
    matrix: tuple[int, int],
    rounds: int,
    min_run_time: float,
    settings: BenchSettings,
    rng: random.Random,
    progress: Progress,
    record: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    """Check, measure bytes and time one family's samplers in one mode (eager/compiled)."""
    where = f"speed/samplers/{kind}/{mode}"
    compiled = mode == "compiled"
    suffix = {"eager": "", "compiled": "_compiled", "small": "_small"}[mode]
    candidates = candidates_for(kind, names, settings, compiled)
    x, g = _inputs(kind, matrix, settings)
    steps: dict[str, Callable[[], None]] = {}
    grads: dict[str, Tensor] = {}
    if compiled:
        torch._dynamo.reset()
    for cand in candidates:
        entry = record.setdefault(
            cand.key, {"label": cand.label, "code": cand.code, "hardgrad": cand.hardgrad}
        )
        entry[f"code{suffix}"] = cand.code
        fn = cand.fn
        if compiled:
            t0 = time.perf_counter()
            try:
                fn, fullgraph = compile_warm(cand.fn, x, g)
            except Exception as error:  # a candidate that does not compile is reported
                entry["compile_error"] = f"{type(error).__name__}: {str(error).splitlines()[0]}"
                progress.log(f"{kind}: {cand.label} failed to compile: {entry['compile_error']}")
                continue
            entry["compile_s"] = time.perf_counter() - t0
            entry["fullgraph"] = fullgraph
        # One call checks the sample and counts the bytes saved for backward (the samplers
        # are slow enough that every extra call shows in the --quick budget).
        y, saved = call_counting_saved(fn, x)
        mismatches, max_error = _check_forward(cand, kind, y, x, matrix[1], where)
        (grad,) = torch.autograd.grad(y, x, g)
        del y
        if grad.shape != x.shape or not bool(torch.isfinite(grad).all()):
            raise SpeedCheckError(f"{where}: the gradient of {cand.label} is not finite")
        if cand.noise_free_grad or cand.hardgrad:
            grads[cand.key] = grad
        del grad
        entry[f"forward_mismatches{suffix}"] = mismatches
        entry[f"max_forward_error{suffix}"] = max_error
        entry[f"bytes_per_element{suffix}"] = saved
        steps[cand.key] = grad_step(fn, x, g)
    by_key = {c.key: c for c in candidates}
    for name in names:  # gradients that do not depend on the draw must agree
        how, keys = compared_with(kind, name)
        for key in keys:
            if how == SAME and by_key[key].noise_free_grad and key in grads:
                hg_grad = grads.get(f"hg.{name}")
                if hg_grad is None:
                    continue
                try:
                    torch.testing.assert_close(hg_grad, grads[key], rtol=1e-5, atol=1e-6)
                except AssertionError as error:
                    raise SpeedCheckError(
                        f"{where}: the gradient of hg.{kind}({name}) differs from "
                        f"{by_key[key].label}'s: {error}"
                    ) from None
    del grads
    steps.update(copy_floors(x))
    for step in steps.values():  # warm-up: allocator, caches (the check was the first call)
        step()
    faults = (
        {k: page_faults_per_call(step, calls=1) for k, step in steps.items()}
        if mode != "small"
        else {}
    )
    times = time_interleaved(
        steps, rounds=rounds, min_run_time=min_run_time, threads=settings.threads, rng=rng
    )
    medians = {key: ms(median(ts)) for key, ts in times.items()}
    for cand in candidates:
        if cand.key in times:
            record[cand.key][f"{mode}_ms"] = medians[cand.key]
            record[cand.key][f"{mode}_rounds_ms"] = [ms(t) for t in times[cand.key]]
            if cand.key in faults:
                record[cand.key][f"page_faults{suffix}"] = faults[cand.key]
    result: dict[str, Any] = {
        "floor_ms": medians["floor"],
        "floor_alloc_ms": medians["floor_alloc"],
        "floor_rounds_ms": [ms(t) for t in times["floor"]],
        "floor_page_faults": faults.get("floor"),
        "rows": {},
    }
    for name in names:
        how, keys = compared_with(kind, name)
        summary = compare_to_best(f"hg.{name}", [by_key[k] for k in keys], medians, times)
        summary["compared_with"] = how
        result["rows"][name] = summary
    return result


def run_samplers(
    rows: list[str],
    compiled_rows: list[str],
    matrix: tuple[int, int],
    rounds: int,
    min_run_time: float,
    settings: BenchSettings,
    rng: random.Random,
    progress: Progress,
    small_matrix: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """Every sampler family in ``rows``, eagerly and compiled, and eagerly on the small
    ``small_matrix`` (categorical logits of that shape, as many Bernoulli log-odds as it has
    elements; ``None``: not timed), where the fixed per-call cost shows; ``results.json``'s
    ``samplers``."""
    out: dict[str, Any] = {}
    for kind in KINDS:
        names = [r.split("/", 1)[1] for r in rows if r.split("/", 1)[0] == kind]
        if not names:
            continue
        compiled_names = [n for n in names if f"{kind}/{n}" in compiled_rows]
        rows_, cols = matrix
        record: dict[str, dict[str, Any]] = {}
        entry: dict[str, Any] = {
            "shape": [rows_, cols] if kind == "categorical" else [rows_ * cols],
            "dtype": "float32",
            "estimators": names,
            "compiled_estimators": compiled_names,
            "candidates": record,
            "compiled": None,
            "small": None,
        }
        common = (matrix, rounds, min_run_time, settings, rng, progress, record)
        entry["eager"] = _run_group(kind, names, "eager", *common)
        progress.advance(f"samplers/{kind}: eager done")
        if small_matrix is not None:
            small = (small_matrix, *common[1:])
            entry["small_shape"] = (
                list(small_matrix) if kind == "categorical" else [small_matrix[0] * small_matrix[1]]
            )
            entry["small"] = _run_group(kind, names, "small", *small)
            progress.advance(f"samplers/{kind}: small done")
        if compiled_names:
            entry["compiled"] = _run_group(kind, compiled_names, "compiled", *common)
            torch._dynamo.reset()
            progress.advance(f"samplers/{kind}: compiled done")
        out[kind] = entry
    return out


def progress_steps(rows: list[str], compiled_rows: list[str], small: bool = False) -> int:
    """How many progress steps :func:`run_samplers` reports."""
    kinds = {r.split("/", 1)[0] for r in rows}
    compiled = {r.split("/", 1)[0] for r in compiled_rows}
    return len(kinds) * (2 if small else 1) + len(compiled)
