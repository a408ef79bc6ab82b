"""``audit()`` in context: what is never a problem, what is found that used to be missed,
suppression, names and paths, and the command line's ``--all``/``--ignore``.

The models here are minimal on purpose; the realistic ones are in
``tests/diagnostics/audit_corpus`` (``test_audit_corpus.py``).
"""

from __future__ import annotations

import inspect
import os
import runpy
import sys
import textwrap
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor, nn
from torch.distributions import Bernoulli, Categorical

import hardgrad as hg
from hardgrad.bench.cli import main
from hardgrad.diagnostics import AuditReport, Finding, audit
from hardgrad.diagnostics._audit._ops import display

THIS_FILE = Path(__file__).resolve()


def line_of(func: Callable[..., Any], marker: str) -> int:
    lines, start = inspect.getsourcelines(func)
    hits = [start + i for i, text in enumerate(lines) if text.rstrip().endswith(f"# <{marker}>")]
    assert len(hits) == 1, (marker, hits)
    return hits[0]


def at(report: AuditReport, line: int) -> list[Finding]:
    return [f for f in report.findings if f.line == line and Path(f.path).resolve() == THIS_FILE]


def train(step: Callable[[], Tensor], params: list[Tensor], steps: int = 2) -> None:
    optimizer = torch.optim.SGD(params, lr=0.01)
    for _ in range(steps):
        optimizer.zero_grad()
        step().backward()
        optimizer.step()


# --------------------------------------------------------------------------------------
# Never a problem.
# --------------------------------------------------------------------------------------


class Spike(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor) -> Tensor:
        ctx.save_for_backward(x)
        spikes = (x > 0).float()  # <forward>
        return spikes.round()

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tensor:
        (x,) = ctx.saved_tensors
        return grad / (1 + 10 * x.abs()).square()  # <backward>


def test_ops_inside_an_autograd_function_are_not_findings() -> None:
    layer = nn.Linear(4, 4)
    x = torch.randn(3, 4)
    with audit() as report:
        train(lambda: Spike.apply(layer(x)).sum(), list(layer.parameters()))
    assert report.findings == [], report.format(notes=True)
    assert layer.weight.grad is not None and bool(layer.weight.grad.any())


def evaluate(model: nn.Module, x: Tensor, y: Tensor) -> float:
    with torch.no_grad():
        logits = model(x)
        correct = (logits.argmax(1) == y).sum().item()
        return correct / y.numel() + logits.round().sum().item() * 0
    return 0.0


def test_no_grad_and_inference_mode_code_is_not_a_finding() -> None:
    """The old audit reported every call of an evaluation loop, down to ``numel``."""
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    x, y = torch.randn(6, 4), torch.randint(0, 3, (6,))
    with audit() as report:
        train(lambda: nn.functional.cross_entropy(model(x), y), list(model.parameters()))
        evaluate(model, x, y)
        with torch.inference_mode():
            model(x).argmax(1).tolist()
    assert report.findings == [], report.format(notes=True)


def logging_step(model: nn.Module, x: Tensor, log: list[float]) -> Tensor:
    out = model(x)
    log.append(out.mean().item())  # <item>
    log.append(float(out.max().detach()))  # <detach>
    return out.square().mean()


def test_logging_is_not_a_finding() -> None:
    model = nn.Linear(4, 2)
    x, log = torch.randn(5, 4), []
    with audit() as report:
        train(lambda: logging_step(model, x, log), list(model.parameters()))
    assert at(report, line_of(logging_step, "item")) == []
    assert all(f.severity == "note" for f in report.findings), report.format(notes=True)
    assert not report


class Ste(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: Tensor) -> Tensor:
        h = self.fc(x)
        q = h + (torch.round(h * 4) / 4 - h).detach()  # <trick>
        return q * h.sign().detach()  # <sign_detach>


def test_the_detach_trick_and_stop_gradients_are_notes() -> None:
    model = Ste()
    x = torch.randn(3, 4)
    with audit() as report:
        train(lambda: model(x).square().sum(), list(model.parameters()))
    assert not report, str(report)
    trick = at(report, line_of(Ste.forward, "trick"))
    assert [f.severity for f in trick] == ["note"], report.format(notes=True)
    assert "hg.straight_through(" in trick[0].suggestion
    assert "one_hot_argmax" not in report.format(notes=True)


def test_a_no_grad_teacher_is_not_reported_without_an_optimizer_either() -> None:
    teacher, student = nn.Linear(4, 3), nn.Linear(4, 3)
    x = torch.randn(5, 4)
    with audit() as report:
        with torch.no_grad():
            target = teacher(x).softmax(-1)
        (student(x).log_softmax(-1) * target).sum().backward()
    assert report.findings == [], report.format(notes=True)


