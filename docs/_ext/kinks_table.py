"""Sphinx extension: the table of PyTorch's derivative conventions at kinks, measured at
build time with :func:`hardgrad.diagnostics.probe` (nothing in it is typed by hand).

Directive (MyST: ```` ```{kinks-table} ```` ): one row per (function, point) of
:data:`CASES`, with autograd's derivative, the one-sided difference quotients and the
convention :func:`~hardgrad.diagnostics.probe` names.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from docutils import nodes
from docutils.parsers.rst import Parser as RSTParser
from docutils.utils import new_document
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective


def _cases() -> list[tuple[str, Callable[[Any], Any], tuple[float, ...]]]:
    import torch
    import torch.nn.functional as F

    zero = torch.zeros((), dtype=torch.float64)
    half = torch.tensor(0.5, dtype=torch.float64)
    return [
        ("torch.relu(x)", torch.relu, (0.0,)),
        ("F.leaky_relu(x, 0.01)", F.leaky_relu, (0.0,)),
        ("F.relu6(x)", F.relu6, (0.0, 6.0)),
        ("F.elu(x)", F.elu, (0.0,)),
        ("F.hardtanh(x)", F.hardtanh, (-1.0, 1.0)),
        ("F.hardsigmoid(x)", F.hardsigmoid, (-3.0, 3.0)),
        ("F.hardswish(x)", F.hardswish, (-3.0, 3.0)),
        ("torch.abs(x)", torch.abs, (0.0,)),
        ("torch.clamp(x, 0, 1)", lambda x: torch.clamp(x, 0.0, 1.0), (0.0, 1.0)),
        ("torch.clamp(x, min=t) (tensor bound)", lambda x: torch.clamp(x, min=zero), (0.0,)),
        ("torch.maximum(x, 0)", lambda x: torch.maximum(x, zero), (0.0,)),
        ("torch.minimum(x, 0)", lambda x: torch.minimum(x, zero), (0.0,)),
        ("torch.stack([x, 0]).max()", lambda x: torch.stack([x, zero]).max(), (0.0,)),
        ("torch.stack([x, 0]).amax()", lambda x: torch.stack([x, zero]).amax(), (0.0,)),
        ("torch.where(x > 0, x, 0)", lambda x: torch.where(x > 0, x, 0.0), (0.0,)),
        ("torch.sqrt(x)", torch.sqrt, (0.0,)),
        (
            "torch.linalg.vector_norm(stack([x, 0]))",
            lambda x: torch.linalg.vector_norm(torch.stack([x, zero])),
            (0.0,),
        ),
        ("torch.round(x)", torch.round, (0.5,)),
        ("torch.floor(x)", torch.floor, (1.0,)),
        ("torch.sign(x)", torch.sign, (0.0,)),
        ("torch.heaviside(x, 0.5)", lambda x: torch.heaviside(x, half), (0.0,)),
        ("(x > 0).float()", lambda x: (x > 0).to(x.dtype), (0.0,)),
    ]


def _fmt(value: float | None) -> str:
    if value is None:
        return "none"
    return f"{value:.4g}"


class KinksTable(SphinxDirective):
    has_content = False

    def run(self) -> list[nodes.Node]:
        from hardgrad.diagnostics import probe

        lines = [
            ".. list-table:: autograd at kinks (measured by hardgrad.diagnostics.probe)",
            "   :header-rows: 1",
            "",
            "   * - function",
            "     - x",
            "     - autograd",
            "     - left quotient",
            "     - right quotient",
            "     - convention",
        ]
        for label, fn, points in _cases():
            for point in probe(fn, points).points:
                kind = "jump" if point.jump else ("kink" if point.kink else "smooth")
                jumped = point.jump
                lines += [
                    f"   * - ``{label}``",
                    f"     - {point.point:g}",
                    f"     - {_fmt(point.autograd)}",
                    f"     - {'(jump)' if jumped else _fmt(point.left)}",
                    f"     - {'(jump)' if jumped else _fmt(point.right)}",
                    f"     - {point.convention} ({kind})",
                ]
        document = new_document("<kinks-table>", self.state.document.settings)
        RSTParser().parse("\n".join(lines), document)
        return list(document.children)


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("kinks-table", KinksTable)
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": True}
