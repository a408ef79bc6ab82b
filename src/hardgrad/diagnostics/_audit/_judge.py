"""The verdicts of :func:`hardgrad.diagnostics.audit`, made when the block ends.

A *problem* is a place where gradient cannot reach something that should be trained:

* the loss's gradient runs into a zero derivative (``round``, ``sign``, a ``bernoulli``
  draw...) and the op's input has no other path to the loss;
* a trainable tensor got no gradient (``None`` or all zero), and the watched calls that
  cut the paths from it (a ``detach``, an ``argmax``, a comparison, a ``.data`` read, a
  ``.sample()``...) are named as the cause; with none, the tensor itself is reported
  (a layer that is never called, a tensor that never reaches the loss);
* ``backward()`` of a tensor that does not require grad, with what cut it.

"Should be trained": with an optimizer stepped in the block, the tensors it steps; without
one, every tensor that requires grad, except the parameters of modules that only ever ran
under ``torch.no_grad()`` (target networks, teachers, EMA copies).

Everything else that was watched is a *note* or nothing: stop-gradients whose tensor gets
its gradient by another path (the straight-through detach trick, a VQ loss's ``sg[.]``,
an RL baseline), draws whose distribution is trained through ``log_prob``, values written
through ``.data``; comparisons, indices and casts that cost nothing (masks, accuracy,
logging) are not reported at all.
"""

from __future__ import annotations

import linecache
import re
from collections.abc import Iterable

from ._leaves import Leaf
from ._ops import Family
from ._recorder import Recorder
from ._report import Finding, suppressed
from ._sites import Site

#: Which causes to name when several cut the same tensor off: the first tier that has one.
_FIRST_TIER = {
    Family.ZERO, Family.COMPARE, Family.CAST, Family.DETACH, Family.DATA_GET, Family.SAMPLE,
    Family.NO_GRAD_CALL, Family.COPY,
}  # fmt: skip
_TIERS: tuple[frozenset[Family], ...] = (
    frozenset(_FIRST_TIER),
    frozenset({Family.INDEX, Family.TUPLE_INDEX}),
    frozenset({Family.LOG}),
)
#: Deliberate-looking cuts, for which "frozen on purpose?" is worth asking.
_CUTS = {Family.DETACH, Family.DATA_GET, Family.COPY, Family.LOG}
# soft + (hard - soft).detach(), or (hard - soft).detach() + soft (also with .data); written
# with \x28 for "(" and \x5b for "[" (the docs' source pages take a backslash before
# either for math).
_NAME = r"[\w.\x5b\]]+"
_TRICK = re.compile(
    rf"(?P<soft>{_NAME})\s*\+\s*\x28\s*(?P<hard>{_NAME})\s*-\s*(?P=soft)\s*\)\s*"
    r"\.(?:detach\x28\)|data)"
    rf"|\x28\s*(?P<hard2>{_NAME})\s*-\s*(?P<soft2>{_NAME})\s*\)\s*"
    r"\.(?:detach\x28\)|data)\s*\+\s*(?P=soft2)"
)


_DATA_SET_NOTES = {
    "sign": (
        "sign (+-1)",
        "to keep this estimator inside autograd, with no .data swap or restore: "
        "hg.sign(w, surrogate='identity') in the forward (the default surrogate, 'clipped', "
        "is BinaryNet's 1[|w| <= 1])",
    ),
    "scaled sign": (
        "scaled sign (alpha * sign)",
        "to keep this estimator inside autograd, with no .data swap and no hand-made .grad: "
        "alpha * hg.sign(w) with alpha = w.abs().mean(dim=..., keepdim=True) (autograd then "
        "adds alpha's own gradient term, as XNOR-Net's update does)",
    ),
    "integer": (
        "whole-number",
        "to keep this estimator inside autograd, with no .data swap: hg.round(w) (identity "
        "straight-through) or hg.quantize(w, scale) for fake quantization",
    ),
}


