"""hardgrad.diagnostics: audit(), the ``hardgrad audit`` command, compare(), exact_gradient(),
gradient_samples() and probe().

* ``audit()``: every hard op, graph cut and parameter without gradient of a small leaky model
  is reported with its kind, op, ``file:line`` (found by marker comments in this file, never
  hard-coded) and count; a clean model reports nothing; results are bit-identical inside and
  outside the block; nothing stays installed afterwards, also when the block raises.
* ``hardgrad audit SCRIPT ARGS``: a script written into ``tmp_path``.
* ``compare()`` on the Bernoulli toy ``f(b) = (b - t)^2`` (DESIGN.md, reference problems):
  the exact gradient ``p(1-p)(1-2t)``, RLOO's and DisARM's closed-form variances and
  straight-through's predicted bias, each within 5 %; the ``Comparison`` API and bad input.
* ``exact_gradient()`` against hand-computed gradients, ``gradient_samples()``' shape,
  reproducibility and unbiasedness (z-test).
* ``probe()`` at the kinks and jumps of relu, abs, clamp, maximum, round, sqrt, heaviside.

Monte-Carlo tests are seeded (deterministic); each docstring states the false-failure rate
of its thresholds for a fresh seed. Two-sided normal tail: ``P(|Z| > 5) = 5.7e-7``.
"""

from __future__ import annotations

import inspect
import json
import math
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

import hardgrad as hg
from hardgrad.bench.cli import main
from hardgrad.diagnostics import (
    AuditReport,
    Comparison,
    ComparisonRow,
    Finding,
    ProbePoint,
    ProbeReport,
    audit,
    compare,
    exact_gradient,
    gradient_samples,
    probe,
)

THIS_FILE = Path(__file__).resolve()


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def marked_line(func: Callable[..., Any], marker: str) -> int:
    """The line number (in this file) of the one line of ``func`` ending in ``# <marker>``."""
    lines, start = inspect.getsourcelines(func)
    hits = [start + i for i, text in enumerate(lines) if text.rstrip().endswith(f"# <{marker}>")]
    assert len(hits) == 1, (marker, hits)
    return hits[0]


def split_location(finding: Finding) -> tuple[Path, int]:
    path, line = finding.location.rsplit(":", 1)
    return Path(path).resolve(), int(line)


def function_modes() -> list[Any]:
    return list(torch.overrides._get_current_function_mode_stack())


def global_pre_hooks() -> int:
    return len(torch.nn.modules.module._global_forward_pre_hooks)


# --------------------------------------------------------------------------------------
# 1. audit(): a model with every kind of problem, and a clean one.
# --------------------------------------------------------------------------------------


class Leaky(nn.Module):
    """One marked line per problem audit() must report (each hard op is the only path from
    its own layer to the loss, so that layer gets no gradient), plus a submodule never
    called."""

    def __init__(self) -> None:
        super().__init__()
        self.rounded, self.signed, self.ranked = nn.Linear(4, 3), nn.Linear(4, 3), nn.Linear(4, 3)
        self.frozen, self.gated = nn.Linear(4, 3), nn.Linear(4, 3)
        self.unused = nn.Linear(3, 3)  # never called: its parameters get no gradient

    def forward(self, x: Tensor) -> Tensor:
        rounded = torch.round(self.rounded(x))  # <round>
        signs = torch.sign(self.signed(x))  # <sign>
        index = torch.argmax(self.ranked(x), dim=-1)  # <argmax>
        frozen = self.frozen(x).detach()  # <detach>
        mask = self.gated(x) > 0  # <mask>
        picked = x.gather(-1, index.unsqueeze(-1)).squeeze(-1)
        return (rounded + signs + frozen + mask * x[:, :3]).sum() + picked.sum()


def leaky_step(model: nn.Module, x: Tensor) -> Tensor:
    loss = model(x)  # <call>
    loss.backward()
    return loss


#: marker -> (kind, a test of the op, a word the suggestion must contain, the layer it costs)
LEAKY_EXPECTED: dict[str, tuple[str, Callable[[str], bool], str, str]] = {
    "round": ("zero_gradient", lambda op: op == "torch.round", "hg.round", "rounded"),
    "sign": ("zero_gradient", lambda op: op == "torch.sign", "hg.sign", "signed"),
    "argmax": ("graph_cut", lambda op: "argmax" in op, "hg.one_hot_argmax", "ranked"),
    "detach": ("graph_cut", lambda op: op == "Tensor.detach", "hg.straight_through", "frozen"),
    "mask": (
        "zero_gradient",
        lambda op: "comparison" in op and ("gt" in op or ">" in op),
        "hg.heaviside",
        "gated",
    ),
}


@pytest.mark.parametrize("runs", [1, 2])
def test_audit_finds_every_problem_with_kind_op_line_and_count(runs: int) -> None:
    torch.manual_seed(1)
    model = Leaky()
    x = torch.randn(5, 4)
    with audit() as report:
        for _ in range(runs):
            leaky_step(model, x)
    assert isinstance(report, AuditReport)
    assert report.ops_seen > 0

    by_line: dict[int, list[Finding]] = {}
    for finding in report.problems:
        path, line = split_location(finding)
        assert path == THIS_FILE, finding
        assert finding.line == line
        assert finding.severity == "problem" and finding.is_problem
        by_line.setdefault(line, []).append(finding)

    for marker, (kind, op_ok, hint, layer) in LEAKY_EXPECTED.items():
        line = marked_line(Leaky.forward, marker)
        (finding,) = by_line.pop(line, [None])
        assert finding is not None, f"nothing reported for {marker} at line {line}\n{report}"
        assert finding.kind == kind, finding
        assert op_ok(finding.op), finding
        assert finding.count == runs, finding
        assert hint in finding.suggestion, finding
        assert f"Leaky.{layer}.weight" in finding.detail, finding  # what it costs

    # The submodule never called: both its parameters, located where the model was called.
    call = marked_line(leaky_step, "call")
    unused = by_line.pop(call, [])
    assert len(unused) == 2, unused
    assert {f.kind for f in unused} == {"no_gradient"}
    for finding, name in zip(sorted(unused, key=lambda f: f.op), ("bias", "weight"), strict=True):
        assert f"unused.{name}" in finding.op and "grad is None" in finding.op, finding
        assert finding.suggestion
    assert all(f.count == 1 for f in unused)  # parameters are checked once, after the block
    assert by_line == {}, f"unexpected problems: {by_line}"

    # The layers cut off by the five ops are notes that point to their cause.
    notes = report.notes
    assert len(notes) == 10, report.format(notes=True)
    for note in notes:
        assert note.kind == "no_gradient" and note.line == call, note
        assert "a consequence of the problem at" in note.suggestion, note
    assert {n.op.split(".")[1] for n in notes} == {"rounded", "signed", "ranked", "frozen", "gated"}

    text = str(report)
    for finding in report.problems:
        assert finding.location in text
        assert finding.suggestion in text
    assert f"(x{runs})" in text
    assert "10 notes" in text and "--all" in text  # the notes are counted, not printed
    assert all(note.suggestion not in text for note in notes)
    everything = report.format(notes=True)
    assert all(f.suggestion in everything for f in report.findings)
    counts = {kind: len(report.of_kind(kind, "problem")) for kind in ("zero_gradient", "graph_cut")}
    assert counts == {"zero_gradient": 3, "graph_cut": 2}
    assert len(report.of_kind("no_gradient", "problem")) == 2
    data = report.to_dict()
    json.dumps(data)
    assert len(data["findings"]) == len(report.findings) == 17
    assert {f["severity"] for f in data["findings"]} == {"problem", "note"}
    assert bool(report)