def test_a_layer_that_learns_only_on_some_steps_is_not_reported() -> None:
    """Gradients are checked after every backward, not only at the end: a mixture-of-
    experts expert that one batch does not pick still learned on another."""
    experts = nn.ModuleList([nn.Linear(3, 3), nn.Linear(3, 3)])
    optimizer = torch.optim.SGD(experts.parameters(), lr=0.1)
    with audit() as report:
        for step in range(2):
            optimizer.zero_grad(set_to_none=True)
            experts[step](torch.randn(2, 3)).sum().backward()
            optimizer.step()
    assert report.findings == [], report.format(notes=True)


def test_a_zero_initialised_layer_is_a_note_not_a_problem() -> None:
    """LoRA's B starts at zero, so A's first gradient is all zero: nothing is cut."""
    a, b = nn.Linear(6, 2, bias=False), nn.Linear(2, 6, bias=False)
    nn.init.zeros_(b.weight)
    x = torch.randn(4, 6)
    with audit() as report:
        (b(a(x)) - 1).square().sum().backward()
    assert not report, str(report)
    (note,) = report.notes
    assert note.kind == "no_gradient" and "all-zero" in note.op and "Linear.weight" in note.op


class InitReads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.used, self.spare = nn.Linear(3, 3), nn.Linear(3, 3)
        self.spare.weight.data.normal_()  # <init>

    def forward(self, x: Tensor) -> Tensor:
        return self.used(x)


def build_and_run() -> AuditReport:
    with audit() as report:
        model = InitReads()
        model(torch.randn(2, 3)).sum().backward()  # <call>
    return report


def test_a_parameter_read_outside_the_forward_is_not_the_cause() -> None:
    """``.data`` at initialisation does not cut anything; the unused layer is reported
    where the model was called."""
    report = build_and_run()
    assert {f.line for f in report.problems} == {line_of(build_and_run, "call")}
    assert at(report, line_of(InitReads.__init__, "init")) == []


def test_data_written_on_a_plain_tensor_is_not_noted() -> None:
    """An adversarial perturbation updated through ``.data`` is not a weight swap."""
    model = nn.Linear(4, 2)
    x = torch.randn(3, 4)
    delta = torch.zeros_like(x, requires_grad=True)
    with audit() as report:
        for _ in range(2):
            model(x + delta).sum().backward()
            delta.data = (delta + 0.1 * delta.grad.sign()).clamp(-0.1, 0.1)
    assert report.findings == [], report.format(notes=True)


# --------------------------------------------------------------------------------------
# Found now (each used to be missed).
# --------------------------------------------------------------------------------------


class DataSign(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: Tensor) -> Tensor:
        return nn.functional.linear(x, self.fc.weight.data.sign(), self.fc.bias)  # <data>


def test_sign_through_data_in_the_forward_is_found_at_its_line() -> None:
    model = DataSign()
    x = torch.randn(3, 4)
    with audit() as report:
        train(lambda: model(x).square().sum(), list(model.parameters()))
    (problem,) = report.problems
    assert problem.line == line_of(DataSign.forward, "data")
    assert problem.op == "Tensor.data" and problem.kind == "graph_cut"
    assert "DataSign.fc.weight" in problem.detail and "hg.sign" in problem.suggestion


def policy_step(policy: nn.Module, x: Tensor, which: str) -> Tensor:
    logits = policy(x)
    if which == "bernoulli":
        draw = torch.bernoulli(torch.sigmoid(logits))  # <bernoulli>
    elif which == "multinomial":
        draw = torch.multinomial(logits.softmax(-1), 1).float()  # <multinomial>
    elif which == "poisson":
        draw = torch.poisson(logits.exp())  # <poisson>
    elif which == "bernoulli_":
        p = torch.sigmoid(logits)
        draw = torch.empty_like(p).bernoulli_(p)  # <bernoulli_>
    elif which == "Categorical":
        draw = Categorical(logits=logits).sample().float()  # <Categorical>
    else:
        draw = Bernoulli(logits=logits).sample()  # <Bernoulli>
    return (draw - 0.5).square().sum() + 0 * x.sum()


