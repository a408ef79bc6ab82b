r"""The ``qat`` benchmark: quantization-aware training of an MLP classifier on the digits.

One multilayer perceptron (64-256-256-10 on scikit-learn's 8x8 digits, or the images of
``--data``) is trained in several forms and its test accuracy compared:

* ``float``: the full-precision baseline (``Linear -> ReLU`` twice, then ``Linear``).
* ``STE b-bit`` for b in {8, 4, 2}: the same network built from
  :class:`hardgrad.nn.QuantLinear` layers, with fake-quantized weights and
  activations. Every weight matrix (all three layers) is quantized to ``b``-bit signed
  integers with one scale per output channel; the inputs of the second and third layer
  (the hidden activations, after ReLU) to ``b``-bit unsigned integers with one scale per
  tensor; biases and the input pixels stay in floating point. Forward:
  :func:`hardgrad.quantize` through the layers' :class:`hardgrad.nn.Quantize` quantizers;
  backward: the masked straight-through estimator (the gradient passes where the value is
  inside the integer range, Jacob et al. 2018). The scale is *fixed*
  (``learn_scale=False``): set once from the initial weights and the first batch with LSQ's
  rule :math:`s = 2\,\overline{|x|}/\sqrt{q_+}` and never trained.
* ``LSQ b-bit``: the same quantizers with the scale learned by gradient descent with the
  LSQ gradient and its :math:`1/\sqrt{N q_+}` scaling (Esser et al. 2020,
  https://arxiv.org/abs/1902.08153). STE and LSQ start from the same scales, so the
  difference between the two rows is only whether the scale is trained. Adam normalises
  away LSQ's gradient scaling, so the scales get their own, smaller learning rate
  (``scale_lr``) and are kept above 1e-6 after every step.
* ``binary``: sign weights and sign activations (:func:`hardgrad.binarize`, :math:`\pm 1`)
  with the clipped straight-through estimator (Hubara et al. 2016,
  https://arxiv.org/abs/1602.02830): ``Linear(float) -> BatchNorm -> binarize ->
  BinaryLinear -> BatchNorm -> binarize -> Linear(float)`` with
  :class:`hardgrad.nn.BinaryLinear`. As is customary, the first and last layers keep
  floating-point weights (the middle 256x256 matrix, 80 % of the weights, is binary) and
  BatchNorm precedes each sign; the latent float weights of the binary layer are clipped to
  [-1, 1] after every step (:func:`hardgrad.nn.clip_latent_weights_`), as Hubara et al. do.
* ``ternary``: ternary weights of TWN (Li, Zhang & Liu 2016,
  https://arxiv.org/abs/1605.04711; :math:`\{-\alpha, 0, \alpha\}` per output channel,
  threshold :math:`0.7\,\overline{|W|}`, straight-through backward) in the middle layer,
  ``hg.nn.BinaryLinear(weights="ternary")``, with float ReLU activations: ``Linear(float) ->
  BatchNorm -> ReLU -> ternary Linear -> BatchNorm -> ReLU -> Linear(float)``.

Every configuration is trained with Adam (batch 64) from ``seeds`` seeds; the table gives
the test accuracy at the end of training, mean ± sample standard deviation over seeds and
the range, with the training accuracy and the mean cross-entropy of the last epoch (at
low bit widths the loss separates the quantizers more clearly than the accuracy on this
easy data set). Under ``torchrun`` the model is wrapped in DistributedDataParallel, each rank
trains on its shard of the training set with its own shuffling seed, and the quantizers'
scales are set (and averaged across ranks) on a calibration batch before wrapping.

Wall time on two shared cores: 49 s for the full run (3 seeds, 30 epochs, ternary row
included; ``docs/results/full/`` holds an earlier run without it), 7 s with ``--quick``.
"""

from __future__ import annotations

import dataclasses
import itertools
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .. import nn as hgnn
from . import _distributed
from ._pyplot import pyplot
from ._task import BenchSettings, Progress, Table, TaskResult, task
from .data import Dataset, load_dataset

__all__ = [
    "BinaryLinear",
    "QatConfig",
    "QuantLinear",
    "Variant",
    "build_model",
    "default_config",
    "run",
    "train_and_evaluate",
    "variants",
]


