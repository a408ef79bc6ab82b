"""``audit()`` per loss term: a cut that another term of the loss hides (issue 39).

A term that depends on a trained tensor only through a cut (an index, a draw, a ``.data``
read, a zero derivative) is reported even when another term gives that tensor a gradient;
a mask beside a gradient path into the same term and an explicit ``detach()`` are not; and
the graph of a step is walked at most once per backward (never for a clean step).
"""

from __future__ import annotations

import inspect

import pytest
import torch
import torch.nn.functional as F

import hardgrad as hg
from hardgrad.diagnostics import audit
from hardgrad.diagnostics._audit import _graph as _audit_graph
from hardgrad.diagnostics._audit import _terms as _audit_terms


def _line(offset: int = 0) -> int:
    frame = inspect.currentframe()
    assert frame is not None and frame.f_back is not None
    return frame.f_back.f_lineno + offset


def _problems(report):  # (kind, line) of the problems
    return {(f.kind, f.line) for f in report.problems}


def test_zero_derivative_term_hidden_by_a_regulariser_is_a_problem() -> None:
    """``round(w)`` feeds one term, a weight decay term gives ``w`` a gradient: the first
    term's gradient never reaches ``w`` (before issue 39 this was only a note)."""
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(4, 3))
    opt = torch.optim.SGD([w], lr=0.1)
    x = torch.randn(8, 3)
    with audit() as report:
        for _ in range(2):
            task = (x @ torch.round(w).t()).pow(2).mean()
            line = _line(-1)
            loss = task + 1e-3 * w.pow(2).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert _problems(report) == {("zero_gradient", line)}, report.format(notes=True)
    assert "the other terms" in report.problems[0].detail


def test_index_into_a_lookup_hidden_by_a_second_term_names_the_term() -> None:
    torch.manual_seed(0)
    encoder = torch.nn.Linear(5, 3)
    codebook = torch.nn.Parameter(torch.randn(6, 3))
    opt = torch.optim.Adam([*encoder.parameters(), codebook], lr=1e-3)
    x = torch.randn(16, 5)
    with audit() as report:
        z = encoder(x)
        idx = torch.cdist(z, codebook).argmin(-1)
        line = _line(-1)
        recon = (codebook[idx] - x[:, :3]).pow(2).mean()
        loss = recon + 0.25 * (z - codebook[idx].detach()).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert _problems(report) == {("graph_cut", line)}, report.format(notes=True)
    (problem,) = report.problems
    assert "Linear.weight" in problem.detail and "Linear.bias" in problem.detail
    assert "mseloss" not in problem.detail  # the term is named by its op: a mean here
    assert "the term made by mean" in problem.detail


def test_mask_beside_a_gradient_path_and_explicit_detach_stay_quiet() -> None:
    """A ReLU-like ``x * (x > 0)`` (the mask sits beside x's own gradient path into the
    same term) and a stop-gradient (intent) are not problems, with two terms."""
    torch.manual_seed(0)
    layer = torch.nn.Linear(4, 4)
    head = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD([*layer.parameters(), *head.parameters()], lr=0.1)
    x = torch.randn(8, 4)
    with audit() as report:
        for _ in range(2):
            h = layer(x)
            h = h * (h > 0)
            target = h.detach().mean()
            loss = (head(h) - target).pow(2).mean() + 0.1 * h.abs().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert not report.problems, report.format(notes=True)


def test_a_clean_step_is_never_walked_and_a_watched_one_once(monkeypatch) -> None:
    """The bench's MLP step (hardgrad ops only) walks no graph; a step with a user mask
    and an index walks it once per backward, the per-term walk included."""
    walks = {"graph": 0, "terms": 0}
    graph_walk, label_walk = _audit_graph._walk, _audit_terms._label_walk

    def count_graph(*args, **kwargs):
        walks["graph"] += 1
        return graph_walk(*args, **kwargs)

    def count_terms(*args, **kwargs):
        walks["terms"] += 1
        return label_walk(*args, **kwargs)

    monkeypatch.setattr(_audit_graph, "_walk", count_graph)
    monkeypatch.setattr(_audit_terms, "_label_walk", count_terms)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    x, y = torch.randn(32, 8), torch.randint(0, 4, (32,))
    with audit() as report:
        h = model[1](model[0](x))
        h = hg.clamp(hg.round(h * 4) / 4, 0.0, 2.0)
        F.cross_entropy(model[2](h), y).backward()
    assert walks == {"graph": 0, "terms": 0} and not report.findings
    with audit() as report:
        for _ in range(2):
            h = model[1](model[0](x))
            h = h * (h > 0.1)
            logits = model[2](h)
            picked = logits.gather(1, logits.argmax(1, keepdim=True))
            (F.cross_entropy(logits, y) + 0.1 * picked.mean()).backward()
    assert walks["graph"] + walks["terms"] == 2, walks  # one walk per backward
    assert not report.problems, report.format(notes=True)


