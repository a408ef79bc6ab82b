"""The figure conventions of :mod:`hardgrad.bench._pyplot`, and every task's figures
following them: 150 dpi, no error bars from one seed, "quick run" in a quick run's title,
legends off the data, x labels that do not collide, bars not drawn explained, and each
figure named under its table in ``report.md``."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("matplotlib")

from matplotlib.collections import PolyCollection
from matplotlib.container import ErrorbarContainer

from hardgrad.bench import _pyplot
from hardgrad.bench._task import Table, TaskResult
from hardgrad.bench._vae import _report as vae_report
from hardgrad.bench.l0 import L0Config
from hardgrad.bench.l0 import _report as l0_report
from hardgrad.bench.moe import MoEConfig
from hardgrad.bench.moe import _report as moe_report
from hardgrad.bench.poly import PolyConfig
from hardgrad.bench.poly import _report as poly_report
from hardgrad.bench.qat import QatConfig
from hardgrad.bench.qat import _report as qat_report
from hardgrad.bench.report import figures_by_table, markdown_report
from hardgrad.bench.shortest_path import ShortestPathConfig
from hardgrad.bench.shortest_path import _report as sp_report
from hardgrad.bench.speed import _report as speed_report
from hardgrad.bench.toy import ToyConfig
from hardgrad.bench.toy import _plots as toy_plots
from hardgrad.bench.vae_bernoulli import BernoulliVAEConfig
from hardgrad.bench.vq import VQConfig
from hardgrad.bench.vq import _report as vq_report

plt = _pyplot.pyplot()


def _png_dpi(path: Path) -> float:
    """The resolution a PNG declares (its pHYs chunk), read back."""
    image = pytest.importorskip("PIL.Image")
    with image.open(path) as png:
        return float(png.info["dpi"][0])


# --------------------------------------------------------------------------- the checks


def _renderer(fig: Any) -> Any:
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def _titles(fig: Any) -> str:
    return " ".join([fig.get_suptitle(), *(ax.get_title() for ax in fig.axes)])


def _has_error_bars(fig: Any) -> bool:
    for ax in fig.axes:
        if any(isinstance(c, ErrorbarContainer) for c in ax.containers):
            return True
        if any(isinstance(c, PolyCollection) for c in ax.collections):  # fill_between
            return True
    return False


def _legends_off_the_data(fig: Any) -> None:
    renderer = _renderer(fig)
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    legends += list(fig.legends)
    for legend in legends:
        box = legend.get_window_extent(renderer)
        for ax in fig.axes:
            assert not box.overlaps(ax.get_window_extent(renderer)), "a legend covers an axes"


def _x_labels_do_not_collide(fig: Any) -> None:
    """Neighbouring x tick labels: their boxes apart, or rotated text lines at least one
    font height apart (tick spacing times the sine of the angle)."""
    renderer = _renderer(fig)
    for ax in fig.axes:
        labels = [t for t in ax.get_xticklabels() if t.get_visible() and t.get_text()]
        for a, b in itertools.pairwise(labels):
            box_a, box_b = a.get_window_extent(renderer), b.get_window_extent(renderer)
            if not box_a.overlaps(box_b):
                continue
            angle = math.radians(a.get_rotation())
            spacing = abs(ax.transData.transform((b.get_position()[0], 0))[0]
                          - ax.transData.transform((a.get_position()[0], 0))[0])  # fmt: skip
            height = a.get_fontsize() * fig.dpi / 72
            assert spacing * math.sin(angle) >= 0.9 * height, (a.get_text(), b.get_text())


def _check(fig: Any, *, quick: bool, one_seed: bool) -> None:
    assert ("quick run" in _titles(fig)) == quick
    if one_seed:
        assert not _has_error_bars(fig), "error bars from one seed"
    _legends_off_the_data(fig)
    _x_labels_do_not_collide(fig)


@pytest.fixture
def saved(monkeypatch: pytest.MonkeyPatch) -> Callable[[Any], list[dict[str, Any]]]:
    """``saved(module)``: route ``module.save_figure`` through a recorder that keeps the
    figure's checks' inputs (the figure is inspected before it is closed)."""

    def patch(module: Any) -> list[dict[str, Any]]:
        calls: list[dict[str, Any]] = []
        real = _pyplot.save_figure

        def record(fig: Any, out: Path, name: str, **kwargs: Any) -> Any:
            calls.append({"fig": fig, "name": name, **kwargs})
            _check(fig, **checks)
            texts = [t.get_text() for ax in fig.axes for t in ax.texts]
            calls[-1]["texts"] = texts
            calls[-1]["error_bars"] = _has_error_bars(fig)
            return real(fig, out, name, **kwargs)

        monkeypatch.setattr(module, "save_figure", record)
        return calls

    checks: dict[str, bool] = {}
    patch.checks = checks  # type: ignore[attr-defined]
    return patch


# --------------------------------------------------------------------------- the helpers


def test_save_figure_writes_150_dpi_and_carries_caption_and_table(tmp_path: Path) -> None:
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    name = _pyplot.save_figure(fig, tmp_path / "sub", "a.png", caption="a line", table="T")
    assert name == "a.png" and name.caption == "a line" and name.table == "T"
    assert json.loads(json.dumps({"figures": [name]})) == {"figures": ["a.png"]}
    assert round(_png_dpi(tmp_path / "sub" / "a.png")) == _pyplot.DPI == 150
    assert not plt.fignum_exists(fig.number)  # closed


def test_error_bars_and_what_they_are() -> None:
    assert not _pyplot.error_bars_allowed(1) and _pyplot.error_bars_allowed(2)
    assert _pyplot.spread_caption(1) == "1 seed: no error bars"
    assert _pyplot.spread_caption(3) == "error bars: ± one standard deviation over 3 seeds"
    assert _pyplot.spread_caption(2, "min to max", "bands") == "bands: min to max over 2 seeds"


def test_quick_title_names_the_run_size() -> None:
    config = ShortestPathConfig(steps=300, seeds=1)
    assert _pyplot.quick_title("T", False, config) == "T"
    assert _pyplot.quick_title("T", True, config) == "T (quick run: 300 steps, 1 seed)"
    assert _pyplot.quick_title("T", True, QatConfig(epochs=12, seeds=2)) == (
        "T (quick run: 12 epochs, 2 seeds)"
    )
    assert _pyplot.quick_title("T", True, "fewer draws") == "T (quick run: fewer draws)"


def test_legend_outside_is_off_the_axes() -> None:
    fig, ax = plt.subplots(layout="constrained")
    for i in range(6):
        ax.plot(range(10), [i * x for x in range(10)], label=f"a rather long name {i}")
    _pyplot.legend_outside(ax)
    _legends_off_the_data(fig)
    plt.close(fig)


def test_the_checks_catch_a_legend_on_the_data_and_colliding_labels() -> None:
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1], label="line")
    ax.legend(loc="upper left")
    with pytest.raises(AssertionError, match="covers"):
        _legends_off_the_data(fig)
    ax.get_legend().remove()
    ax.set_xticks(range(6), [f"a long category name {i}" for i in range(6)])
    with pytest.raises(AssertionError):
        _x_labels_do_not_collide(fig)
    _pyplot.category_labels(ax, [f"a long category name {i}" for i in range(6)])
    _x_labels_do_not_collide(fig)
    plt.close(fig)


def test_bars_without_error_bars_from_one_seed_and_n_a_for_missing() -> None:
    fig, ax = plt.subplots()
    _pyplot.bars(ax, [1.0, float("nan"), 2.0, None], errors=[0.1] * 4, n_seeds=1,
                 missing=lambda i: f"reason {i}")  # fmt: skip
    assert not _has_error_bars(fig) and len(ax.patches) == 2
    assert [t.get_text() for t in ax.texts] == ["n/a: reason 1", "n/a: reason 3"]
    ax.clear()
    _pyplot.bars(ax, [1.0, 2.0], errors=[0.1, 0.2], n_seeds=2)
    assert _has_error_bars(fig)
    plt.close(fig)


def test_report_names_each_figure_under_its_table() -> None:
    tables = [Table("a: first", ["x"], [["1"]]), Table("b: second", ["x"], [["2"]]),
              Table("a: third", ["x"], [["3"]])]  # fmt: skip
    first = _pyplot.FigureFile("one.png", "the first figure", "a: ")
    loose = _pyplot.FigureFile("two.png", "no table", "nowhere")
    plain = "three.png"
    assert figures_by_table(tables, [first, loose, plain]) == {2: [first], None: [loose, plain]}
    result = TaskResult("t", "a task", {}, {}, tables, figures=[first, loose, plain])
    env = {"quick": False, "date": "d", "hardgrad": "v", "torch": "t", "python": "p",
           "platform": "x", "processor": "y", "device": "cpu", "threads": 1,
           "cores_available": 1, "seed": 0, "data": "digits", "world_size": 1, "command": "c"}  # fmt: skip
    report = markdown_report(env, [result])
    under_third = report.index("### a: third")
    figure_line = report.index("Figure: one.png — the first figure")
    assert under_third < figure_line < report.index("Figure: two.png — no table")
    assert "![one.png](one.png)" in report and "Figure: three.png\n" in report


# --------------------------------------------------------------------------- every task


def _stat(mean: float, std: float = 0.05) -> dict[str, float]:
    return {"mean": mean, "std": std, "min": mean - std, "max": mean + std}


CASES = [(True, 1), (False, 3)]


@pytest.mark.parametrize(("quick", "seeds"), CASES)
def test_toy_figures(saved: Any, tmp_path: Path, quick: bool, seeds: int) -> None:
    calls = saved(toy_plots)
    saved.checks.update(quick=quick, one_seed=seeds == 1)
    config = ToyConfig(targets=(0.45, 0.49), phis=(0.0,), seeds=seeds, steps=4)
    names = ["st", "disarm", "reinforce(optimal)", "gumbel_softmax", "exact"]
    estimators = {
        n: {"unbiased": n not in ("st", "gumbel_softmax"), "mean": [0.5, 0.4, 0.3],
            "min": [0.5, 0.3, 0.2], "max": [0.5, 0.5, 0.4]}
        for n in names
    }  # fmt: skip
    curves = {"steps": [0, 2, 4], "estimators": estimators}
    toy_plots.plot_curves(curves, config, tmp_path, quick=quick)
    rows = [
        {"estimator": n, "t": t, "phi": 0.0, "var": 0.1 * (i + 1), "var_is_zero": n == "exact"}
        for i, n in enumerate(names)
        for t in config.targets
        if not (n == "disarm" and t == 0.49)
    ]
    toy_plots.plot_variance(rows, config, tmp_path, quick=quick)
    assert [c["name"] for c in calls] == ["toy_curves.png", "toy_variance.png"]
    assert calls[0]["error_bars"] == (seeds > 1)  # the min-max band
    assert "n/a: not run at t = 0.49" in calls[1]["texts"]
    for c in calls:
        assert round(_png_dpi(tmp_path / c["name"])) == 150 and c["caption"] and c["table"]


@pytest.mark.parametrize(("quick", "seeds"), CASES)
def test_poly_figure(saved: Any, tmp_path: Path, quick: bool, seeds: int) -> None:
    calls = saved(poly_report)
    saved.checks.update(quick=quick, one_seed=seeds == 1)
    config = PolyConfig(powers=(1.5, 2.0), seeds=seeds, steps=4)
    runs = {
        n: {"unbiased": n != "st", "powers": {str(p): {"mean": [1.0, 0.8, 0.6]} for p in (1.5, 2.0)}}
        for n in ("st", "disarm", "closed-form")
    }  # fmt: skip
    data = {"runs": runs, "steps": [0, 2, 4], "optima": {"1.5": 0.5, "2.0": 0.4}}
    assert poly_report.plot_curves(data, config, tmp_path, quick=quick) == "poly_curves.png"
    assert len(calls) == 1 and round(_png_dpi(tmp_path / "poly_curves.png")) == 150


@pytest.mark.parametrize(("quick", "seeds"), CASES)
def test_bar_figures(saved: Any, tmp_path: Path, quick: bool, seeds: int) -> None:
    """l0, vq, moe and shortest-path: error bars from two seeds on; n/a for NaN."""
    modules = (l0_report, vq_report, moe_report, sp_report)
    calls = {m.__name__: saved(m) for m in modules}
    saved.checks.update(quick=quick, one_seed=seeds == 1)
    nan = float("nan")
    l0_rows = [{"lambda": lam, "weight_sparsity": _stat(0.1 * i), "accuracy": _stat(0.9)}
               for i, lam in enumerate((0.0, 1.0, 3.0))]  # fmt: skip
    l0_report._plot(l0_rows, tmp_path, L0Config(seeds=seeds, steps=5), quick=quick)
    vq_rows = [{"variant": v, "recon_mse": _stat(nan if v == "gumbel" else 0.01),
                "usage": _stat(0.9), "perplexity": _stat(40.0)}
               for v in ("vq", "vq+rotation+restart", "fsq", "gumbel")]  # fmt: skip
    vq_report._plot(vq_rows, tmp_path, VQConfig(seeds=seeds, steps=5), quick=quick)
    moe_rows = {n: {"cosine": _stat(nan if n == "dense" else 0.5), "accuracy": _stat(0.8),
                    "test_mse": _stat(0.2)} for n in ("sparse", "dense", "sparsemixer")}  # fmt: skip
    moe_report._plot(moe_rows, MoEConfig(seeds=seeds, steps=5), tmp_path, quick=quick)
    sp_rows = [{"method": m, "regret": _stat(0.1)} for m in ("spo+", "blackbox", "perturbed")]
    sp_report._plot(sp_rows, tmp_path, ShortestPathConfig(seeds=seeds, steps=5), quick=quick)
    for module in modules:
        (call,) = calls[module.__name__]
        assert call["error_bars"] == (seeds > 1), module.__name__
        assert round(_png_dpi(tmp_path / call["name"])) == 150
        assert call["table"] and call["caption"]
    assert "n/a: no finite value" in calls[vq_report.__name__][0]["texts"]
    assert "n/a: zero gradient, cosine undefined" in calls[moe_report.__name__][0]["texts"]


@pytest.mark.parametrize(("quick", "seeds"), CASES)
def test_qat_figure(saved: Any, tmp_path: Path, quick: bool, seeds: int) -> None:
    calls = saved(qat_report)
    saved.checks.update(quick=quick, one_seed=seeds == 1)
    config = QatConfig(bits=(8, 4), seeds=seeds, epochs=2)
    rows = [{"kind": "float", "bits": None, "test_accuracy": _stat(0.95)}]
    rows += [{"kind": m, "bits": b, "test_accuracy": _stat(0.9)} for m in ("ste", "lsq")
             for b in (8, 4)]  # fmt: skip
    rows += [{"kind": k, "bits": None, "test_accuracy": _stat(0.8)} for k in ("binary", "ternary")]
    assert qat_report.plot_accuracy(rows, config, tmp_path, quick=quick) == "qat_accuracy.png"
    assert calls[0]["error_bars"] == (seeds > 1)


@pytest.mark.parametrize("quick", [True, False])
def test_speed_figure(saved: Any, tmp_path: Path, quick: bool) -> None:
    calls = saved(speed_report)
    saved.checks.update(quick=quick, one_seed=True)
    names = ["round", "sign", "one_hot_argmax", "straight_through_estimator", "clamp"]
    ops = {n: {"eager": {"ratio": 0.9}, "compiled": {"ratio": 1.1} if n != "sign" else None}
           for n in names}  # fmt: skip
    assert speed_report.plot(ops, names, tmp_path, quick=quick) == "speed_ratio.png"
    reason = "n/a: not compiled" + (" in a quick run" if quick else "")
    assert calls[0]["texts"] == [reason]


@pytest.mark.parametrize("quick", [True, False])
def test_vae_figures(saved: Any, tmp_path: Path, quick: bool) -> None:
    calls = saved(vae_report)
    saved.checks.update(quick=quick, one_seed=True)
    config = BernoulliVAEConfig(steps=10)
    runs = {
        n: {"unbiased": n != "st", "test_neg_elbo": 100.0 + i,
            "curve": {"steps": [0, 5, 10], "test": [140.0, 120.0, 100.0 + i]},
            "diagnostics": [{"step": s, "var": 1.0 + s, "snr": 0.5} for s in (0, 10)]}
        for i, n in enumerate(("st", "disarm", "rloo"))
    }  # fmt: skip
    panels = {"16 bits": runs}
    vae_report.plot_curves(panels, tmp_path, "c.png", "VAE", quick=quick, config=config, table="x")
    vae_report.plot_checkpoints(panels, [("var", "variance", True), ("snr", "SNR", True)],
                                tmp_path, "v.png", "VAE", quick=quick, config=config)  # fmt: skip
    assert [c["name"] for c in calls] == ["c.png", "v.png"]
    assert calls[0]["table"] == "x"