@dataclass(frozen=True)
class QatConfig:
    """Settings of the ``qat`` benchmark.

    Attributes:
        hidden: widths of the hidden layers (two or more for the binary network).
        bits: bit widths of the fake-quantized networks.
        methods: quantizer gradients to compare, ``"ste"`` (fixed scale) and ``"lsq"``.
        binary: also train the binary network.
        ternary: also train the ternary-weight network.
        epochs: passes over the training set.
        batch_size: examples per step (split across ranks under ``torchrun``).
        lr: Adam's learning rate for the float and quantized networks.
        scale_lr: Adam's learning rate for LSQ's scales (Adam ignores LSQ's gradient
            scaling, and the weights' rate would move a scale of ~0.02 by 5 % a step).
        binary_lr: Adam's learning rate for the binary network.
        seeds: independent runs per configuration.
        plot: write ``qat_accuracy.png`` (needs matplotlib).
        threads: intra-op threads while training (``None``: ``settings.threads``). 1 by
            default: the matrices are too small to share between cores, and on a busy
            machine two threads ran a quick run about ten times slower than one.
    """

    hidden: tuple[int, ...] = (256, 256)
    bits: tuple[int, ...] = (8, 4, 2)
    methods: tuple[str, ...] = ("ste", "lsq")
    binary: bool = True
    ternary: bool = True
    epochs: int = 30
    batch_size: int = 64
    lr: float = 1e-3
    scale_lr: float = 1e-4
    binary_lr: float = 1e-3
    seeds: int = 3
    plot: bool = True
    threads: int | None = 1


def default_config(quick: bool) -> QatConfig:
    """The full setting (3 seeds, 30 epochs) or the ``--quick`` one (1 seed, fewer epochs)."""
    if quick:
        return QatConfig(epochs=12, seeds=1)
    return QatConfig()


_METHODS = ("ste", "lsq")
#: The smallest learned scale (Adam could step a scale below 0).
_MIN_SCALE = 1e-6


# --------------------------------------------------------------------------- models

#: The layers the networks are built from (:mod:`hardgrad.nn`), under their old names here.
QuantLinear = hgnn.QuantLinear
BinaryLinear = hgnn.BinaryLinear


@dataclass(frozen=True)
class Variant:
    """One trained configuration: ``kind`` is ``"float"``, ``"ste"``, ``"lsq"``,
    ``"binary"`` or ``"ternary"``; ``bits`` is set for ``"ste"`` and ``"lsq"``."""

    kind: str
    bits: int | None = None

    @property
    def label(self) -> str:
        if self.kind in _METHODS:
            return f"{self.kind.upper()} {self.bits}-bit"
        return self.kind

    @property
    def precision(self) -> str:
        """What is quantized, for the table."""
        if self.kind == "float":
            return "float32 weights and activations"
        if self.kind == "binary":
            return "±1 weights and activations (float first and last layer)"
        if self.kind == "ternary":
            return "ternary weights, float activations (float first and last layer)"
        return f"{self.bits}-bit weights (per channel) and activations"

    @property
    def gradient(self) -> str:
        return {
            "float": "exact",
            "ste": "masked STE, fixed scale",
            "lsq": "masked STE, learned scale (LSQ)",
            "binary": "clipped STE",
            "ternary": "STE (TWN)",
        }[self.kind]


def variants(config: QatConfig) -> list[Variant]:
    """The configurations of one run, in table order."""
    for method in config.methods:
        if method not in _METHODS:
            raise ValueError(f"Unknown method {method!r} in `methods`; available: 'ste', 'lsq'")
    out = [Variant("float")]
    out += [Variant(m, b) for b in config.bits for m in config.methods]
    if config.binary:
        out.append(Variant("binary"))
    if config.ternary:
        out.append(Variant("ternary"))
    return out