@pytest.mark.parametrize("learned", [False, True])
def test_topk_gates_fixed_or_learned(learned: bool) -> None:
    """Top-k experts mixed by ``ones / k`` (the router learns only from the balancing
    loss): reported at the topk line; mixed by the top-k probabilities: clean."""
    torch.manual_seed(0)
    router = torch.nn.Linear(6, 4)
    experts = torch.nn.Parameter(torch.randn(4, 6, 6) * 0.3)
    opt = torch.optim.Adam([*router.parameters(), experts], lr=1e-3)
    x = torch.randn(10, 6)
    with audit() as report:
        probs = router(x).softmax(-1)
        top_p, top_i = probs.topk(2, dim=-1)
        line = _line(-1)
        gates = top_p / top_p.sum(-1, keepdim=True) if learned else torch.ones_like(top_p) / 2
        out = torch.einsum("nk,nkij,nj->ni", gates, experts[top_i], x)
        balance = (F.one_hot(top_i, 4).float().sum(1).mean(0) * probs.mean(0)).sum()
        loss = out.pow(2).mean() + 0.01 * balance
        opt.zero_grad()
        loss.backward()
        opt.step()
    expected = set() if learned else {("graph_cut", line)}
    assert _problems(report) == expected, report.format(notes=True)


@pytest.mark.parametrize("log_prob", [False, True])
def test_a_draw_read_by_a_critic_is_a_cut_only_without_a_log_prob_term(log_prob: bool) -> None:
    """A critic Q(s, a) reads the sampled action (its term cannot train the policy, and
    should not): with the policy's log_prob term beside it, nothing is cut; without it (an
    entropy bonus only), the draw is the problem."""
    torch.manual_seed(0)
    policy = torch.nn.Linear(4, 3)
    critic = torch.nn.Linear(7, 1)
    opt = torch.optim.Adam([*policy.parameters(), *critic.parameters()], lr=1e-3)
    s, reward = torch.randn(16, 4), torch.randn(16)
    with audit() as report:
        dist = torch.distributions.Categorical(logits=policy(s))
        action = dist.sample()
        line = _line(-1)
        q = critic(torch.cat([s, F.one_hot(action, 3).float()], -1)).squeeze(-1)
        critic_loss = (q - reward).pow(2).mean()
        advantage = (reward - q).detach()
        actor = -(advantage * dist.log_prob(action)).mean() if log_prob else 0.0
        loss = critic_loss + actor - 0.01 * dist.entropy().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    expected = set() if log_prob else {("graph_cut", line)}
    assert _problems(report) == expected, report.format(notes=True)


@pytest.mark.parametrize("straight_through", [False, True])
def test_codebook_lookup_under_no_grad(straight_through: bool) -> None:
    """The nearest code found under ``torch.no_grad()`` (distances included): without the
    straight-through copy the decoder's term reaches the encoder only through the index,
    reported at the argmin; with it, clean over a run longer than the first resolutions."""
    torch.manual_seed(0)
    enc, dec = torch.nn.Linear(8, 4), torch.nn.Linear(4, 8)
    codebook = torch.nn.Parameter(torch.randn(16, 4))
    opt = torch.optim.Adam([*enc.parameters(), *dec.parameters(), codebook], lr=1e-3)
    with audit() as report:
        for _ in range(9):
            x = torch.randn(32, 8)
            z = enc(x)
            with torch.no_grad():
                idx = torch.cdist(z, codebook).argmin(-1)
                line = _line(-1)
            z_q = codebook[idx]
            loss = F.mse_loss(z_q, z.detach()) + 0.25 * F.mse_loss(z, z_q.detach())
            if straight_through:
                z_q = z + (z_q - z).detach()
            loss = loss + F.mse_loss(dec(z_q), x)
            opt.zero_grad()
            loss.backward()
            opt.step()
    expected = set() if straight_through else {("graph_cut", line)}
    assert _problems(report) == expected, report.format(notes=True)