class Clean(nn.Module):
    """Everything here keeps (or deliberately chooses) its gradient: nothing to report."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Linear(4, 6)
        self.head = nn.Linear(6, 3)
        self.decoder = nn.Linear(3, 3)

    def forward(self, x: Tensor, y: Tensor, generator: torch.Generator) -> Tensor:
        h = torch.relu(self.encoder(x))
        q = hg.round(h) + hg.sign(h) + hg.clamp(h, min=0.0, max=1.0)
        logits = self.head(q)
        sample = hg.categorical(logits, estimator="st", generator=generator)
        weights = (y > 0).to(logits.dtype)  # a comparison on integer targets: no gradient lost
        loss = F.cross_entropy(logits, y) + (sample * F.log_softmax(logits, -1)).sum()
        loss = loss + (weights[:, None] * F.softmax(logits, dim=-1)).square().sum()
        value = hg.expectation(
            lambda b: self.decoder(b).square().sum(-1),
            logits,
            estimator="disarm",
            generator=generator,
        )
        return loss + value.sum()


def test_audit_of_a_clean_model_reports_nothing() -> None:
    torch.manual_seed(2)
    model = Clean()
    x, y = torch.randn(5, 4), torch.tensor([0, 1, 2, 1, 0])
    with audit() as report:
        for _ in range(2):
            model.zero_grad()
            model(x, y, gen(3)).backward()
    assert report.findings == [], str(report)
    assert not report
    assert report.ops_seen > 0
    assert "no problems found" in str(report)
    # The no_gradient check had something to check: every parameter got a gradient.
    for name, p in model.named_parameters():
        assert p.grad is not None and bool(p.grad.any()), name


def _run_models(audited: bool) -> list[Tensor]:
    """Loss and every parameter gradient of two steps of the leaky and the clean model."""
    torch.manual_seed(5)
    leaky, clean = Leaky(), Clean()
    x, y = torch.randn(6, 4), torch.tensor([2, 0, 1, 1, 0, 2])
    generator = gen(7)
    results: list[Tensor] = []
    with audit() if audited else torch.enable_grad():
        for _ in range(2):
            loss = (
                leaky(x)
                + clean(x, y, generator)
                + hg.bernoulli(clean.head.weight, estimator="st", generator=generator).sum()
            )
            loss.backward()
            results.append(loss.detach().clone())
    for model in (leaky, clean):
        for p in model.parameters():
            results.append(torch.zeros(0) if p.grad is None else p.grad.clone())
    return results


def test_audit_results_are_bit_identical() -> None:
    plain, audited = _run_models(False), _run_models(True)
    assert len(plain) == len(audited)
    assert sum(t.numel() for t in plain) > 50  # gradients were actually produced
    for a, b in zip(plain, audited, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(a, b)


class _BoomError(Exception):
    pass


@pytest.mark.parametrize("raises", [False, True], ids=["normal", "raises"])
def test_audit_leaves_nothing_installed(raises: bool) -> None:
    modes_before, hooks_before = function_modes(), global_pre_hooks()
    assert modes_before == []
    w = torch.randn(3, requires_grad=True)
    layer = nn.Linear(3, 3)

    def block() -> AuditReport:
        with audit() as report:
            assert len(function_modes()) == 1  # the watcher is active inside ...
            assert global_pre_hooks() == hooks_before + 1
            torch.round(layer(w))
            if raises:
                raise _BoomError("from inside the block")
        return report

    if raises:
        with pytest.raises(_BoomError, match="from inside the block"):
            block()
    else:
        report = block()
        assert [f.op for f in report.findings] == ["torch.round"]

    # ... and gone afterwards.
    assert function_modes() == []
    assert global_pre_hooks() == hooks_before
    seen: list[str] = []

    class Probe(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            seen.append(getattr(func, "__name__", repr(func)))
            return func(*args, **(kwargs or {}))

    with Probe():
        assert len(function_modes()) == 1  # only the probe
        torch.round(w)
    assert seen == ["round"]
    assert function_modes() == []


def test_audit_does_not_watch_after_the_block() -> None:
    w = torch.randn(3, requires_grad=True)
    layer = nn.Linear(3, 3)
    with audit() as report:
        torch.sign(w)
    before = (report.ops_seen, [(f.op, f.count) for f in report.findings])
    torch.round(w)
    torch.sign(w).sum()
    layer(w).sum().backward()
    assert (report.ops_seen, [(f.op, f.count) for f in report.findings]) == before


def test_audit_inside_another_function_mode_restores_it() -> None:
    seen: list[str] = []

    class Outer(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            seen.append(getattr(func, "__name__", ""))
            return func(*args, **(kwargs or {}))

    w = torch.randn(3, requires_grad=True)
    with Outer() as outer:
        with audit() as report:
            torch.round(w)
        assert function_modes() == [outer]
    assert function_modes() == []
    assert "round" in seen  # the outer mode still saw the call made inside the block
    assert [f.op for f in report.findings] == ["torch.round"]


class WithSpare(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.used, self.spare = nn.Linear(3, 1), nn.Linear(3, 3)

    def forward(self, x: Tensor) -> Tensor:
        return self.used(x)


def train_a_throwaway_model() -> None:
    model = WithSpare()
    model(torch.randn(2, 3)).sum().backward()  # <call>


@pytest.mark.parametrize("keep", [True, False], ids=["model-alive", "model-gone"])
def test_audit_reports_unused_parameters_of_a_model_gone_before_the_end(keep: bool) -> None:
    """Whether the model is still referenced when the block ends must not matter: its
    parameters never got a gradient from the backward that ran inside the block."""
    with audit() as report:
        if keep:
            model = WithSpare()
            model(torch.randn(2, 3)).sum().backward()
        else:
            train_a_throwaway_model()
    spare = report.of_kind("no_gradient")
    assert sorted(f.op.rsplit(".", 1)[-1] for f in spare) == [
        "bias: grad is None",
        "weight: grad is None",
    ], str(report)
    assert all("spare." in f.op for f in spare)
    if not keep:
        assert {f.line for f in spare} == {marked_line(train_a_throwaway_model, "call")}


def test_audit_accepts_straight_through_with_user_callables() -> None:
    """``hg.straight_through(hard, soft)`` is hardgrad's way to choose a gradient for a hard
    function the user writes: the hard callable is evaluated without gradient on purpose,
    so nothing about it is a problem to report (and ``move this computation out of
    torch.no_grad()`` would be wrong advice: the user wrote no ``no_grad``)."""
    torch.manual_seed(4)
    layer = nn.Linear(4, 3)
    x = torch.randn(5, 4)
    quarter = hg.straight_through(lambda v: torch.round(v * 4) / 4)
    smooth_sign = hg.straight_through(lambda v: torch.sign(v), lambda v: torch.tanh(2 * v))
    with audit() as report:
        loss = (quarter(layer(x)) + smooth_sign(layer(x))).square().sum()
        loss.backward()
    assert report.findings == [], str(report)
    assert layer.weight.grad is not None and bool(layer.weight.grad.any())


def test_audit_autograd_grad_is_not_a_missing_gradient() -> None:
    """Gradients taken with ``torch.autograd.grad`` (functional training loops, gradient
    penalties) do reach the parameters, although ``.grad`` stays None: they must not be
    reported as parameters that do not reach the loss."""
    torch.manual_seed(6)
    layer = nn.Linear(4, 2)
    x = torch.randn(3, 4)
    with audit() as report:
        loss = layer(x).square().sum()
        grads = torch.autograd.grad(loss, list(layer.parameters()))
    assert all(bool(g.any()) for g in grads)  # every parameter got a gradient
    assert report.of_kind("no_gradient") == [], str(report)


# --------------------------------------------------------------------------------------
# 2. audit(): the other graph cuts, all-zero gradients, no backward.
# --------------------------------------------------------------------------------------


def graph_cuts(ws: list[Tensor], layer: nn.Module, x: Tensor) -> Tensor:
    """Each tensor of ``ws`` (and the layer) reaches the loss only through one graph cut."""
    loss = ws[0].square().sum()  # a path with a gradient, so that backward runs
    loss = loss + torch.tensor(ws[1].sum().item())  # <item>
    loss = loss + torch.tensor(ws[2].tolist()).sum()  # <tolist>
    loss = loss + ws[3].long().sum()  # <long>
    loss = loss + ws[4].to(torch.int64).sum()  # <to_int64>
    loss = loss + ws[5].bool().sum()  # <bool>
    loss = loss + torch.argsort(ws[6]).sum()  # <argsort>
    loss = loss + torch.topk(ws[7], 2).indices.sum()  # <topk>
    with torch.no_grad():
        out = layer(x)  # <no_grad>
    loss = loss + out.sum()
    return loss + ws[8].to(torch.float64).sum()  # a float cast keeps the gradient


#: marker -> words the op must contain
CUT_OPS = {
    "item": ("item",),
    "tolist": ("tolist",),
    "long": ("long",),
    "to_int64": ("Tensor.to",),
    "bool": ("bool",),
    "argsort": ("argsort",),
    "topk": ("topk",),
    "no_grad": ("Linear", "no_grad"),
}


def test_audit_reports_graph_cuts_that_cost_a_trained_tensor_its_gradient() -> None:
    """Behaviour changed on purpose (issue 15): a graph cut is a problem when it is why a
    tensor that an optimizer steps gets no gradient, found at the cut's line; a module
    called under no_grad likewise. The same calls with no backward in the block (an
    evaluation) are not findings at all."""
    ws = [torch.randn(5, requires_grad=True) for _ in range(9)]
    layer = nn.Linear(5, 5)
    x = torch.randn(2, 5)
    optimizer = torch.optim.SGD([*ws, *layer.parameters()], lr=0.1)
    with audit() as report:
        optimizer.zero_grad()
        graph_cuts(ws, layer, x).backward()
        optimizer.step()
    found = {split_location(f)[1]: f for f in report.of_kind("graph_cut")}
    assert len(found) == len(report.problems) - 0, report.format(notes=True)
    for marker, words in CUT_OPS.items():
        line = marked_line(graph_cuts, marker)
        assert line in found, f"nothing reported for {marker} at line {line}\n{report}"
        finding = found.pop(line)
        assert finding.kind == "graph_cut" and finding.severity == "problem", finding
        assert all(word in finding.op for word in words), finding
        assert finding.count == 1 and finding.suggestion
    # Nothing else: no float cast, no multiplication; the tensors cut off are notes.
    assert found == {}, found
    assert all(f.severity == "note" for f in report.of_kind("no_gradient"))
    assert len(report.of_kind("no_gradient")) == 7 + 2  # ws[1:8] and the layer
    assert ws[0].grad is not None and ws[8].grad is not None

    with audit() as evaluation:
        graph_cuts(ws, layer, x)
    assert evaluation.findings == [], evaluation.format(notes=True)


def test_parameters_feeding_only_round_get_all_zero_gradient() -> None:
    torch.manual_seed(3)
    rounded, kept = nn.Linear(4, 2), nn.Linear(4, 2)
    x = torch.randn(3, 4)
    with audit() as report:
        loss = torch.round(rounded(x)).sum() + kept(x).square().sum()
        loss.backward()
    kinds = sorted((f.kind, f.op) for f in report.findings)
    assert [k for k, _ in kinds] == ["no_gradient", "no_gradient", "zero_gradient"], kinds
    zero = report.of_kind("no_gradient")
    assert all("all-zero gradient" in f.op for f in zero), zero
    assert sorted("weight" in f.op for f in zero) == [False, True]
    assert all(f.suggestion for f in zero)
    assert rounded.weight.grad is not None and not bool(rounded.weight.grad.any())

    # The same forward without a backward: the round is found, the parameters are not.
    with audit() as forward_only:
        torch.round(rounded(x)).sum()
    assert [f.kind for f in forward_only.findings] == ["zero_gradient"]


# --------------------------------------------------------------------------------------
# 3. hardgrad audit SCRIPT ARGS
# --------------------------------------------------------------------------------------

SCRIPT = textwrap.dedent(
    """\
    import sys

    import torch
    from torch import nn


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 1)
            self.spare = nn.Linear(3, 3)

        def forward(self, x):
            return self.fc(x)


    steps, code = int(sys.argv[1]), int(sys.argv[2])
    torch.manual_seed(0)
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    x = torch.randn(4, 3)
    for _ in range(steps):
        opt.zero_grad()
        out = net(x)  # CALL
        loss = (torch.round(out) - 0.5).square().mean()  # ROUND
        loss.backward()
        opt.step()
    print("script argv:", sys.argv[1:], __name__)
    if code < 0:
        raise RuntimeError("the script failed")
    sys.exit(code)
    """
)

#: The same training step inside a main() function, the usual layout of a script.
SCRIPT_IN_MAIN = textwrap.dedent(
    """\
    import sys

    import torch
    from torch import nn


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 1)
            self.spare = nn.Linear(3, 3)

        def forward(self, x):
            return self.fc(x)


    def main(steps):
        net = Net()
        x = torch.randn(4, 3)
        for _ in range(steps):
            net.zero_grad()
            out = net(x)  # CALL
            loss = (torch.round(out) - 0.5).square().mean()  # ROUND
            loss.backward()


    if __name__ == "__main__":
        main(int(sys.argv[1]))
    """
)


def _script_line(marker: str, script: str = SCRIPT) -> int:
    (line,) = [i + 1 for i, text in enumerate(script.splitlines()) if text.endswith(marker)]
    return line


@pytest.mark.parametrize(("steps", "code"), [(3, 0), (2, 7)])
def test_cli_audit_runs_a_script(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], steps: int, code: int
) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    argv_before, path_before = list(sys.argv), list(sys.path)
    assert main(["audit", str(script), str(steps), str(code), "--flag"]) == code
    assert sys.argv == argv_before and sys.path == path_before
    assert function_modes() == []
    out = capsys.readouterr().out
    assert f"script argv: ['{steps}', '{code}', '--flag'] __main__" in out
    round_at = f"{script}:{_script_line('# ROUND')}"
    call_at = f"{script}:{_script_line('# CALL')}"
    (round_line,) = [ln for ln in out.splitlines() if round_at in ln]
    assert "zero_gradient" in round_line and "torch.round" in round_line
    assert f"(x{steps})" in round_line
    spare = [ln for ln in out.splitlines() if call_at in ln and "no_gradient" in ln]
    assert len(spare) == 2 and all("spare." in ln for ln in spare), out
    # fc gets an all-zero gradient because of the round: named in the round's finding, not
    # a finding of its own (a note, not printed without --all).
    assert not any("fc." in ln and "no_gradient" in ln for ln in out.splitlines()), out
    assert "cut off behind it: Net.fc.weight, Net.fc.bias" in out
    assert "hg.round" in out  # the suggestion


def test_cli_audit_reports_unused_parameters_of_a_model_built_in_main(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The model lives in main() and is gone when the script ends: its never-used layer
    must still be reported (as it is when the model is a module-level global)."""
    script = tmp_path / "train_main.py"
    script.write_text(SCRIPT_IN_MAIN)
    assert main(["audit", str(script), "2"]) == 0
    out = capsys.readouterr().out
    round_at = f"{script}:{_script_line('# ROUND', SCRIPT_IN_MAIN)}"
    assert any(round_at in ln and "(x2)" in ln for ln in out.splitlines()), out
    call_at = f"{script}:{_script_line('# CALL', SCRIPT_IN_MAIN)}"
    spare = [ln for ln in out.splitlines() if call_at in ln and "no_gradient" in ln]
    assert len(spare) == 2 and all("spare." in ln for ln in spare), out


