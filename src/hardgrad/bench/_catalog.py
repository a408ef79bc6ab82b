"""Every public name of hardgrad, grouped by family (private).

The families are the one hand-written part: a title, the guides that explain them and the
modules whose definitions belong to them. Which names each family holds is read from the
package itself (every public submodule's ``__all__`` and each object's ``__module__``), so
``hardgrad list`` and the README's table (``python -m hardgrad.bench._catalog`` prints it;
``tests/bench/test_cli.py`` checks the README against it) name every capability, and a name
defined in a module that no family claims lands in :data:`OTHER`, which the tests refuse.
"""

from __future__ import annotations

import importlib
import inspect
import re
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Family:
    """A group of capabilities.

    Attributes:
        title: what the family does, as ``hardgrad list`` and the README show it.
        guides: the docs pages about it (``docs/<page>.md``).
        modules: module-name prefixes: a public object defined in a module starting with
            one of these belongs here (the longest prefix over all families wins); a
            constant belongs to the family of the submodule that exports it.
    """

    title: str
    guides: tuple[str, ...]
    modules: tuple[str, ...]


FAMILIES: tuple[Family, ...] = (
    Family(
        "Hard ops with a chosen backward",
        ("guides/surrogates", "guides/kinks", "api/ops"),
        ("hardgrad.ops", "hardgrad.nn._hard"),
    ),
    Family(
        "Surrogate gradients", ("guides/surrogates", "api/surrogates"), ("hardgrad.surrogates",)
    ),
    Family(
        "Quantization-aware training: LSQ fake quantization, PACT, binary and ternary layers",
        ("guides/quantization", "guides/binary"),
        (
            "hardgrad.ops._quantize",
            "hardgrad.ops._lowbit",
            "hardgrad.nn._quantize",
            "hardgrad.nn._qat",
            "hardgrad.nn._pact",
            "hardgrad.nn._binary",
        ),
    ),
    Family("Spiking networks: LIF neurons", ("guides/spiking",), ("hardgrad.nn._spiking",)),
    Family(
        "Stochastic units, gradient estimators and expectations",
        ("guides/expectations", "guides/choosing", "api/estimators"),
        (
            "hardgrad.stochastic",
            "hardgrad.estimators",
            "hardgrad.stochastic._expectation",
            "hardgrad.nn._stochastic",
            "hardgrad.nn._anneal",
        ),
    ),
    Family(
        "Policy gradients over sampled sequences: RLOO, GRPO, Dr. GRPO, KL penalties, exact gradient",
        ("guides/policy", "api/policy"),
        ("hardgrad.policy",),
    ),
    Family(
        "Vector quantization: VQ (straight-through, rotation trick, Gumbel, EMA), FSQ, LFQ",
        ("guides/vq", "api/vq"),
        ("hardgrad.vq", "hardgrad.nn._vq"),
    ),
    Family(
        "Mixture-of-experts routing",
        ("guides/moe", "api/routing"),
        ("hardgrad.routing", "hardgrad.nn._moe"),
    ),
    Family(
        "Sorting and ranking: exact with soft backwards, soft sort and rank",
        ("guides/sorting", "api/sorting"),
        ("hardgrad.sorting",),
    ),
    Family(
        "Combinatorial solvers as layers: perturbed, I-MLE, blackbox, identity",
        ("guides/solvers", "api/solvers"),
        ("hardgrad.solvers",),
    ),
    Family(
        "Random subsets and L0 gates (Hard Concrete)",
        ("guides/subsets", "api/subsets"),
        ("hardgrad.subsets", "hardgrad.gates", "hardgrad.nn._l0"),
    ),
    Family(
        "Diagnostics: audit (where gradients die), probe, compare",
        ("guides/audit", "api/diagnostics"),
        ("hardgrad.diagnostics",),
    ),
    Family(
        "Testing helpers and value checks",
        ("guides/testing", "guides/custom", "api/testing"),
        ("hardgrad.testing", "hardgrad._core.validation"),
    ),
)

