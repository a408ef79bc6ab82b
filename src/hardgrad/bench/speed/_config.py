"""The ``speed`` benchmark's settings (:class:`SpeedConfig`, the ``--quick`` subset): what
its runner and its report both read."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SpeedConfig:
    """Sizes and repeats of the speed benchmark.

    Attributes:
        numel: elements of the 1-D float32 input of the elementwise ops.
        matrix: ``(N, C)`` shape of the logits of the selection ops (``one_hot_argmax``,
            ``topk_mask``), which select along the last dimension.
        ops: op names to run (``None``: every op in ``OPS``).
        rounds: interleaved timing rounds; the median over rounds is reported.
        min_run_time: seconds of ``blocked_autorange`` per candidate per round.
        compile: also time every candidate under ``torch.compile``.
        compile_ops: the ops timed under compile (``None``: all of ``ops``).
        candidates: the alternatives to time, by key (``"detach"``, ``"function"``,
            ``"torch"``); ``None``: all. hardgrad itself is always timed.
        small_numel: also time every candidate eagerly on this many elements (selection
            ops: ``(small_numel // C, C)``), where the fixed per-call cost (Python,
            autograd bookkeeping) dominates; ``None`` skips it.
        plot: write ``speed_ratio.png`` next to the report (needs matplotlib).
        samplers: sampler rows, ``"categorical/<estimator>"`` (``hg.categorical`` on
            ``matrix`` logits) or ``"bernoulli/<estimator>"`` (``hg.bernoulli`` on
            ``N * C`` log-odds) for pathwise estimators; ``None``: both kinds with every
            pathwise estimator of ``ESTIMATORS``; ``()``: no samplers.
        compile_samplers: the sampler rows timed under compile (``None``: all of
            ``samplers``), with the alternatives they are compared with.
        audit: time a training step with and without :func:`hardgrad.diagnostics.audit`.
        rao_ks: Gumbel-Rao's numbers of draws to sweep (both unit kinds, ``matrix``
            logits, next to ST-Gumbel; see :mod:`hardgrad.bench.speed._rao`); ``()``
            skips the sweep.
        lsq: time LSQ against torch's fused learnable fake-quantize kernels at
            ``small_numel`` and ``numel`` elements (:mod:`hardgrad.bench.speed._lsq`).
        sorting: ``(N, n)`` shapes at which ``hg.soft_sort``/``hg.soft_rank`` (l2, kl) are
            timed against torchsort when it is installed
            (:mod:`hardgrad.bench.speed._sorting`); ``()`` skips them.
        sorting_budget_s: wall seconds of timing rounds per soft sort/rank row (``None``:
            ``budget_s``).
        budget_s: wall seconds each comparison's timing rounds may take (one op in one
            mode, one sampler row, ...): on a loaded machine fewer than ``rounds`` are
            run, at least :data:`~hardgrad.bench._timing.MIN_ROUNDS` (``None``: always
            ``rounds``). A ratio whose confidence interval over the rounds straddles 1 is
            reported as "unresolved (noise)".
    """

    numel: int = 2**22
    matrix: tuple[int, int] = (2**16, 64)
    ops: tuple[str, ...] | None = None
    rounds: int = 15
    min_run_time: float = 0.05
    compile: bool = True
    compile_ops: tuple[str, ...] | None = None
    candidates: tuple[str, ...] | None = None
    small_numel: int | None = 4096
    plot: bool = True
    samplers: tuple[str, ...] | None = None
    compile_samplers: tuple[str, ...] | None = None
    audit: bool = True
    rao_ks: tuple[int, ...] = (1, 2, 5, 10, 20)
    lsq: bool = True
    sorting: tuple[tuple[int, int], ...] = ((256, 100), (32, 1000))
    sorting_budget_s: float | None = None
    budget_s: float | None = None


#: Ops compiled in the ``--quick`` setting (compiling all of them takes minutes on 2 cores).
QUICK_COMPILE_OPS = ("round", "sign", "clamp", "quantize")
#: Sampler rows compiled in the ``--quick`` setting.
QUICK_COMPILE_SAMPLERS = ("categorical/st_gumbel",)


#: Seconds of timing rounds per comparison in the ``--quick`` setting (7 rounds of 6
#: candidates at 0.02 s take about 1.5 s on an idle machine).
QUICK_BUDGET_S = 3.0


def default_config(quick: bool) -> SpeedConfig:
    """The full setting, or the ``--quick`` one: fewer rounds, a compiled subset."""
    if quick:
        return SpeedConfig(
            numel=2**22,
            matrix=(2**14, 64),
            rounds=7,
            min_run_time=0.02,
            compile_ops=QUICK_COMPILE_OPS,
            compile_samplers=QUICK_COMPILE_SAMPLERS,
            rao_ks=(1, 5, 10),
            budget_s=QUICK_BUDGET_S,
            sorting=((256, 100),),
            sorting_budget_s=1.0,
        )
    return SpeedConfig()