def test_cli_audit_script_that_raises_exits_1_and_still_reports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    assert main(["audit", str(script), "1", "-1"]) == 1
    captured = capsys.readouterr()
    assert "the script failed" in captured.err  # the traceback
    assert f"{script}:{_script_line('# ROUND')}" in captured.out  # found before it failed
    assert function_modes() == []


def test_cli_audit_missing_script_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no_such_script.py"
    assert main(["audit", str(missing)]) == 2
    assert "no_such_script.py" in capsys.readouterr().err


# --------------------------------------------------------------------------------------
# 4. compare() on the Bernoulli toy, and the Comparison API.
# --------------------------------------------------------------------------------------

T = 0.45


def toy(b: Tensor) -> Tensor:
    return (b - T).square().sum(-1)


def rloo_variance(phi: float, t: float) -> float:
    p = sigmoid(phi)
    q = 2 * p * (1 - p)
    return (1 - 2 * t) ** 2 * q * (1 - q) / 4


def disarm_variance(phi: float, t: float) -> float:
    r = 2 * sigmoid(-abs(phi))
    return 0.25 * (1 - 2 * t) ** 2 * sigmoid(abs(phi)) ** 2 * r * (1 - r)


@pytest.mark.statistical
@pytest.mark.parametrize("phi", [0.5, -1.0])
def test_compare_reproduces_the_closed_forms_on_the_toy(phi: float) -> None:
    """M = 200000 draws per estimator at t = 0.45.

    Variances (RLOO, DisARM) within 5 %: each draw is a two-point law with probability v
    (q for RLOO, r for DisARM), so the sample variance has relative standard error
    sqrt((1/(v(1-v)) - 4) / M), at most 0.0027 here (DisARM, phi = 0.5, r = 0.755): 5 % is
    18 standard errors, false-failure rate < 1e-70.
    Straight-through's relative bias within 5 % of |2(p-t)p(1-p) - g*| / |g*|: each draw is
    2(b - t)p(1-p), standard error of the relative mean 2 sqrt(p(1-p)/M) / (1 - 2t) = 0.022
    (phi = 0.5; 0.020 at phi = -1), and 5 % of the predicted 2.45 (4.62) is 5.6 (11.6)
    standard errors: false-failure rate 2e-8.
    RLOO's and DisARM's means: |z| < 5 with the closed-form variance (5.7e-7 each).
    Total over both phis: about 2.3e-6."""
    m = 200_000
    logits = torch.tensor([phi], dtype=torch.float64)
    result = compare(
        toy, logits, estimators=["rloo", "disarm", "st"], num_draws=m, generator=gen(11)
    )
    p = sigmoid(phi)
    exact = p * (1 - p) * (1 - 2 * T)
    assert result.exact is not None
    torch.testing.assert_close(result.exact, torch.tensor([exact], dtype=torch.float64))
    rows = {row.estimator: row for row in result.rows}
    assert [row.estimator for row in result.rows] == ["rloo", "disarm", "st"]

    for name, formula in (("rloo", rloo_variance), ("disarm", disarm_variance)):
        row = rows[name]
        assert row.std is not None and row.bias is not None and row.num_draws == m
        variance = (row.std * abs(exact)) ** 2  # std is relative to ||g*||
        expected = formula(phi, T)
        assert abs(variance / expected - 1) < 0.05, (name, variance, expected)
        assert row.bias * abs(exact) < 5 * math.sqrt(expected / m), (name, row.bias)
        assert row.cosine == pytest.approx(1.0)

    st = rows["st"]
    predicted = abs(2 * (p - T) * p * (1 - p) - exact) / abs(exact)
    assert st.bias is not None
    assert abs(st.bias / predicted - 1) < 0.05, (st.bias, predicted)
    st_std = 2 * p * (1 - p) * math.sqrt(p * (1 - p))  # the two-point law of 2(b-t)p(1-p)
    assert st.std is not None
    assert abs((st.std * abs(exact)) / st_std - 1) < 0.05
    assert st.cosine == pytest.approx(math.copysign(1.0, (p - T) * exact))