def build_model(
    variant: Variant, features: int, hidden: tuple[int, ...], classes: int
) -> nn.Sequential:
    """The MLP of ``variant`` (see the module docstring)."""
    widths = [features, *hidden]
    layers: list[nn.Module] = []
    if variant.kind in ("binary", "ternary"):
        if len(hidden) < 2:
            raise ValueError(
                f"Expected at least two hidden layers for the {variant.kind} network, but found "
                f"{hidden}"
            )
        binary = variant.kind == "binary"
        for i, (n_in, n_out) in enumerate(itertools.pairwise(widths)):
            if i == 0:
                layers.append(nn.Linear(n_in, n_out))
            else:
                layers.append(hgnn.BinaryLinear(n_in, n_out, bias=False, weights=variant.kind))
            layers += [nn.BatchNorm1d(n_out), hgnn.Binarize() if binary else nn.ReLU()]
        layers.append(nn.Linear(widths[-1], classes))
        return nn.Sequential(*layers)
    if variant.kind == "float":
        for n_in, n_out in itertools.pairwise(widths):
            layers += [nn.Linear(n_in, n_out), nn.ReLU()]
        layers.append(nn.Linear(widths[-1], classes))
        return nn.Sequential(*layers)
    assert variant.bits is not None
    learn = variant.kind == "lsq"
    for i, (n_in, n_out) in enumerate(itertools.pairwise([*widths, classes])):
        layers.append(
            hgnn.QuantLinear(
                n_in,
                n_out,
                weight_bits=variant.bits,
                act_bits=None if i == 0 else variant.bits,  # the pixels stay float
                act_signed=False,  # hidden activations come from a ReLU
                learn_scale=learn,
            )
        )
        if i < len(widths) - 1:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


# --------------------------------------------------------------------------- training


def _accuracy(model: nn.Module, x: Tensor, y: Tensor) -> float:
    was_training = model.training
    model.eval()
    with torch.no_grad():
        correct = int((model(x).argmax(-1) == y).sum())
    model.train(was_training)
    return correct / max(len(y), 1)


