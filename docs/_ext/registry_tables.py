"""Sphinx extension: tables and plots generated from hardgrad's registries at build time.

Nothing here is written by hand: every row comes from :data:`hardgrad.surrogates.SURROGATES`,
:data:`hardgrad.ops.OPS` or :data:`hardgrad.estimators.ESTIMATORS`, so a newly registered
surrogate, op or estimator shows up in the docs without touching them.

Directives (usable from MyST as ```` ```{registry-table} surrogates ```` and so on):

``registry-table``
    One argument, ``surrogates``, ``ops`` or ``estimators``: a table with one row per
    registry entry. The estimator table reads each class's attributes (``pathwise``,
    ``unbiased``, ``dists``, ``evaluations_per_sample``) and its default instance's
    ``num_samples`` default.

``surrogate-curves``
    A figure with :math:`s(x)` and :math:`s'(x)` of every registered surrogate (default
    parameters), drawn with matplotlib (Agg backend) when the build starts. The PNG is
    written to ``api/generated/`` in the source tree (ignored by git) and copied into the
    build like any other image.

At the end of reading it checks that every registered op, surrogate and estimator has an
entry in the API reference (a warning, so an error under ``-W``). It also resolves
cross-references to the top-level re-exports (``hardgrad.round``) to the functions
documented in :mod:`hardgrad.ops`.
"""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path
from typing import Any, ClassVar

from docutils import nodes
from docutils.parsers.rst import Parser as RSTParser
from docutils.parsers.rst import directives
from docutils.utils import new_document
from sphinx.application import Sphinx
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

logger = logging.getLogger(__name__)

#: Where the curves image lives, relative to the Sphinx source directory.
CURVES_PATH = "api/generated/surrogate_curves.png"


def _first_line(obj: Any) -> str:
    doc = inspect.getdoc(obj) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def _cell(text: str) -> str:
    """One list-table cell; an empty cell needs an explicit placeholder."""
    return text if text else "\u2014"


def _parameters(cls: type) -> str:
    if not dataclasses.is_dataclass(cls):
        return ""
    parts = [f"{f.name}={f.default!r}" for f in dataclasses.fields(cls)]
    return ", ".join(parts)


def _surrogate_rows() -> tuple[list[str], list[list[str]]]:
    from hardgrad import surrogates

    header = ["Name", "Class", "Defaults", "Summary", "Families", "Backward stores"]
    stored = {"identity": "nothing", "indicator": "bool mask", "smooth": "the input"}
    rows = []
    for name, cls in surrogates.SURROGATES.items():
        rows.append(
            [
                f'``"{name}"``',
                f":class:`~hardgrad.surrogates.{cls.__name__}`",
                f"``{_parameters(cls)}``" if _parameters(cls) else "",
                _first_line(cls),
                ", ".join(f"``{family}``" for family in sorted(cls.applies_to)),
                stored.get(cls.kind, cls.kind),
            ]
        )
    return header, rows


def _op_rows() -> tuple[list[str], list[list[str]]]:
    from hardgrad import ops, surrogates

    header = ["Name", "Function", "Summary", "Family", "Default backward", "Accepted surrogates"]
    rows = []
    for name, spec in ops.OPS.items():
        if spec.family is None:
            accepted = "(fixed backward, see the function)"
        else:
            accepted = ", ".join(
                f'``"{n}"``'
                for n, cls in surrogates.SURROGATES.items()
                if spec.family in cls.applies_to
            )
        rows.append(
            [
                f'``"{name}"``',
                f":func:`hardgrad.{name} <hardgrad.ops.{spec.op.__name__}>`",
                spec.summary,
                f"``{spec.family}``" if spec.family else "",
                f'``"{spec.default_surrogate}"``' if spec.default_surrogate else "",
                accepted,
            ]
        )
    return header, rows