def test_comparison_api() -> None:
    logits = torch.tensor([0.3, -0.7], dtype=torch.float64)
    names = ["rloo", "st", "disarm"]
    result = compare(toy, logits, estimators=names, num_draws=400, generator=gen(1))
    assert isinstance(result, Comparison)
    assert [row.estimator for row in result.rows] == names
    assert all(isinstance(row, ComparisonRow) for row in result.rows)
    for row in result.rows:
        assert row.num_draws == 400 and row.seconds_per_draw > 0
        for value in (row.bias, row.std, row.cosine, row.snr, row.mse):
            assert value is not None and math.isfinite(value)
        assert row.bias is not None and row.std is not None and row.mse is not None
        # mse = bias^2 + (D-1)/D std^2 (the docstring's identity)
        assert row.mse == pytest.approx(row.bias**2 + row.std**2 * 399 / 400, rel=1e-9)
        assert -1.0 <= row.cosine <= 1.0  # type: ignore[operator]

    markdown = result.to_markdown().splitlines()
    assert len(markdown) == 2 + len(names)
    assert markdown[0].startswith("|") and "estimator" in markdown[0] and "bias" in markdown[0]
    assert set(markdown[1]) <= set("|-: ")
    for line, name in zip(markdown[2:], names, strict=True):
        assert line.startswith(f"| {name} |")

    data = result.to_dict()
    decoded = json.loads(json.dumps(data))
    assert [row["estimator"] for row in decoded["rows"]] == names
    assert decoded["exact"] == pytest.approx(exact_gradient(toy, logits).tolist())

    text = str(result)
    for name in names:
        assert name in text
    assert "bias" in text.splitlines()[0]

    categorical = compare(
        two_categoricals, CAT_LOGITS, estimators=["rloo", "st"], dist="categorical",
        num_draws=50, generator=gen(2),
    )  # fmt: skip
    assert [row.estimator for row in categorical.rows] == ["rloo", "st"]
    assert categorical.exact is not None
    torch.testing.assert_close(categorical.exact, two_categoricals_gradient(CAT_LOGITS))
    assert categorical.to_dict()["settings"]["dist"] == "categorical"

    instance = compare(toy, logits, estimators=[hg.estimators.RLOO()], num_draws=10)
    assert len(instance.rows) == 1 and "RLOO" in instance.rows[0].estimator

    # Without the exact reference: no bias, cosine or mse; std relative to the mean's norm.
    free = compare(toy, logits, estimators=names, num_draws=400, exact=False, generator=gen(1))
    assert free.exact is None and free.to_dict()["exact"] is None
    for row, with_exact in zip(free.rows, result.rows, strict=True):
        assert row.bias is None and row.cosine is None and row.mse is None
        assert row.std is not None and row.snr is not None
        assert row.snr == pytest.approx(with_exact.snr)  # same seed: the same draws
        assert row.std == pytest.approx(1 / row.snr)
    assert "-" in str(free) and json.dumps(free.to_dict())