def train_and_evaluate(
    variant: Variant, data: Dataset, config: QatConfig, seed: int, device: str
) -> dict[str, float]:
    """Train one configuration from ``seed``; its final test and train accuracy, the last
    epoch's mean training loss and the seconds it took."""
    t0 = time.perf_counter()
    classes = int(max(int(data.y_train.max()), int(data.y_test.max()))) + 1
    torch.manual_seed(seed)  # the same initial weights on every rank
    model = build_model(variant, data.features, config.hidden, classes).to(device)
    x_train, y_train = _distributed.shard(data.x_train), _distributed.shard(data.y_train)
    if len(x_train) == 0:
        raise ValueError("Expected at least one training example per rank, but found none")
    batch = max(1, config.batch_size // _distributed.world_size())
    generator = torch.Generator().manual_seed(_distributed.rank_seed(seed))
    order = torch.randperm(len(x_train), generator=generator).to(x_train.device)
    # Calibration: the quantizers set their scales on the first batch (averaged across
    # ranks), before DDP sees the parameters, whose shapes this fixes.
    # Eval mode, so that BatchNorm's running statistics do not count this batch.
    model.eval()
    with torch.no_grad():
        model(x_train[order[:batch]])
    model.train()
    wrapped = _distributed.wrap(model)
    lr = config.binary_lr if variant.kind in ("binary", "ternary") else config.lr
    scales = [m.scale for m in model.modules() if isinstance(m, hgnn.Quantize) and m.learn_scale]
    others = [p for p in wrapped.parameters() if all(p is not s for s in scales)]
    groups: list[dict[str, Any]] = [{"params": others}]
    if scales:
        groups.append({"params": scales, "lr": config.scale_lr})
    optimizer = torch.optim.Adam(groups, lr=lr)
    loss_sum, steps = 0.0, 0
    for _epoch in range(config.epochs):
        order = torch.randperm(len(x_train), generator=generator).to(x_train.device)
        loss_sum, steps = 0.0, 0
        for start in range(0, len(x_train), batch):
            index = order[start : start + batch]
            loss = F.cross_entropy(wrapped(x_train[index]), y_train[index])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            hgnn.clip_latent_weights_(model)  # binary latent weights to [-1, 1]
            with torch.no_grad():
                for scale in scales:  # a scale must stay positive
                    scale.clamp_(min=_MIN_SCALE)
            loss_sum += float(loss.detach())
            steps += 1
    return {
        "test_accuracy": _distributed.mean_across_ranks(_accuracy(model, data.x_test, data.y_test)),
        "train_accuracy": _distributed.mean_across_ranks(_accuracy(model, x_train, y_train)),
        "final_loss": _distributed.mean_across_ranks(loss_sum / max(steps, 1)),
        "seconds": time.perf_counter() - t0,
    }


# --------------------------------------------------------------------------- report


def _summary(values: list[float]) -> dict[str, float]:
    return {
        "mean": statistics.fmean(values),
        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
        "min": min(values),
        "max": max(values),
    }


def _pct(value: float) -> str:
    return f"{100 * value:.1f}"


def _spread(row: dict[str, Any]) -> str:
    acc = row["test_accuracy"]
    if len(acc["values"]) == 1:
        return f"{_pct(acc['mean'])} (1 seed)"
    return f"{_pct(acc['mean'])} ± {_pct(acc['std'])}"


def _tables(rows: list[dict[str, Any]], config: QatConfig) -> list[Table]:
    float_mean = rows[0]["test_accuracy"]["mean"]
    main = Table(
        f"Test accuracy (%) per configuration, mean ± std over {config.seeds} seed(s), "
        f"Adam, {config.epochs} epochs",
        [
            "configuration",
            "precision",
            "gradient",
            "test acc",
            "min–max",
            "vs float (pp)",
            "train acc",
            "train loss",
            "s/run",
        ],
    )
    for r in rows:
        acc = r["test_accuracy"]
        drop = 100 * (acc["mean"] - float_mean)
        main.rows.append(
            [
                r["label"],
                r["precision"],
                r["gradient"],
                _spread(r),
                f"{_pct(acc['min'])}–{_pct(acc['max'])}",
                "—" if r["kind"] == "float" else f"{drop:+.1f}",
                _pct(r["train_accuracy"]["mean"]),
                f"{statistics.fmean(r['final_loss']):.3f}",
                f"{r['seconds_mean']:.2f}",
            ]
        )
    compare = Table(
        "Fixed-scale STE vs learned-scale LSQ: test accuracy (%) per bit width",
        ["bits", "STE", "LSQ", "LSQ − STE (pp)", "seed spread (pp)"],
    )
    by_key = {(r["kind"], r["bits"]): r for r in rows}
    for bits in config.bits:
        ste, lsq = by_key.get(("ste", bits)), by_key.get(("lsq", bits))
        if ste is None or lsq is None:
            continue
        diff = 100 * (lsq["test_accuracy"]["mean"] - ste["test_accuracy"]["mean"])
        spread = 100 * max(ste["test_accuracy"]["std"], lsq["test_accuracy"]["std"])
        compare.rows.append(
            [str(bits), _spread(ste), _spread(lsq), f"{diff:+.1f}", f"{spread:.1f}"]
        )
    return [main, compare] if compare.rows else [main]


def _notes(rows: list[dict[str, Any]], config: QatConfig, data: Dataset) -> list[str]:
    float_row = rows[0]
    float_mean = float_row["test_accuracy"]["mean"]
    notes = [
        f"Data: {data.name}, {len(data.x_train)} train / {len(data.x_test)} test images; MLP "
        f"{data.features}-{'-'.join(map(str, config.hidden))}-{float_row['classes']}; Adam "
        f"(lr {config.lr}, binary {config.binary_lr}), batch {config.batch_size}, "
        f"{config.epochs} epochs, {config.seeds} seed(s). Quantized networks: all weights "
        "b-bit per output channel, hidden activations b-bit unsigned, biases and input float.",
        f"Float baseline: {_pct(float_mean)} % test accuracy (chance "
        f"{_pct(1 / float_row['classes'])} %).",
    ]
    drops = []
    for r in rows[1:]:
        drops.append(f"{r['label']} {100 * (r['test_accuracy']['mean'] - float_mean):+.1f}")
    if drops:
        notes.append("Test accuracy vs float (pp): " + ", ".join(drops) + ".")
    by_key = {(r["kind"], r["bits"]): r for r in rows}
    image = 100 / max(len(data.x_test), 1)  # one test image, in pp
    resolved: dict[int, bool] = {}
    for bits in sorted(config.bits):
        ste, lsq = by_key.get(("ste", bits)), by_key.get(("lsq", bits))
        if ste is None or lsq is None:
            continue
        s, q = ste["test_accuracy"], lsq["test_accuracy"]
        diff = 100 * (q["mean"] - s["mean"])
        noise = 100 * max(s["std"], q["std"])
        resolved[bits] = config.seeds >= 2 and abs(diff) > max(2 * noise, image)
        if config.seeds < 2:
            verdict = "one seed, so the spread is unknown: not resolved"
        elif resolved[bits]:
            verdict = f"more than twice the larger seed spread ({noise:.1f} pp)"
        else:
            verdict = f"not resolved (seed spread {noise:.1f} pp, one test image {image:.2f} pp)"
        if diff > 0:
            claim = f"LSQ beats fixed-scale STE by {diff:.1f} pp"
        elif diff < 0:
            claim = f"LSQ does NOT beat fixed-scale STE (it is {-diff:.1f} pp lower)"
        else:
            claim = "LSQ and fixed-scale STE tie"
        s_loss = statistics.fmean(ste["final_loss"])
        q_loss = statistics.fmean(lsq["final_loss"])
        notes.append(
            f"{bits}-bit: {claim}; {verdict}. Last-epoch training loss: LSQ {q_loss:.3f}, "
            f"STE {s_loss:.3f}."
        )
    if resolved:
        low = min(resolved)
        ste_low, lsq_low = by_key[("ste", low)], by_key[("lsq", low)]
        diff = lsq_low["test_accuracy"]["mean"] - ste_low["test_accuracy"]["mean"]
        lower_loss = statistics.fmean(lsq_low["final_loss"]) < statistics.fmean(
            ste_low["final_loss"]
        )
        fit = (
            "fits the training set better" if lower_loss else "does not fit the training set better"
        )
        if resolved[low] and diff > 0:
            verdict = "learning the scale helps test accuracy, in line with Esser et al. (2020)"
        elif resolved[low]:
            verdict = (
                "learning the scale does not help test accuracy, unlike what Esser et al. "
                "(2020) report"
            )
        else:
            verdict = (
                "the test-accuracy difference is not resolved by this run, so it neither "
                "confirms nor contradicts Esser et al. (2020)"
            )
        notes.append(f"At the lowest width ({low} bits) {verdict}; LSQ {fit}.")
    if ("binary", None) in by_key:
        b = by_key[("binary", None)]["test_accuracy"]["mean"]
        notes.append(
            f"Binary network (±1 weights in the middle layer, ±1 activations, float first and "
            f"last layer, BatchNorm before each sign, clipped STE): {_pct(b)} %, "
            f"{100 * (b - float_mean):+.1f} pp vs float."
        )
    if ("ternary", None) in by_key:
        t = by_key[("ternary", None)]["test_accuracy"]["mean"]
        notes.append(
            f"Ternary network (TWN weights {{-a, 0, +a}} per output channel in the middle layer, "
            f"float ReLU activations and first and last layer): {_pct(t)} %, "
            f"{100 * (t - float_mean):+.1f} pp vs float."
        )
    return notes


def plot_accuracy(rows: list[dict[str, Any]], config: QatConfig, out: Path) -> str | None:
    """``qat_accuracy.png``: test accuracy per precision (float, bits, binary), one line per
    quantizer gradient, error bars spanning the seeds' range."""
    plt = pyplot()
    if plt is None:
        return None
    out.mkdir(parents=True, exist_ok=True)
    bits = sorted(config.bits, reverse=True)
    extra = [k for k, on in (("binary", config.binary), ("ternary", config.ternary)) if on]
    ticks = ["float", *[f"{b}-bit" for b in bits], *extra]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    by_key = {(r["kind"], r["bits"]): r for r in rows}

    def point(row: dict[str, Any]) -> tuple[float, float, float]:
        acc = row["test_accuracy"]
        return 100 * acc["mean"], 100 * (acc["mean"] - acc["min"]), 100 * (acc["max"] - acc["mean"])

    f_mean, f_lo, f_hi = point(by_key[("float", None)])
    for offset, (method, color) in zip((-0.06, 0.06), (("ste", "C0"), ("lsq", "C1")), strict=True):
        xs, ys, lo, hi = [0.0], [f_mean], [f_lo], [f_hi]
        for i, b in enumerate(bits, start=1):
            if (method, b) in by_key:
                m, low, high = point(by_key[(method, b)])
                xs.append(i + offset)
                ys.append(m)
                lo.append(low)
                hi.append(high)
        if len(xs) > 1:
            label = "STE, fixed scale" if method == "ste" else "LSQ, learned scale"
            ax.errorbar(xs, ys, yerr=[lo, hi], color=color, marker="o", capsize=3, label=label)
    for kind, color, label in (
        ("binary", "C2", "binary, clipped STE"),
        ("ternary", "C3", "ternary (TWN), STE"),
    ):
        if (kind, None) in by_key:
            m, low, high = point(by_key[(kind, None)])
            ax.errorbar(
                [ticks.index(kind)], [m], yerr=[[low], [high]], color=color, marker="s",
                capsize=3, linestyle="none", label=label,
            )  # fmt: skip
    ax.axhline(f_mean, color="grey", linestyle="--", linewidth=0.8)
    ax.set_xticks(range(len(ticks)), ticks)
    ax.set_ylabel(f"test accuracy (%), mean and range over {config.seeds} seed(s)")
    ax.set_title(f"QAT MLP {'-'.join(map(str, config.hidden))}: accuracy per precision")
    ax.legend(fontsize=8)
    fig.tight_layout()
    name = "qat_accuracy.png"
    fig.savefig(out / name, dpi=110)
    plt.close(fig)
    return name


# --------------------------------------------------------------------------- the task


def _run_variant(
    variant: Variant,
    data: Dataset,
    config: QatConfig,
    settings: BenchSettings,
    progress: Progress,
    classes: int,
) -> dict[str, Any]:
    """Train ``variant`` from every seed; its row of results."""
    runs = []
    for s in range(config.seeds):
        progress.advance(f"{variant.label}, seed {s + 1}/{config.seeds}", steps=0)
        seed = settings.seed * 1000 + s  # the same seeds for every configuration
        runs.append(train_and_evaluate(variant, data, config, seed, settings.device))
        progress.advance()
    test = [r["test_accuracy"] for r in runs]
    train = [r["train_accuracy"] for r in runs]
    row = {
        "label": variant.label,
        "kind": variant.kind,
        "bits": variant.bits,
        "precision": variant.precision,
        "gradient": variant.gradient,
        "classes": classes,
        "test_accuracy": {**_summary(test), "values": test},
        "train_accuracy": {**_summary(train), "values": train},
        "final_loss": [r["final_loss"] for r in runs],
        "seconds_mean": statistics.fmean(r["seconds"] for r in runs),
    }
    progress.log(f"{variant.label}: test accuracy {_spread(row)} %")
    return row


@task(
    "qat",
    "MLP on digits: float vs 8/4/2-bit QAT (STE, LSQ) vs binary vs ternary; test accuracy",
    default_config,
)
def run(settings: BenchSettings, config: QatConfig, progress: Progress) -> TaskResult:
    """Train every configuration from ``config.seeds`` seeds and report test accuracy."""
    t_start = time.perf_counter()
    if config.seeds < 1 or config.epochs < 1:
        raise ValueError(
            f"Expected `seeds` and `epochs` >= 1, but found {config.seeds} and {config.epochs}"
        )
    data = load_dataset(settings.data, settings.seed).to(settings.device)
    classes = int(max(int(data.y_train.max()), int(data.y_test.max()))) + 1
    chosen = variants(config)
    progress.start("qat", len(chosen) * config.seeds)
    threads = torch.get_num_threads()
    if config.threads is not None:
        torch.set_num_threads(max(1, config.threads))
    try:
        rows = [_run_variant(v, data, config, settings, progress, classes) for v in chosen]
    finally:
        torch.set_num_threads(threads)
    progress.finish()
    figures: list[str] = []
    if settings.out is not None and config.plot and _distributed.is_main():
        name = plot_accuracy(rows, config, settings.out)
        if name is not None:
            figures.append(name)
    result = TaskResult(
        name="qat",
        summary=f"MLP on {data.name}: float vs fake-quantized (STE, LSQ) vs binary vs ternary, test "
        f"accuracy over {config.seeds} seed(s) ({settings.device})",
        settings=dataclasses.asdict(config),
        data={
            "dataset": data.name,
            "n_train": len(data.x_train),
            "n_test": len(data.x_test),
            "world_size": _distributed.world_size(),
            "threads": torch.get_num_threads() if config.threads is None else config.threads,
            "rows": rows,
            "figures": figures,
        },
        wall_s=time.perf_counter() - t_start,
    )
    result.tables = _tables(rows, config)
    result.notes = _notes(rows, config, data)
    result.figures = figures
    return result