def _prioritise(sites: list[Site], key: int | None = None) -> list[Site]:
    """The causes to name among the cuts of one tensor (``key``): those a loss term is
    known to depend on the tensor through, or else those whose backward an optimizer that
    holds the tensor then stepped with (a GAN's generator step, not its discriminator
    step); not a cut that lies behind another; then the first tier that has one."""
    if key is not None:
        for better in (
            [s for s in sites if key in s.term_cut],
            [s for s in sites if key in s.step_cut],
        ):
            if better:
                sites = better
                break
    keys = {s.key for s in sites}
    sites = [s for s in sites if not (s.upstream & keys)] or sites
    for tier in _TIERS:
        chosen = [s for s in sites if s.family in tier]
        if chosen:
            keys = {s.key for s in chosen}
            return [s for s in chosen if not (s.upstream & keys)] or chosen
    return []


def _names(leaves: Iterable[Leaf], limit: int = 4) -> str:
    ordered = sorted(leaves, key=lambda leaf: leaf.order)
    seen: dict[str, int] = {}
    for leaf in ordered:
        seen[leaf.label] = seen.get(leaf.label, 0) + 1
    labels = [  # the same name twice (two Linear layers called on their own): add the shape
        f"{leaf.label} {tuple(leaf.tensor.shape)}" if seen[leaf.label] > 1 else leaf.label
        for leaf in ordered
    ]
    if len(labels) > limit:
        return ", ".join(labels[:limit]) + f" and {len(labels) - limit} more"
    return ", ".join(labels)


def _trick_match(site: Site) -> re.Match[str] | None:
    path, line = site.location.rsplit(":", 1)
    return _TRICK.search(linecache.getline(path, int(line)))


def _trick_on_line(site: Site) -> bool:
    return _trick_match(site) is not None


def _after_codebook_argmin(site: Site) -> str:
    """The VQ API's advice when the detach trick copies a lookup made by an ``argmin``
    (a hand-written vector quantizer), else ""."""
    for family, op, _ in (key for key in site.upstream if len(key) == 3):
        if family is Family.INDEX and op.split(" ", 1)[0].endswith("argmin"):
            return (
                "this is a vector quantizer's straight-through copy: hg.vector_quantize(z, "
                "codebook, estimator='st') returns (z_q, indices) with this gradient (or "
                "estimator='rotation' for the rotation trick), and hg.nn.VectorQuantize(num_codes, "
                "dim, estimator='st') also keeps the codebook and commitment losses (or an EMA "
                "codebook); to keep your code as it is, "
            )
    return ""


def _trick_suggestion(site: Site) -> str:
    hard_op = site.trick[1] if site.trick else None
    if hard_op == "round":
        return (
            "hg.round(x) is this estimator (round forward, identity backward) with round's "
            "exact value: x + (x.round() - x).detach() rounds the sum in low precision"
        )
    if hard_op in ("sign", "sgn"):
        return "hg.sign(x, surrogate='identity') is this estimator with sign's exact value"
    if hard_op in ("floor", "ceil", "trunc"):
        return f"hg.{hard_op}(x) is this estimator with {hard_op}'s exact value"
    match = _trick_match(site)
    vq = _after_codebook_argmin(site)
    if match is not None:
        hard = match["hard"] or match["hard2"]
        soft = match["soft"] or match["soft2"]
        return vq + (
            f"hg.straight_through({hard})({soft}) gives the same gradient and {hard}'s value "
            "bit for bit (the sum and difference round)"
        )
    return vq + (
        "hg.straight_through(hard)(soft) gives the same gradient and hard's value bit for bit "
        "(the sum and difference round)"
    )