def test_compare_zero_spread_and_zero_norms() -> None:
    """DisARM with one antithetic pair has zero variance on the toy at phi = 0 (up to the
    rounding of the mean); where a norm is exactly 0 the ratio is None, never NaN."""
    result = compare(toy, torch.zeros(1, dtype=torch.float64), estimators=["disarm"], num_draws=50)
    (row,) = result.rows
    assert row.std is not None and row.std < 1e-12
    assert row.bias is not None and row.bias < 1e-12
    assert row.mse is not None and row.mse < 1e-20

    # A constant objective: every RLOO draw is exactly 0, so the mean's norm and the spread
    # are 0, and without an exact reference std and snr have nothing to be relative to.
    def constant(b: Tensor) -> Tensor:
        return torch.ones(b.shape[0], dtype=b.dtype)

    free = compare(constant, torch.zeros(2), estimators=["rloo"], num_draws=20, exact=False)
    (row,) = free.rows
    assert row.std is None and row.snr is None
    assert row.bias is None and row.cosine is None and row.mse is None
    text = json.dumps(free.to_dict()) + str(free) + free.to_markdown()
    assert "nan" not in text.lower()


def test_compare_bad_input() -> None:
    logits = torch.zeros(1)
    with pytest.raises(TypeError, match="estimators"):
        compare(toy, logits, estimators="rloo")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="estimators"):
        compare(toy, logits, estimators=hg.estimators.RLOO())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="estimator"):
        compare(toy, logits, estimators=[])
    with pytest.raises(ValueError, match="num_draws"):
        compare(toy, logits, estimators=["rloo"], num_draws=1)
    with pytest.raises(ValueError, match="num_draws"):
        compare(toy, logits, estimators=["rloo"], num_draws=True)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"rloo|disarm|available"):
        compare(toy, logits, estimators=["no_such_estimator"])


