"""``hardgrad plot`` and :mod:`hardgrad.bench.plots`: pictures drawn from the registries."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("matplotlib")

import hardgrad as hg
from hardgrad.bench import plots
from hardgrad.bench.cli import main
from hardgrad.ops import OPS
from hardgrad.surrogates import SURROGATES

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_surrogates_for_follows_the_families():
    for _, spec in OPS.items():
        names = plots.surrogates_for(spec)
        if spec.family is None:
            assert names == []
            continue
        assert names  # every family has at least one surrogate
        for name, cls in SURROGATES.items():
            assert (name in names) == (spec.family in cls.applies_to)


def test_op_curves_are_autograd_of_the_real_op():
    """The plotted backward is the op's own gradient: for sign with the clipped surrogate,
    1 on [-1, 1] and 0 outside; the forward is exactly torch.sign."""
    spec = OPS.get("sign")
    x = torch.tensor([-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0], dtype=torch.float64)
    forward, backward = plots.op_curves(spec, x)
    assert torch.equal(forward, torch.sign(x))
    assert torch.equal(backward["clipped"], (x.abs() <= 1).double())
    assert torch.equal(backward["identity"], torch.ones_like(x))
    assert set(backward) == set(plots.surrogates_for(spec))


def test_bernoulli_estimators_are_the_registry_minus_exact():
    names = plots.bernoulli_estimators()
    assert "exact" not in names
    assert "disarm" in names and "st" in names and "rloo" in names
    assert len(names) == len(hg.estimators.ESTIMATORS) - 1


@pytest.mark.slow
def test_plot_command_writes_one_png_per_op_and_the_estimators(tmp_path, capsys):
    out = tmp_path / "pics"
    assert main(["plot", "--out", str(out), "--draws", "300", "--seed", "1"]) == 0
    printed = capsys.readouterr().out.split()
    expected = [f"op_{name}.png" for name, spec in OPS.items() if spec.family is not None]
    expected.append("estimators_toy.png")
    assert sorted(p.name for p in out.iterdir()) == sorted(expected)
    for name in expected:
        data = (out / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 5000
        assert str(out / name) in printed
    image = pytest.importorskip("PIL.Image")
    with image.open(out / "op_sign.png") as png:  # the figures' resolution, 150 dpi
        assert round(png.info["dpi"][0]) == 150