class Judge:
    def __init__(self, recorder: Recorder) -> None:
        self.rec = recorder
        self._grad_params: set[int] | None = None
        #: Tracked tensors that no backward in the block gave a gradient to (those made
        #: after the last backward were never asked): "grad is None" or "all-zero gradient".
        self.untrained: dict[int, str] = {}
        if recorder.backward_seen:
            for key, leaf in recorder.open.items():
                if leaf.exposed and key not in recorder.grad_inputs and leaf.tensor.requires_grad:
                    self.untrained[key] = (
                        "all-zero gradient"
                        if leaf.touched
                        else "grad is None"
                        if leaf.tensor.grad is None
                        else "no backward gave it a gradient"
                    )
        self.problems: dict[Site, set[int]] = {}
        self.details: dict[Site, str] = {}
        self.explained: dict[int, list[Site]] = {}

    @property
    def grad_params(self) -> set[int]:
        """Ids of the parameters of the modules called with gradient enabled."""
        if self._grad_params is None:
            self._grad_params = {
                id(p) for module in self.rec.grad_modules.values() for p in module.parameters()
            }
        return self._grad_params

    def should_train(self, key: int) -> bool:
        rec = self.rec
        if rec.stepped:
            return key in rec.stepped
        leaf = rec.leaves.get(key)
        return not (leaf is not None and leaf.origin == "module" and key not in self.grad_params)

    def blame(self, site: Site, keys: Iterable[int], detail: str) -> None:
        self.problems.setdefault(site, set()).update(keys)
        self.details.setdefault(site, detail)

    def leaf_names(self, keys: Iterable[int]) -> str:
        return _names(self.rec.leaves[k] for k in keys if k in self.rec.leaves)

    def decide(self) -> None:
        rec = self.rec
        sites = list(rec.sites.values())
        for site in sites:
            if site.zero_fed:
                hit = [k for k in site.starved if self.should_train(k)]
                if hit:
                    self.blame(
                        site,
                        hit,
                        "the loss's gradient reaches it and is multiplied by 0; cut off "
                        f"behind it: {self.leaf_names(hit)}",
                    )
        by_leaf: dict[int, list[Site]] = {}
        for site in sites:
            for k in site.cut:
                by_leaf.setdefault(k, []).append(site)
        for key, outcome in self.untrained.items():
            if not self.should_train(key):
                continue
            causes = _prioritise(by_leaf.get(key, []), key)
            if not causes and key not in self.grad_params:
                causes = self.no_grad_causes(key)
            for site in causes:
                self.blame(
                    site,
                    [key],
                    f"every path from these to the loss passes here ({outcome}): {{names}}",
                )
            if causes:
                self.explained[key] = causes
        for site in sites:  # a loss term that reads trained tensors only through this cut
            hit = [
                k
                for k in site.term_cut
                if self.should_train(k)
                and k not in self.untrained
                and k not in self.problems.get(site, ())
            ]
            if hit and site.family is not Family.DETACH:
                terms = " and ".join(site.terms[:2])
                self.blame(
                    site,
                    hit,
                    f"{terms} of the loss depends on these only through this op, so its "
                    "gradient never reaches them (they get gradient from the other terms "
                    "only): {names}",
                )
        if rec.failures:
            failed = [s for s in sites if s.failed and any(map(self.should_train, s.cut))]
            for site in _prioritise(failed):
                keys = [k for k in site.cut if self.should_train(k)]
                self.blame(
                    site,
                    keys,
                    "the backward was called on a tensor that does not require grad; cut off "
                    "here: {names}",
                )

    def no_grad_causes(self, key: int) -> list[Site]:
        owners = [
            s
            for s in self.rec.no_grad_sites.values()
            if s.module is not None
            and any(p is self.rec.leaves[key].tensor for p in s.module.parameters())
        ]
        # The outermost call: a module that contains the others.
        sizes = {
            id(s): sum(1 for _ in s.module.parameters()) for s in owners if s.module is not None
        }
        if not owners:
            return []
        largest = max(sizes.values())
        return [s for s in owners if sizes[id(s)] == largest][:1]

    # -- findings --------------------------------------------------------------------------
    def findings(self) -> list[tuple[int, Finding]]:
        rec = self.rec
        out: list[tuple[int, Finding]] = []
        for site, keys in self.problems.items():
            detail = self.details[site].replace("{names}", self.leaf_names(keys))
            suggestion = site.suggestion
            if site.family in _CUTS and any(k in rec.stepped for k in keys):
                suggestion += (
                    " (if they are frozen on purpose: leave them out of the optimizer, or "
                    "call .requires_grad_(False) on them)"
                )
            out.append((site.order, self.finding(site, "problem", detail, suggestion)))
        for site in rec.sites.values():
            if site in self.problems:
                continue
            note = self.site_note(site)
            if note is not None:
                out.append((site.order, self.finding(site, "note", *note)))
        for key, leaf in rec.leaves.items():
            outcome = self.untrained.get(key)
            # Not reported: what got a gradient, and what is not trained here (a target
            # network or a teacher run under no_grad, a tensor left out of the optimizer).
            if outcome is None or not (self.should_train(key) or key in self.explained):
                continue
            out.append((leaf.order, self.leaf_finding(key, leaf, outcome)))
        out.extend(self.unstepped())
        for location in dict.fromkeys(rec.failures):
            out.append(
                (
                    0,
                    Finding(
                        "no_gradient",
                        "backward() of a tensor that does not require grad",
                        location,
                        rec.failures.count(location),
                        "nothing in it has a gradient path to a trainable tensor: see the "
                        "graph cuts reported with it (torch raises 'element 0 of tensors does "
                        "not require grad')",
                        "problem",
                    ),
                )
            )
        return out

    def unstepped(self) -> list[tuple[int, Finding]]:
        """Parameters that a backward gave a gradient but that no optimizer stepped in the
        block, while optimizers did step (one finding per place they were first seen): the
        step sizes ``hg.nn.quantize_`` adds after the optimizer was made, a layer added to
        the model later, a part of the model left out of the optimizer."""
        rec = self.rec
        if not rec.stepped:
            return []
        by_place: dict[str, list[Leaf]] = {}
        for key, leaf in rec.leaves.items():
            if (
                key in rec.stepped
                or key in rec.open
                or key in rec.grad_inputs
                or not leaf.exposed
                or leaf.origin not in ("module", "tensor")
                or not leaf.tensor.requires_grad
            ):
                continue
            by_place.setdefault(leaf.location, []).append(leaf)
        out = []
        for location, leaves in by_place.items():
            keys = [id(leaf.tensor) for leaf in leaves]
            fix = (
                "pass them to the optimizer (make it after the model is complete, or "
                "optimizer.add_param_group({'params': [...]})); if they are frozen on purpose, "
                "call .requires_grad_(False) on them"
            )
            if _quantizer_scales(self.rec, keys):
                fix = (
                    "these are step sizes of hardgrad's quantizers, added by hg.nn.quantize_ "
                    "after the optimizer was made: call hg.nn.quantize_(model, ..., "
                    "optimizer=opt) to add them to that optimizer, or make the optimizer "
                    "after quantize_; otherwise " + fix
                )
            many = "s" if len(keys) > 1 else ""
            op = f"parameter{many} {self.leaf_names(keys)}: gradient but no optimizer step"
            detail = (
                "backwards gave them a gradient, but no optimizer stepped in the block holds "
                "them: they never change"
            )
            order = min(leaf.order for leaf in leaves)
            out.append((order, Finding("no_gradient", op, location, 1, fix, "problem", detail)))
        return out

    def finding(self, site: Site, severity: str, detail: str, suggestion: str) -> Finding:
        return Finding(site.kind, site.op, site.location, site.count, suggestion, severity, detail)

    def site_note(self, site: Site) -> tuple[str, str] | None:
        """(detail, suggestion) of a site that is not a problem, or None to stay silent."""
        names = self.leaf_names(site.leaves)
        if site.family is Family.DATA_SET:
            what, fix = _DATA_SET_NOTES[site.values or "integer"]
            return (
                f"{what} values written through .data: autograd does not see the op that made "
                "them, so the gradient is taken at the new values and lands on the tensor as if "
                "through the identity (a straight-through estimator)",
                fix,
            )
        if site.zero_bypassed and not site.zero_fed:
            return (
                "its derivative is 0, but its input reaches the loss by another gradient path "
                "as well (as in sign(x) * |x|); nothing is cut off",
                "if gradient should also flow through this op: " + site.suggestion,
            )
        if site.zero_fed:
            return (
                f"the loss's gradient stops here, but what lies behind it ({names}) is not "
                "trained by any optimizer stepped in the block",
                site.suggestion,
            )
        if not site.resolutions:
            if site.family is Family.ZERO and not self.rec.any_backward:
                return (
                    "no backward ran in the block, so whether this costs a gradient is not "
                    "known: run the backward inside the block",
                    site.suggestion,
                )
            return None
        if site.family is Family.DETACH:
            if (site.trick is not None and site.trick[0]) or _trick_on_line(site):
                return (
                    "the straight-through detach trick soft + (hard - soft).detach(): the "
                    "forward takes hard's value, the gradient goes to soft",
                    _trick_suggestion(site),
                )
            if not site.cut:
                return (
                    "a stop-gradient on a tensor that also reaches the loss by a gradient path "
                    "(as in a VQ loss's sg[.] or a detached reset): nothing is cut off",
                    "nothing to do if the stop-gradient is intended",
                )
            return (
                "a stop-gradient; these get their gradient by another path, or are not "
                f"trained here (an RL baseline, a target): {self.leaf_names(site.cut)}",
                "nothing to do if the stop-gradient is intended",
            )
        if site.family is Family.SAMPLE and site.leaves:
            return (
                "the draw has no gradient; these get theirs by another path (a log_prob "
                f"term, rsample) or are not trained here: {names}",
                "nothing to do if the loss has the score-function (log_prob) term",
            )
        return None

    def leaf_finding(self, key: int, leaf: Leaf, outcome: str) -> Finding:
        prefix = "parameter " if leaf.origin in ("module", "optimizer") else ""
        op = f"{prefix}{leaf.label}: {outcome}"
        causes = self.explained.get(key)
        if causes:
            where = "; ".join(f"{s.op} at {s.location}" for s in causes)
            return Finding(
                "no_gradient",
                op,
                leaf.location,
                1,
                f"a consequence of the problem at {where}: fixing that fixes this",
                "note",
            )
        if outcome == "all-zero gradient":
            # Nothing watched cut it: a zero-initialised layer after it (LoRA's B, ReZero),
            # dead ReLUs, a clamp... Worth knowing, not a broken path.
            return Finding(
                "no_gradient",
                op,
                leaf.location,
                1,
                "check what lies between it and the loss: a layer initialised to zero after "
                "it (which moves after a step), dead ReLUs, a saturated clamp",
                "note",
                "every backward in the block gave it an all-zero gradient; no watched call "
                "cut it off",
            )
        if leaf.origin == "module":
            fix = "it does not reach the loss: check for a layer that is never called, or a graph cut above"
        elif leaf.origin == "optimizer":
            fix = "an optimizer steps it, but it never reaches the loss: use it in the forward or leave it out of the optimizer"
        else:
            fix = "it never reaches the loss: use it in the forward, or create it without requires_grad=True"
        detail = "an optimizer steps it" if key in self.rec.stepped else ""
        return Finding("no_gradient", op, leaf.location, 1, fix, "problem", detail)


def _quantizer_scales(recorder: Recorder, keys: list[int]) -> bool:
    """Whether any of the tensors (by id) is a learned scale of hardgrad's quantizers."""
    from ...nn import Quantize

    wanted = set(keys)
    for module in recorder.grad_modules.values():
        for sub in module.modules():
            if isinstance(sub, Quantize) and any(id(p) in wanted for p in sub.parameters()):
                return True
    return False


def judge(recorder: Recorder, ignore: tuple[str, ...]) -> list[Finding]:
    """The findings: problems first, then notes; in each, the ops before the tensors
    without gradient, each in order of first sight. Suppressed
    ones (``ignore`` entries and ``# hardgrad: ignore`` markers) left out."""
    verdict = Judge(recorder)
    verdict.decide()
    ranked = verdict.findings()
    ranked.sort(
        key=lambda item: (item[1].severity != "problem", item[1].kind == "no_gradient", item[0])
    )
    return [f for _, f in ranked if not suppressed(f, ignore)]