#: Where a public name defined in a module no family claims lands (the tests refuse it).
OTHER = Family("Other", (), ())


@dataclass
class Entry:
    """One public name: ``path`` as a user writes it (``hg.nn.LIF``) and the object."""

    path: str
    obj: Any
    exported_by: str
    defined_in: str = field(default="")


def public_entries() -> list[Entry]:
    """Every public name of hardgrad once (top level first, then each public submodule's
    ``__all__`` in alphabetical order), less the submodules themselves and ``__version__``.

    An object exported under several names (``hg.round`` and ``hg.ops.round``) is listed
    once, under its first (shortest) path. Imports every public submodule.
    """
    import hardgrad

    entries: list[Entry] = []
    seen: set[int] = set()
    for sub in ("", *sorted(hardgrad._SUBMODULES)):
        name = f"hardgrad.{sub}" if sub else "hardgrad"
        module = importlib.import_module(name)
        for attr in getattr(module, "__all__", ()):
            if attr == "__version__" or (not sub and attr in hardgrad._SUBMODULES):
                continue
            obj = getattr(module, attr)
            named = callable(obj)  # functions and classes: one entry however often exported
            if named and id(obj) in seen:
                continue
            seen.add(id(obj))
            defined = getattr(obj, "__module__", None) if named else None
            path = f"hg.{sub}.{attr}" if sub else f"hg.{attr}"
            entries.append(Entry(path, obj, name, defined or name))
    return entries


def family_of(entry: Entry) -> Family:
    """The family whose longest module prefix matches where ``entry`` is defined."""
    best, length = OTHER, -1
    for family in FAMILIES:
        for prefix in family.modules:
            if _matches(entry.defined_in, prefix) and len(prefix) > length:
                best, length = family, len(prefix)
    return best


def _matches(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith((prefix + ".", prefix + "_"))


def by_family() -> list[tuple[Family, list[Entry]]]:
    """Every public name in its family, in :data:`FAMILIES`' order (then :data:`OTHER`,
    when it holds anything)."""
    groups: dict[str, list[Entry]] = {f.title: [] for f in (*FAMILIES, OTHER)}
    for entry in public_entries():
        groups[family_of(entry).title].append(entry)
    return [(f, groups[f.title]) for f in (*FAMILIES, OTHER) if groups[f.title] or f is not OTHER]


def plain(text: str) -> str:
    """reStructuredText roles and literals as plain text: ``:math:`x` `` -> ``x``."""
    text = re.sub(r":[a-z]+:`~?([^`]*)`", r"\1", text)
    return text.replace("``", "")


def summary(obj: Any) -> str:
    """A one-line description: a docstring's first paragraph, or a constant's choices."""
    if isinstance(obj, tuple | frozenset) and all(isinstance(x, str) for x in obj):
        return "choices: " + ", ".join(obj)
    names = getattr(obj, "names", None)
    if callable(names) and not inspect.isclass(obj):  # a Registry
        return "registry: " + ", ".join(names())
    paragraph = (inspect.getdoc(obj) or "").strip().split("\n\n")[0]
    return plain(" ".join(line.strip() for line in paragraph.splitlines()))


README_BEGIN = "<!-- families: generated by `python -m hardgrad.bench._catalog`; do not edit -->"
README_END = "<!-- end of families -->"


def readme_table() -> str:
    """The README's table: per family, its public names and its guides."""
    lines = [README_BEGIN, "", "| family | names | guides |", "| --- | --- | --- |"]
    for family, entries in by_family():
        names = ", ".join(f"`{e.path}`" for e in entries)
        guides = ", ".join(f"[{g.split('/')[-1]}](docs/{g}.md)" for g in family.guides)
        lines.append(f"| {family.title} | {names} | {guides} |")
    lines += ["", README_END]
    return "\n".join(lines)


if __name__ == "__main__":
    print(readme_table())