# --------------------------------------------------------------------------------------
# 5. exact_gradient() and gradient_samples().
# --------------------------------------------------------------------------------------

BITS = torch.tensor([0.4, -1.2, 0.9], dtype=torch.float64)


def three_bits(b: Tensor) -> Tensor:
    """3 b0 b1 b2 + (b0 - 2 b2)^2 - b1 b2: not separable."""
    b0, b1, b2 = b[..., 0], b[..., 1], b[..., 2]
    return 3 * b0 * b1 * b2 + (b0 - 2 * b2) ** 2 - b1 * b2


def three_bits_gradient(phi: Tensor) -> Tensor:
    """By hand: on {0,1}, (b0 - 2 b2)^2 = b0 + 4 b2 - 4 b0 b2, so with independent bits
    E f = 3 p0 p1 p2 + p0 + 4 p2 - 4 p0 p2 - p1 p2, and d/dphi_i = dE/dp_i p_i (1 - p_i)."""
    p0, p1, p2 = (sigmoid(float(v)) for v in phi)
    de = (3 * p1 * p2 + 1 - 4 * p2, 3 * p0 * p2 - p2, 3 * p0 * p1 + 4 - 4 * p0 - p1)
    return torch.tensor([d * p * (1 - p) for d, p in zip(de, (p0, p1, p2), strict=True)],
                        dtype=torch.float64)  # fmt: skip


CAT_LOGITS = torch.tensor([[0.3, -0.5, 1.1], [-0.2, 0.8, 0.0]], dtype=torch.float64)
CAT_A = torch.tensor([[1.0, -2.0, 0.5], [0.0, 3.0, -1.0], [2.0, 1.0, -0.5]], dtype=torch.float64)
CAT_C = torch.tensor([0.7, -0.3, 1.5], dtype=torch.float64)


def two_categoricals(d: Tensor) -> Tensor:
    """D0^T A D1 + c . D0 for one-hots D0, D1 (K = 3, L = 2)."""
    d0, d1 = d[..., 0, :], d[..., 1, :]
    return torch.einsum("...k,kl,...l->...", d0, CAT_A, d1) + d0 @ CAT_C


def two_categoricals_gradient(logits: Tensor) -> Tensor:
    """E f = p0^T A p1 + c . p0; the softmax Jacobian is diag(p) - p p^T."""
    p0, p1 = logits.softmax(-1)

    def jacobian(p: Tensor) -> Tensor:
        return torch.diag(p) - torch.outer(p, p)

    return torch.stack([jacobian(p0) @ (CAT_A @ p1 + CAT_C), jacobian(p1) @ (CAT_A.T @ p0)])


def test_exact_gradient_by_hand() -> None:
    torch.testing.assert_close(
        exact_gradient(three_bits, BITS), three_bits_gradient(BITS), rtol=1e-12, atol=1e-14
    )
    got = exact_gradient(two_categoricals, CAT_LOGITS, dist="categorical")
    assert got.shape == CAT_LOGITS.shape and got.dtype == torch.float64
    torch.testing.assert_close(got, two_categoricals_gradient(CAT_LOGITS), rtol=1e-12, atol=1e-14)
    # The categorical axis first: the same problem, transposed.
    got_t = exact_gradient(
        lambda d: two_categoricals(d.transpose(-1, -2)), CAT_LOGITS.T.contiguous(),
        dist="categorical", dim=0,
    )  # fmt: skip
    torch.testing.assert_close(got_t, two_categoricals_gradient(CAT_LOGITS).T)
    # Logits that require grad are not touched.
    leaf = BITS.clone().requires_grad_()
    exact_gradient(three_bits, leaf)
    assert leaf.grad is None


def test_gradient_samples_shape_and_reproducibility() -> None:
    draws = gradient_samples(three_bits, BITS, estimator="rloo", num_draws=7, generator=gen(4))
    assert draws.shape == (7, 3) and draws.dtype == torch.float64
    again = gradient_samples(three_bits, BITS, estimator="rloo", num_draws=7, generator=gen(4))
    assert torch.equal(draws, again)
    other = gradient_samples(three_bits, BITS, estimator="rloo", num_draws=7, generator=gen(5))
    assert not torch.equal(draws, other)
    assert torch.unique(draws, dim=0).shape[0] > 1  # independent draws, not copies of one

    state = torch.get_rng_state()
    cat = gradient_samples(
        two_categoricals, CAT_LOGITS, estimator="st", dist="categorical", num_draws=5,
        generator=gen(6),
    )  # fmt: skip
    assert cat.shape == (5, *CAT_LOGITS.shape)
    assert torch.equal(torch.get_rng_state(), state)  # a generator given: global RNG untouched
    with pytest.raises(ValueError, match="num_draws"):
        gradient_samples(three_bits, BITS, estimator="rloo", num_draws=0)


