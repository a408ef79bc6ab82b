"""``audit()`` over long runs (issue 39): what first shows after the first few backwards (a
layer first used at a later epoch through a line its siblings share, a branch taken late)
is still found, while a long run stays cheap (occurrences are resolved ever more rarely)."""

from __future__ import annotations

import inspect

import torch
import torch.nn.functional as F

from hardgrad.diagnostics import audit


def _line(offset: int = 0) -> int:
    frame = inspect.currentframe()
    assert frame is not None and frame.f_back is not None
    return frame.f_back.f_lineno + offset


class SignLinear(torch.nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(n, n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ torch.sign(self.weight).t()


SIGN_LINE = inspect.getsourcelines(SignLinear.forward)[1] + 1


def test_layer_first_used_late_is_named_by_the_shared_line() -> None:
    torch.manual_seed(0)
    blocks = torch.nn.ModuleList(SignLinear(4) for _ in range(2))
    head = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD([*blocks.parameters(), *head.parameters()], lr=0.1)
    with audit() as report:
        for step in range(8):
            h = torch.randn(8, 4)
            for block in blocks[: 1 if step < 5 else 2]:  # the second block from step 5 on
                h = block(h)
            loss = F.cross_entropy(head(h), torch.randint(0, 2, (8,)))
            opt.zero_grad()
            loss.backward()
            opt.step()
    problems = {(f.kind, f.line) for f in report.problems}
    assert problems == {("zero_gradient", SIGN_LINE)}, report.format(notes=True)
    assert "SignLinear.weight (4, 4), SignLinear.weight (4, 4)" in report.problems[0].detail


def test_index_cut_that_starts_late_is_found() -> None:
    """A router trained by a balancing term; from step 6 on a branch dispatches by its
    argmax alone (no gate): the task term then reaches the router only through the index."""
    torch.manual_seed(0)
    router = torch.nn.Linear(5, 3)
    experts = torch.nn.Parameter(torch.randn(3, 5))
    opt = torch.optim.Adam([*router.parameters(), experts], lr=1e-3)
    with audit() as report:
        for step in range(12):
            x = torch.randn(8, 5)
            probs = router(x).softmax(-1)
            choice = probs.argmax(-1)
            line = _line(-1)
            if step < 6:  # gated by the router's probability: a gradient path
                out = probs.gather(1, choice[:, None]).squeeze(1) * (x * experts[choice]).sum(1)
            else:  # the late branch: the index alone
                out = (x * experts[choice]).sum(1)
            loss = out.pow(2).mean() + 0.01 * probs.mean(0).pow(2).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert {(f.kind, f.line) for f in report.problems} == {("graph_cut", line)}, report.format(
        notes=True
    )


def _quantize(t: torch.Tensor) -> torch.Tensor:
    return torch.round(t)


ROUND_LINE = inspect.getsourcelines(_quantize)[1] + 1


def test_function_given_to_straight_through_then_called_directly() -> None:
    """Inside ``hg.straight_through(_quantize)`` the round is meant (not watched); the same
    function called directly later is a cut (the check is not cached per function alone)."""
    import hardgrad as hg

    w = torch.nn.Parameter(torch.randn(3))
    with audit() as report:
        for _ in range(2):
            hg.straight_through(_quantize)(w).pow(2).sum().backward()
        _quantize(w).pow(2).sum().backward()
    assert {(f.kind, f.line) for f in report.problems} == {("zero_gradient", ROUND_LINE)}, (
        report.format(notes=True)
    )