@pytest.mark.parametrize(
    "which", ["bernoulli", "multinomial", "poisson", "bernoulli_", "Categorical", "Bernoulli"]
)
def test_random_draws_without_an_estimator_are_found(which: str) -> None:
    policy = nn.Linear(4, 3)
    x = torch.randn(5, 4, requires_grad=True)  # the loss must have a gradient somewhere
    with audit() as report:
        train(lambda: policy_step(policy, x, which), list(policy.parameters()))
    (problem,) = [f for f in report.problems if f.kind != "no_gradient"]
    assert problem.line == line_of(policy_step, which), report
    assert problem.kind == "graph_cut" and problem.count == 2
    assert "hg.bernoulli" in problem.suggestion or "log_prob" in problem.suggestion
    if which in ("Categorical", "Bernoulli"):
        assert problem.op == f"{which}.sample"


def reinforce(policy: nn.Module, x: Tensor) -> Tensor:
    dist = Categorical(logits=policy(x))
    action = dist.sample()  # <sample>
    return -(dist.log_prob(action) * (action == 1).float()).mean()


def test_a_draw_trained_through_log_prob_is_a_note() -> None:
    policy = nn.Linear(4, 3)
    x = torch.randn(5, 4)
    with audit() as report:
        train(lambda: reinforce(policy, x), list(policy.parameters()))
    assert not report, str(report)
    (note,) = at(report, line_of(reinforce, "sample"))
    assert note.severity == "note" and note.op == "Categorical.sample" and note.count == 2


def test_bare_tensors_that_never_get_a_gradient_are_found_where_they_were_made() -> None:
    x = torch.randn(4, 3)
    with audit() as report:
        w = torch.randn(3, 2, requires_grad=True)
        unused = torch.zeros(2, requires_grad=True)  # <unused>
        (x @ w).sum().backward()
    (problem,) = report.problems
    assert problem.kind == "no_gradient" and problem.line == line_of(
        test_bare_tensors_that_never_get_a_gradient_are_found_where_they_were_made, "unused"
    )
    assert problem.op == "tensor unused: grad is None"
    assert w.grad is not None and unused.grad is None