def _estimator_rows() -> tuple[list[str], list[list[str]]]:
    import torch

    from hardgrad import estimators

    header = [
        "Name",
        "Class",
        "Family",
        "Unbiased",
        "Distributions",
        "Default ``num_samples``",
        "``f`` evaluations per sample",
        "Notes",
    ]
    rows = []
    for name, cls in estimators.ESTIMATORS.items():
        # The default instance: some settings (RELAX's evaluations, Reinforce's minimum
        # sample count) are properties of the instance, not of the class.
        instance = estimators.get(name)
        dists = getattr(cls, "dists", ("bernoulli", "categorical"))
        notes = [_first_line(cls)]
        unbiased = "yes" if cls.unbiased else "no"
        if isinstance(instance, estimators.Exact):
            family = "exact enumeration"
            unbiased = "exact (no variance)"
            default = "``None`` (every configuration)"
            evaluations = "one per configuration"
        elif cls.pathwise:
            family = "pathwise"
            default = "1"
            evaluations = str(instance.evaluations_per_sample)
        else:
            family = "score function"
            assert isinstance(instance, estimators.ScoreFunctionEstimator)
            default = str(instance.default_num_samples())
            evaluations = str(instance.evaluations_per_sample)
            if instance.min_samples > 1:
                notes.append(f"``num_samples`` >= {instance.min_samples}.")
            if instance.sample_multiple > 1:
                notes.append(f"``num_samples`` a multiple of {instance.sample_multiple}.")
        if not cls.discrete:
            notes.append("Relaxed values, not discrete samples.")
        if isinstance(instance, torch.nn.Module):
            trained = any(True for _ in instance.parameters())
            notes.append(
                "An ``nn.Module`` with trainable parameters." if trained else "An ``nn.Module``."
            )
        rows.append(
            [
                f'``"{name}"``',
                f":class:`~hardgrad.estimators.{cls.__name__}`",
                family,
                unbiased,
                ", ".join(dists),
                default,
                evaluations,
                " ".join(notes),
            ]
        )
    return header, rows


_TABLES = {"surrogates": _surrogate_rows, "ops": _op_rows, "estimators": _estimator_rows}


class RegistryTable(SphinxDirective):
    """``.. registry-table:: surrogates|ops|estimators``: a table built from a registry."""

    required_arguments = 1
    has_content = False

    def run(self) -> list[nodes.Node]:
        which = self.arguments[0].strip()
        if which not in _TABLES:
            raise self.error(
                f"registry-table: expected one of {sorted(_TABLES)}, but found {which!r}"
            )
        header, rows = _TABLES[which]()
        lines = [
            f".. list-table:: {len(rows)} registered {which}",
            "   :header-rows: 1",
            "   :class: registry-table",
            "",
        ]
        for row in [header, *rows]:
            first, *rest = row
            lines.append(f"   * - {_cell(first)}")
            lines.extend(f"     - {_cell(cell)}" for cell in rest)
        return _parse_rst("\n".join(lines), self.state.document, f"<registry-table {which}>")


def _parse_rst(text: str, document: nodes.document, source: str) -> list[nodes.Node]:
    """Parse reStructuredText into nodes, whichever parser (rst or MyST) reads the page.

    A directive's own ``nested_parse`` uses the page's parser, so on a Markdown page the
    rst table would be read as Markdown. The docstrings the rows quote are rst, hence a
    separate rst parse with the page's settings (Sphinx's roles stay available, and the
    cross-references it creates are resolved with the rest of the page).
    """
    sub = new_document(source, document.settings)
    RSTParser().parse(text, sub)
    return list(sub.children)


