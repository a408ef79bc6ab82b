"""``audit()`` on a corpus of small, realistic models (``tests/diagnostics/audit_corpus``).

Each model reproduces a pattern of widely used public code (written here from the
pattern's description): hand-written surrogate spikes, BinaryNet's ``.data`` swap,
XNOR-Net, Gumbel hard attention, REINFORCE with and without ``log_prob``, an RL baseline,
a VQ-VAE, LSQ from detach tricks, evaluation loops, DQN targets under ``no_grad``, and
real bugs (a comparison spike, ``torch.sign`` on weights, ``torch.bernoulli`` neurons, an
encoder under ``no_grad``, features through ``.data``, an argmax router, a loss rebuilt
from ``.item()``, a forgotten bare bias; and cuts another loss term hides: a VQ-VAE without
its straight-through line (codebook loss or EMA codebook), top-k experts with fixed gates, a policy term without
``log_prob`` beside an entropy bonus, a GAN's generator step detached). ``expected.json`` lists, per model, the exact
problems (kind and tagged line), the notes that must be there and the lines that must stay
silent. The corpus is scored as a whole: every expected problem found (recall 1) and no
other problem reported (precision 1, zero false alarms).
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import runpy
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

from hardgrad.diagnostics import AuditReport, audit

CORPUS = Path(__file__).resolve().parent / "audit_corpus"
EXPECTED = json.loads((CORPUS / "expected.json").read_text())
MODELS: dict[str, dict] = EXPECTED["models"]


def tag_lines(path: Path) -> dict[str, int]:
    """Tag -> line number of the line ending in ``# <tag>``."""
    tags: dict[str, int] = {}
    for number, text in enumerate(path.read_text().splitlines(), start=1):
        stripped = text.rstrip()
        if stripped.endswith(">") and "# <" in stripped:
            tag = stripped.rsplit("# <", 1)[1][:-1]
            assert tag not in tags, (path.name, tag)
            tags[tag] = number
    return tags


def run_model(path: Path) -> AuditReport:
    """Run a corpus script as ``__main__`` under audit(), quietly (its prints, and the
    warnings torch gives user code such as ``torch.tensor(list_of_tensors)``), leaving the
    global random states as they were."""
    state = random.getstate()
    quiet = contextlib.redirect_stdout(io.StringIO())
    with torch.random.fork_rng(), quiet, warnings.catch_warnings(), audit() as report:
        warnings.simplefilter("ignore")
        runpy.run_path(str(path), run_name="__main__")
    random.setstate(state)
    return report


@dataclass
class Score:
    model: str
    expected: set[tuple[str, int]]
    found: set[tuple[str, int]]
    elsewhere: list[str] = field(default_factory=list)  # problems outside the model's file

    @property
    def hits(self) -> set[tuple[str, int]]:
        return self.expected & self.found

    @property
    def false_alarms(self) -> set[tuple[str, int]]:
        return self.found - self.expected

    @property
    def misses(self) -> set[tuple[str, int]]:
        return self.expected - self.found


_REPORTS: dict[str, AuditReport] = {}


def report_of(name: str) -> AuditReport:
    if name not in _REPORTS:
        _REPORTS[name] = run_model(CORPUS / name)
    return _REPORTS[name]


def score(name: str) -> Score:
    path = CORPUS / name
    tags = tag_lines(path)
    spec = MODELS[name]
    expected = {(kind, tags[tag]) for kind, tag in spec["problems"]}
    result = Score(name, expected, set())
    for finding in report_of(name).problems:
        if Path(finding.path).resolve() == path:
            result.found.add((finding.kind, finding.line))
        else:
            result.elsewhere.append(f"{finding.location}: {finding.kind}: {finding.op}")
    return result


def test_corpus_files_and_expectations_match() -> None:
    scripts = {p.name for p in CORPUS.glob("*.py")}
    assert scripts == set(MODELS), scripts ^ set(MODELS)
    assert len(MODELS) >= 10
    for name, spec in MODELS.items():
        tags = tag_lines(CORPUS / name)
        used = [t for _, t in spec["problems"] + spec["notes"]] + spec["silent"]
        used += list(spec.get("suggests", {}))
        assert set(used) <= set(tags), (name, set(used) - set(tags))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_corpus_model(name: str) -> None:
    """Per model: exactly the expected problems, the required notes, silent lines silent,
    and the suggestions that keep the estimator."""
    spec = MODELS[name]
    path = CORPUS / name
    tags = tag_lines(path)
    report = report_of(name)
    text = report.format(notes=True)
    result = score(name)
    assert not result.elsewhere, text
    assert result.found == result.expected, (
        f"misses {sorted(result.misses)}, false alarms {sorted(result.false_alarms)}\n{text}"
    )
    notes = {(f.kind, f.line) for f in report.notes if Path(f.path).resolve() == path}
    for kind, tag in spec["notes"]:
        assert (kind, tags[tag]) in notes, f"no {kind} note at <{tag}>\n{text}"
    for tag in spec["silent"]:
        loud = [f for f in report.findings if f.line == tags[tag]]
        assert not loud, f"<{tag}> should be silent\n{text}"
    for tag, words in spec.get("suggests", {}).items():
        at = [f for f in report.findings if f.line == tags[tag]]
        assert at, f"nothing at <{tag}>\n{text}"
        for word in words:
            assert any(word in f.suggestion for f in at), (tag, word, text)
    for words in EXPECTED["never_suggested"]:
        assert words not in text, (words, text)
    # Every problem says what to do, and where it is.
    for finding in report.problems:
        assert finding.suggestion and finding.location.count(":") >= 1


def test_corpus_precision_and_recall() -> None:
    """The corpus as a whole: recall 1 (every real problem at its line) and precision 1
    (no false alarm), with the table of what was expected and found."""
    rows = [score(name) for name in sorted(MODELS)]
    expected = sum(len(r.expected) for r in rows)
    hits = sum(len(r.hits) for r in rows)
    found = sum(len(r.found) + len(r.elsewhere) for r in rows)
    table = "\n".join(
        f"{r.model:32} expected {len(r.expected)}  found {len(r.found)}  "
        f"false alarms {len(r.false_alarms) + len(r.elsewhere)}  misses {len(r.misses)}"
        for r in rows
    )
    recall = hits / expected if expected else 1.0
    precision = hits / found if found else 1.0
    assert expected >= 8  # the corpus has real problems to find ...
    assert sum(not r.expected for r in rows) >= 8  # ... and correct models to leave alone
    assert (precision, recall) == (1.0, 1.0), table