def test_backward_of_a_tensor_without_grad_names_the_cut() -> None:
    layer = nn.Linear(3, 1)
    x = torch.randn(4, 3)
    with audit() as report, pytest.raises(RuntimeError, match="does not require grad"):
        out = layer(x)
        (out.detach() * 2).sum().backward()  # <backward>
    here = line_of(test_backward_of_a_tensor_without_grad_names_the_cut, "backward")
    kinds = sorted((f.kind, f.op) for f in report.problems if f.line == here)
    assert kinds == [
        ("graph_cut", "Tensor.detach"),
        ("no_gradient", "backward() of a tensor that does not require grad"),
    ], report


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda t: t.data, "Tensor.data"),
        (lambda t: setattr(t, "data", t.data), "Tensor.data ="),
        (lambda t: t**2, "Tensor.pow"),
        (lambda t: 2**t, "operator **"),
        (lambda t: t > 0, "operator >"),
        (lambda t: t.round(), "Tensor.round"),
        (lambda t: torch.round(t), "torch.round"),
        (lambda t: t[0], "operator [...]"),
    ],
)
def test_op_names_are_what_the_user_wrote(call: Callable[[Tensor], Any], name: str) -> None:
    """No more ``torch.get``, ``torch.set`` or ``torch._tensor.pow``."""
    seen: list[str] = []

    class Names(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            seen.append(display(func))
            return func(*args, **(kwargs or {}))

    t = torch.randn(3)
    with Names():
        call(t)
    assert name in seen or (name == "operator >" and "Tensor.gt" in seen), seen
    assert not any(s.startswith(("torch.get", "torch.set", "torch._tensor")) for s in seen), seen


# --------------------------------------------------------------------------------------
# Suppression.
# --------------------------------------------------------------------------------------


class TwoProblems(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(3, 3), nn.Linear(3, 3)

    def forward(self, x: Tensor) -> Tensor:
        r = torch.round(self.a(x))  # <round>
        s = torch.sign(self.b(x))  # <sign>
        return (r + s).sum()


def two_problems(**kwargs: Any) -> AuditReport:
    model = TwoProblems()
    with audit(**kwargs) as report:
        model(torch.randn(2, 3)).backward()
    return report


@pytest.mark.parametrize(
    ("ignore", "left"),
    [
        (None, {"round", "sign"}),
        ("torch.round", {"sign"}),
        ("round", {"sign"}),
        ("round, sign", set()),
        (["zero_gradient"], set()),
        ("graph_cut", {"round", "sign"}),
        (f"{THIS_FILE.name}:{line_of(TwoProblems.forward, 'sign')}", {"round"}),
        (f"{THIS_FILE}:{line_of(TwoProblems.forward, 'round')}", {"sign"}),
        (f"tests/diagnostics/{THIS_FILE.name}", set()),
        ("other_file.py", {"round", "sign"}),
    ],
)
def test_ignore_by_kind_op_location_or_file(ignore: Any, left: set[str]) -> None:
    report = two_problems(ignore=ignore)
    assert {f.op.split(".")[-1] for f in report.problems} == left, report
    # What a suppressed cause cuts off stays explained: a note, not a problem.
    assert all(f.severity == "note" for f in report.of_kind("no_gradient"))


def test_ignore_rejects_what_is_not_a_string() -> None:
    with pytest.raises(TypeError, match="ignore must hold strings"), audit(ignore=[3]):  # type: ignore[list-item]
        pass


MARKED = textwrap.dedent(
    """\
    import torch


    def run():
        layer = torch.nn.Linear(3, 3)
        h = layer(torch.randn(2, 3))
        a = torch.round(h)  # hardgrad: ignore
        b = torch.sign(h)  # hardgrad: ignore[graph_cut]
        c = torch.floor(h)  # hardgrad: ignore[floor, Tensor.detach]
        d = torch.ceil(h)  # HARDGRAD: Ignore[zero_gradient]
        (a + b + c + d).sum().backward()
    """
)


def test_inline_markers(tmp_path: Path) -> None:
    script = tmp_path / "marked.py"
    script.write_text(MARKED)
    run = runpy.run_path(str(script))["run"]
    with audit() as report:
        run()
    # Only sign is left: its marker names another kind.
    assert [(f.op, f.line) for f in report.problems] == [("torch.sign", 8)], report


# --------------------------------------------------------------------------------------
# Command line: --all, --ignore, paths as the script was named.
# --------------------------------------------------------------------------------------

HELPER = "import torch\n\n\ndef quantize(x):\n    return torch.round(x * 4) / 4\n"
SCRIPT = textwrap.dedent(
    """\
    import torch
    from helpers import quantize

    layer = torch.nn.Linear(3, 3)
    spare = torch.nn.Linear(3, 3)
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
    for _ in range(2):
        optimizer.zero_grad()
        h = layer(torch.randn(2, 3))
        y = h + (torch.sign(h) - h).detach()
        (quantize(h) + y).sum().backward()
        optimizer.step()
    """
)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    (tmp_path / "helpers.py").write_text(HELPER)
    (tmp_path / "train.py").write_text(SCRIPT)
    monkeypatch.chdir(tmp_path)
    sys.modules.pop("helpers", None)
    yield tmp_path
    sys.modules.pop("helpers", None)  # the script imported it from tmp_path


def test_cli_prints_problems_by_default_and_notes_with_all(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["audit", "train.py"]) == 0
    out = capsys.readouterr().out
    assert "helpers.py:5: zero_gradient: torch.round (x2)" in out  # relative, like train.py
    assert str(project) not in out
    assert "1 note" in out and "--all" in out
    assert "Tensor.detach" not in out
    assert main(["audit", "--all", "train.py"]) == 0
    out = capsys.readouterr().out
    assert "train.py:10: note: graph_cut: Tensor.detach (x2)" in out
    assert "hg.sign(x, surrogate='identity')" in out  # the detach trick's exact form


def test_cli_ignore_and_absolute_paths(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = str(project / "train.py")
    assert main(["audit", "--ignore", "round", "--ignore", "zero_gradient", script]) == 0
    out = capsys.readouterr().out
    assert "no problems found" in out
    assert main(["audit", script]) == 0
    out = capsys.readouterr().out
    assert f"{project / 'helpers.py'}:5" in out  # absolute, like the script


# --------------------------------------------------------------------------------------
# The watcher never fails the user's code.
# --------------------------------------------------------------------------------------


def test_a_failure_inside_the_watcher_never_reaches_the_user(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from hardgrad.diagnostics._audit import _recorder as _audit_recorder

    def broken(*args: Any, **kwargs: Any) -> None:
        raise ValueError("the watcher is broken")

    monkeypatch.setattr(_audit_recorder.Recorder, "before", broken)
    layer = nn.Linear(3, 3)
    w = torch.randn(3, requires_grad=True)
    with audit() as report:
        out = torch.round(layer(w)).sum() + w.detach().sum()
        out.backward()
    assert torch.equal(out.detach(), (torch.round(layer(w)).sum() + w.sum()).detach())
    assert isinstance(report, AuditReport)


def test_results_with_and_without_audit_are_bit_identical_on_the_corpus_patterns() -> None:
    def run(audited: bool) -> list[Tensor]:
        torch.manual_seed(0)
        model = Ste()
        policy = nn.Linear(4, 3)
        x = torch.randn(3, 4)
        with audit() if audited else torch.enable_grad():
            train(
                lambda: model(x).square().sum() + reinforce(policy, x),
                [*model.parameters(), *policy.parameters()],
            )
        return [p.detach().clone() for p in (*model.parameters(), *policy.parameters())]

    for a, b in zip(run(False), run(True), strict=True):
        assert torch.equal(a, b)


def test_hg_ops_are_never_findings() -> None:
    layer = nn.Linear(4, 4)
    x = torch.randn(3, 4)
    g = torch.Generator().manual_seed(0)
    with audit() as report:
        train(
            lambda: (
                hg.round(layer(x)) + hg.sign(layer(x)) + hg.bernoulli(layer(x), generator=g)
            ).sum(),
            list(layer.parameters()),
        )
    assert report.findings == [], report.format(notes=True)
    assert os.path.basename(__file__) == THIS_FILE.name


def combined(heads: nn.ModuleList, x: Tensor) -> Tensor:
    losses = [head(x).square().mean() for head in heads]
    return torch.tensor(losses).sum() + x.sum()  # <copy>


def test_torch_tensor_of_tensors_is_a_cut_at_its_line() -> None:
    heads = nn.ModuleList(nn.Linear(3, 1) for _ in range(2))
    x = torch.randn(4, 3, requires_grad=True)
    with audit() as report, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns about the scalars it copies
        train(lambda: combined(heads, x), list(heads.parameters()))
    (problem,) = report.problems
    assert problem.line == line_of(combined, "copy") and problem.kind == "graph_cut"
    assert problem.op == "torch.tensor (copy without graph)" and "torch.stack" in problem.suggestion
    assert "Linear.weight (1, 3)" in problem.detail  # two Linear layers: told apart by shape


class Recompute(torch.autograd.Function):
    """A forward that turns gradient back on (as checkpointing code does)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor) -> Tensor:
        with torch.enable_grad():
            inner = x.detach().requires_grad_()
            y = torch.sign(inner) * inner.detach()  # <inside>
        ctx.save_for_backward(x)
        return y.detach()

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tensor:
        return grad


def test_grad_enabled_code_inside_an_autograd_function_is_not_a_finding() -> None:
    layer = nn.Linear(3, 3)
    x = torch.randn(2, 3)
    with audit() as report:  # no optimizer: every tensor that requires grad is checked
        Recompute.apply(layer(x)).sum().backward()
    assert report.findings == [], report.format(notes=True)


def test_a_hard_op_under_no_grad_is_the_cause_when_it_cuts_a_trained_tensor_off() -> None:
    x = torch.randn(4, 3)
    w = torch.randn(3, 2, requires_grad=True)
    b = torch.zeros(2, requires_grad=True)
    optimizer = torch.optim.SGD([w, b], lr=0.1)
    with audit() as report:
        for _ in range(2):
            with torch.no_grad():
                binary = torch.sign(w)  # <no_grad_sign>
            optimizer.zero_grad()
            (x @ binary + b).square().sum().backward()
            optimizer.step()
            with torch.no_grad():
                w.clamp_(-1, 1)  # an update under no_grad: fine
                ranked = b.argsort()  # b learns through the loss: fine
    (problem,) = report.problems
    test = test_a_hard_op_under_no_grad_is_the_cause_when_it_cuts_a_trained_tensor_off
    assert problem.line == line_of(test, "no_grad_sign") and problem.kind == "zero_gradient"
    assert problem.op == "torch.sign under torch.no_grad()" and "hg.sign" in problem.suggestion
    assert ranked.shape == (2,)


def test_a_vq_lookup_without_the_straight_through_copy_points_to_vector_quantize() -> None:
    """The encoder trains only through the copy; without it the argmin cuts it off, and the
    fix offered keeps the VQ estimator (hg.vector_quantize), never one_hot_argmax(-d)."""
    torch.manual_seed(0)
    encoder, decoder = nn.Linear(4, 3), nn.Linear(3, 4)
    codebook = nn.Parameter(torch.randn(8, 3))
    params = [*encoder.parameters(), *decoder.parameters(), codebook]
    optimizer = torch.optim.SGD(params, lr=0.1)
    x = torch.randn(16, 4)
    with audit() as report:
        z = encoder(x)
        index = torch.cdist(z, codebook).argmin(-1)
        z_q = codebook[index]
        loss = (decoder(z_q) - x).square().mean()
        loss.backward()
        optimizer.step()
    cuts = [f for f in report.problems if "argmin" in f.op]
    assert cuts, str(report)
    assert "hg.vector_quantize" in cuts[0].suggestion
    assert "one_hot_argmax" not in cuts[0].suggestion