def _draw_surrogate_curves(path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import torch

    from hardgrad import surrogates

    names = surrogates.SURROGATES.names()
    columns = 2
    rows = (len(names) + columns - 1) // columns
    x = torch.linspace(-3.0, 3.0, 1201, dtype=torch.float64)
    fig, axes = plt.subplots(rows, columns, figsize=(8.0, 2.1 * rows), sharex=True, squeeze=False)
    for ax, name in zip(axes.flat, names, strict=False):
        surrogate = surrogates.get(name)
        ax.axhline(0.0, color="0.85", linewidth=0.8)
        ax.axvline(0.0, color="0.85", linewidth=0.8)
        ax.plot(x.numpy(), surrogate.function(x).numpy(), label="$s(x)$", color="C0")
        ax.plot(
            x.numpy(), surrogate.derivative(x).numpy(), label="$s'(x)$", color="C3", linestyle="--"
        )
        ax.set_title(f'"{name}": {surrogate!r}', fontsize=9)
        ax.tick_params(labelsize=8)
    for ax in list(axes.flat)[len(names) :]:
        ax.set_visible(False)
    axes.flat[0].legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    # No timestamps in the metadata: the file is identical from one build to the next.
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)


def _on_builder_inited(app: Sphinx) -> None:
    path = Path(app.srcdir) / CURVES_PATH
    try:
        _draw_surrogate_curves(path)
    except ImportError as error:  # matplotlib is an optional extra
        logger.info("registry_tables: surrogate curves skipped (%s)", error)


class SurrogateCurves(SphinxDirective):
    """``.. surrogate-curves::``: the figure drawn at build start."""

    has_content = False
    option_spec: ClassVar[dict[str, Any]] = {"width": directives.unchanged}

    def run(self) -> list[nodes.Node]:
        if not (Path(self.env.srcdir) / CURVES_PATH).exists():
            paragraph = nodes.paragraph(text="(The curves are drawn when matplotlib is installed.)")
            return [paragraph]
        image = nodes.image(
            uri="/" + CURVES_PATH,
            alt="s(x) and s'(x) of every registered surrogate",
            width=self.options.get("width", "100%"),
        )
        caption = nodes.caption(
            text="Solid: s(x), the smooth function; dashed: s'(x), what backward multiplies "
            "the incoming gradient by. Default parameters; drawn from the registry at build time."
        )
        figure = nodes.figure("", image, caption)
        return [figure]


def _resolve_reexport(
    app: Sphinx, env: Any, node: Any, contnode: nodes.Element
) -> nodes.Element | None:
    """Let ``hardgrad.round`` (the re-export) link to ``hardgrad.ops.round`` (documented).

    Docstrings and guides name ops the way users call them, ``hg.<op>``; the reference
    documents each op once, under :mod:`hardgrad.ops`.
    """
    if node.get("refdomain") != "py":
        return None
    target = node.get("reftarget", "")
    if not target.startswith("hardgrad.") or target.count(".") != 1:
        return None
    from hardgrad import ops

    name = target.split(".", 1)[1]
    if name not in ops.__all__:
        return None
    domain = env.get_domain("py")
    resolved: nodes.Element | None = domain.resolve_xref(
        env, node["refdoc"], app.builder, node["reftype"], f"hardgrad.ops.{name}", node, contnode
    )
    return resolved


def _check_registries_documented(app: Sphinx, env: Any) -> None:
    """Warn (an error under ``-W``) when a registered op, surrogate or estimator has no API
    entry."""
    from hardgrad import estimators, ops, surrogates

    documented = env.get_domain("py").objects
    expected = [f"hardgrad.ops.{spec.op.__name__}" for _, spec in ops.OPS.items()]
    expected += [f"hardgrad.surrogates.{cls.__name__}" for _, cls in surrogates.SURROGATES.items()]
    expected += [f"hardgrad.estimators.{cls.__name__}" for _, cls in estimators.ESTIMATORS.items()]
    for name in expected:
        if name not in documented:
            logger.warning(
                "registry_tables: %s is registered but not documented; add it to the "
                "API reference in docs/api/",
                name,
            )


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("registry-table", RegistryTable)
    app.add_directive("surrogate-curves", SurrogateCurves)
    app.connect("builder-inited", _on_builder_inited)
    app.connect("missing-reference", _resolve_reexport)
    app.connect("env-check-consistency", _check_registries_documented)
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": True}