def test_gradient_samples_in_several_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Draws computed in many small vectorised chunks: the same shape, every chunk drawn
    afresh (no chunk repeats another), reproducible."""
    import hardgrad.diagnostics._gradients as gradients

    monkeypatch.setattr(gradients, "CHUNK_ELEMENTS", 6)  # 2 draws of 3 logits per chunk
    draws = gradient_samples(three_bits, BITS, estimator="disarm", num_draws=41, generator=gen(8))
    assert draws.shape == (41, 3)
    assert torch.equal(
        draws,
        gradient_samples(three_bits, BITS, estimator="disarm", num_draws=41, generator=gen(8)),
    )
    chunks = [draws[i : i + 2] for i in range(0, 40, 2)]
    assert len({tuple(c.flatten().tolist()) for c in chunks}) > 10


@pytest.mark.statistical
def test_gradient_samples_rloo_mean_is_the_exact_gradient() -> None:
    """M = 20000 RLOO draws (2 samples each) on the 3-bit and the categorical objective: per
    coordinate |z| < 5 with the sample variance, 3 + 6 coordinates: false-failure rate
    9 * 5.7e-7 = 5e-6. (The estimates have finite support, so the normal approximation is
    good at this M.)"""
    m = 20_000
    for f, logits, dist in (
        (three_bits, BITS, "bernoulli"),
        (two_categoricals, CAT_LOGITS, "categorical"),
    ):
        draws = gradient_samples(f, logits, estimator="rloo", dist=dist, num_draws=m,
                                 generator=gen(21))  # fmt: skip
        assert draws.shape == (m, *logits.shape)
        exact = exact_gradient(f, logits, dist=dist)
        z = (draws.mean(0) - exact) / (draws.std(0) / math.sqrt(m))
        assert bool((z.abs() < 5).all()), (dist, z)


# --------------------------------------------------------------------------------------
# 6. probe()
# --------------------------------------------------------------------------------------


def one_point(fn: Callable[[Tensor], Tensor], x: float) -> ProbePoint:
    (point,) = probe(fn, [x]).points
    assert point.point == x
    return point


def test_probe_relu_kink_uses_the_left_derivative() -> None:
    p = one_point(torch.relu, 0.0)
    assert p.kink and not p.jump
    assert p.autograd == 0.0 and p.left == pytest.approx(0.0) and p.right == pytest.approx(1.0)
    assert p.value == 0.0
    assert p.convention == "left derivative"


def test_probe_abs_uses_the_mean() -> None:
    p = one_point(torch.abs, 0.0)
    assert p.kink and not p.jump and p.autograd == 0.0
    assert p.left == pytest.approx(-1.0) and p.right == pytest.approx(1.0)
    assert p.convention.startswith("mean")


def test_probe_clamp_and_maximum() -> None:
    report = probe(lambda x: x.clamp(0, 1), [0.0, 1.0, 0.5])
    at0, at1, inside = report.points
    assert at0.kink and at0.autograd == 1.0 and at0.convention == "right derivative"
    assert at1.kink and at1.autograd == 1.0 and at1.convention == "left derivative"
    assert not inside.kink and inside.autograd == 1.0 and inside.convention == "derivative"
    assert report.kinks == [at0, at1]

    p = one_point(lambda x: torch.maximum(x, torch.zeros_like(x)), 0.0)
    assert p.kink and p.autograd == 0.5
    assert p.convention.startswith("mean")


def test_probe_round_jump_and_smooth_sin() -> None:
    p = one_point(torch.round, 0.5)
    assert p.jump and p.kink and p.autograd == 0.0
    assert p.convention.startswith("zero")
    assert p.right > 1e3  # the quotient grows like 1/eps across the jump
    flat = one_point(torch.round, 0.2)
    assert not flat.jump and not flat.kink and flat.autograd == 0.0

    points = [-2.0, -0.5, 0.0, 0.3, 1.0, 2.5]
    report = probe(torch.sin, points)
    assert report.kinks == []
    for x, p in zip(points, report.points, strict=True):
        assert not p.kink and not p.jump and p.convention == "derivative"
        assert p.autograd == pytest.approx(math.cos(x), abs=1e-12)
        assert p.value == pytest.approx(math.sin(x), abs=1e-15)
        assert p.left == pytest.approx(math.cos(x), abs=1e-3)
        assert p.right == pytest.approx(math.cos(x), abs=1e-3)


def test_probe_sqrt_and_heaviside() -> None:
    p = one_point(torch.sqrt, 0.0)
    assert p.autograd == math.inf and p.convention == "infinite"

    heaviside = probe(lambda x: torch.heaviside(x, torch.tensor(0.5, dtype=x.dtype)), [0.0, 1.0])
    at0, at1 = heaviside.points
    assert at0.jump and at0.autograd is None
    assert at0.convention.startswith("no gradient")
    assert at1.autograd is None and at1.convention.startswith("no gradient") and not at1.kink
    assert heaviside.kinks == [at0]


def test_probe_report_exports() -> None:
    report = probe(torch.relu, torch.tensor([-1.0, 0.0, 1.0]))
    assert isinstance(report, ProbeReport) and report.name == "relu"
    assert [p.point for p in report.kinks] == [0.0]
    markdown = report.to_markdown().splitlines()
    assert len(markdown) == 2 + 3
    assert "autograd" in markdown[0] and "convention" in markdown[0]
    assert "left derivative" in markdown[3]
    data = report.to_dict()
    decoded = json.loads(json.dumps(data))
    assert decoded["name"] == "relu" and len(decoded["points"]) == 3
    assert decoded["points"][1]["convention"] == "left derivative"
    assert decoded["points"][1]["kink"] is True
    text = str(report)
    assert "relu" in text and "left derivative" in text and "autograd" in text
    assert len(text.splitlines()) == 1 + 2 + 3
    # A missing autograd value and an infinite one print as words.
    assert "none" in str(probe(lambda x: torch.heaviside(x, x), [1.0]))
    assert "inf" in str(probe(torch.sqrt, [0.0]))


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"fn": 3, "points": [0.0]}, TypeError, "fn"),
        ({"fn": torch.relu, "points": [0.0], "eps": 0.0}, ValueError, "eps"),
        ({"fn": torch.relu, "points": [0.0], "eps": -1e-3}, ValueError, "eps"),
        ({"fn": torch.relu, "points": []}, ValueError, "points"),
        ({"fn": torch.relu, "points": [0.0, math.nan]}, ValueError, "points"),
        ({"fn": torch.relu, "points": [math.inf]}, ValueError, "points"),
        ({"fn": torch.relu, "points": torch.tensor([]).reshape(0, 2)}, ValueError, "points"),
    ],
)
def test_probe_bad_input(kwargs: dict[str, Any], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        probe(**kwargs)


def test_probe_points_are_float64() -> None:
    """The quotients are taken in float64 whatever the input type of the points."""
    p = one_point(lambda x: x * x, 1.0)
    assert p.autograd == 2.0
    assert p.left == pytest.approx(2.0, abs=2e-4) and p.right == pytest.approx(2.0, abs=2e-4)
    assert not p.kink
    seen: list[torch.dtype] = []
    probe(lambda x: seen.append(x.dtype) or x, torch.tensor([0.5], dtype=torch.float32))
    assert set(seen) == {torch.float64}


@pytest.mark.parametrize("x", [-1e30, -1e-30, 1e-30, 1.0, 1e15, 1e30])
@pytest.mark.parametrize(
    ("name", "fn", "derivative"),
    [
        ("square", lambda x: x * x, lambda x: 2 * x),
        ("tanh", torch.tanh, lambda x: 1 - math.tanh(x) ** 2),
        ("identity", lambda x: x, lambda x: 1.0),
        ("float32 tanh", lambda x: torch.tanh(x.float()), lambda x: 1 - math.tanh(x) ** 2),
    ],
)
def test_probe_smooth_functions_have_no_kink_at_any_magnitude(name, fn, derivative, x) -> None:
    """Regression: at |x| = 1e30 a fixed step of 1e-4 is below float64's spacing
    (x + 1e-4 == x), both quotients came out 0 and x * x was reported as differing from its
    derivative 2e30. The step is now eps * max(1, |x|) and the tolerances include the
    rounding of the values in the dtype fn returns (float32 for the last case)."""
    p = one_point(fn, x)
    assert not p.kink and not p.jump, (name, x, p)
    assert p.convention == "derivative", (name, x, p)
    expected = derivative(x)
    assert p.autograd == pytest.approx(expected, rel=1e-6, abs=1e-6)
    # The quotients agree with the derivative to about the (relative) step.
    assert p.left == pytest.approx(expected, rel=1e-3, abs=1e-3)
    assert p.right == pytest.approx(expected, rel=1e-3, abs=1e-3)


@pytest.mark.parametrize(
    ("fn", "x", "left", "right", "jump"),
    [
        (torch.abs, 0.0, -1.0, 1.0, False),
        (torch.relu, 0.0, 0.0, 1.0, False),
        (torch.round, 0.5, 0.0, None, True),
        (lambda x: torch.relu(x.float()), 0.0, 0.0, 1.0, False),
        (lambda x: (x - 1e30).abs(), 1e30, -1.0, 1.0, False),  # a kink far out
        (lambda x: torch.relu(x - 1e30), 1e30, 0.0, 1.0, False),
    ],
)
def test_probe_still_finds_real_kinks(fn, x, left, right, jump) -> None:
    p = one_point(fn, x)
    assert p.kink and p.jump == jump, p
    assert p.left == pytest.approx(left, abs=1e-6)
    if right is not None:
        assert p.right == pytest.approx(right, abs=1e-6)


@pytest.mark.parametrize(
    ("fn", "error", "match"),
    [
        (lambda x: 1.0, TypeError, r"`fn` \(<lambda>\) to return a tensor.*float 1.0"),
        (lambda x: x.item(), TypeError, r"`fn` \(<lambda>\).*returned float 0.25"),
        (lambda x: torch.stack([x, x]), ValueError, r"`fn` \(<lambda>\).*shape \(2,\)"),
        (lambda x: x.expand(3, 2), ValueError, r"`fn`.*shape \(3, 2\)"),
        (lambda x: torch.complex(x, x), TypeError, r"`fn`.*real tensor"),
    ],
)
def test_probe_names_fn_when_it_returns_a_non_scalar(fn, error, match) -> None:
    """Regression: a Python float raised AttributeError ('float' object has no attribute
    'requires_grad') and a vector torch's "only one element tensors can be converted",
    neither naming ``fn``. A Python number is rejected rather than accepted: it has no
    gradient, so there is nothing for probe to report."""
    with pytest.raises(error, match=match):
        probe(fn, [0.25])


def test_probe_accepts_a_one_element_result_of_any_shape() -> None:
    p = one_point(lambda x: torch.relu(x).reshape(1, 1), 0.0)
    assert p.kink and p.autograd == 0.0 and p.convention == "left derivative"


# --------------------------------------------------------------------------------------
# Regressions found by tests/test_properties_modules.py.
# --------------------------------------------------------------------------------------


def test_compare_bad_entry_names_the_estimators_argument() -> None:
    """A bad entry in the list raised a message naming `estimator`, not `estimators`."""
    f = lambda b: (b - 0.45).square()  # noqa: E731
    with pytest.raises(ValueError, match="`estimators`") as info:
        compare(f, torch.zeros(2), estimators=["st", "no_such_estimator"], num_draws=2)
    assert "'no_such_estimator'" in str(info.value) and "available" in str(info.value)
    with pytest.raises(TypeError, match="`estimators`"):
        compare(f, torch.zeros(2), estimators=["st", 3], num_draws=2)  # type: ignore[list-item]


@pytest.mark.parametrize("exact", [True, False])
def test_compare_of_empty_logits_reports_no_spread(exact: bool) -> None:
    """Empty logits made the variance warn ("degrees of freedom is <= 0"), an error under
    warnings-as-errors; there is nothing to vary, so the relative figures are None."""
    f = lambda b: (b - 0.45).square()  # noqa: E731
    result = compare(f, torch.zeros(0), estimators=["st", "disarm"], num_draws=3, exact=exact)
    for row in result.rows:
        assert row.std is None and row.snr is None and row.bias is None
