r"""Top-k routing for mixtures of experts, with a chosen gradient for the router.

Papers:

* Sparsely-gated mixture of experts, top-k softmax gating: Shazeer et al. (2017),
  https://arxiv.org/abs/1701.06538.
* Switch Transformer (top-1, no renormalisation; the load-balancing loss): Fedus et al.
  (2021), https://arxiv.org/abs/2101.03961.
* Mixtral (top-2, softmax over the two selected logits): Jiang et al. (2024),
  https://arxiv.org/abs/2401.04088.
* SparseMixer (top-1): Liu, Gao & Chen (2023), https://arxiv.org/abs/2310.00811, code
  https://github.com/microsoft/SparseMixer; its top-2 form in GRIN / PhiMoE: Liu et al.
  (2024), https://arxiv.org/abs/2409.12136.
* DenseMixer (sparse forward, dense router gradient): Yao et al. (2025),
  https://fengyao.notion.site/moe-posttraining, code https://github.com/yaof20/DenseMixer.
* Noisy top-k gating (learned noise scale, the importance and load losses):
  Shazeer et al. (2017), https://arxiv.org/abs/1701.06538; reference code
  tensor2tensor ``utils/expert_utils.py``.
* The router z-loss: Zoph et al. (2022), ST-MoE, https://arxiv.org/abs/2202.08906.
* Default MoE (EMA default outputs for the unselected experts): Panda et al. (2025),
  https://arxiv.org/abs/2504.12463.
* Gumbel top-k sampling without replacement (Plackett-Luce): Kool, van Hoof & Welling
  (2019), https://arxiv.org/abs/1903.06059.

Notation, per token: router logits :math:`\theta \in \mathbb{R}^E`,
:math:`p = \operatorname{softmax}(\theta)`, the selected set :math:`S` (:math:`|S| = k`),
gates :math:`g_i` for :math:`i \in S`, the layer output :math:`y = \sum_{i \in S} g_i
E_i(x)` and :math:`c_j = \langle \partial L/\partial y, E_j(x)\rangle` (so that
:math:`\partial L/\partial g_i = c_i`).

:func:`topk_route` is the op. Its ``estimator`` picks the router gradient:

* ``"sparse"``: autograd through the selected gates only (what every framework does);
* ``"dense"``: DenseMixer. The selected experts' share of its gradient is exactly the
  sparse one; the unselected experts' share needs their outputs, which only the layer can
  give: pass the layer's output through :func:`dense_mixer` with a callable that computes
  them (called in backward only: the forward stays sparse and the extra compute is explicit).
  :class:`hardgrad.nn.MoE` does both;
* ``"sparsemixer"`` / ``"sparsemixer_v1"``: SparseMixer as published (sampled experts,
  its midpoint/Heun multipliers in forward, its backward);
* a pathwise estimator of :mod:`hardgrad.estimators` (``"st"``, ``"st_gumbel"``,
  ``"reinmax"``, ...): stochastic routing, the experts drawn by Gumbel top-k without
  replacement, each draw's one-hot carrying that estimator's gradient.

The score-function estimators (``"reinforce"``, ``"rloo"``) and exact enumeration
(``"exact"``) need the objective; they work through :func:`expectation`, which also gives
every other estimator's gradient for the same objective, so that
:func:`hardgrad.diagnostics.compare` can measure them all against the exact gradient
(``dist=hg.routing.TopK(k)``).

Auxiliary losses: :func:`load_balancing_loss` (Switch), :func:`router_z_loss` (ST-MoE) and,
for noisy top-k gating, :func:`noisy_logits`, :func:`prob_in_top_k` (the smooth load, with
the threshold that ``topk_route(..., return_threshold=True)`` returns) and
:func:`cv_squared` (the importance and load losses).

Every function refuses, naming the argument, integer or sparse logits (``TypeError``),
indices that are not dense int64 (``TypeError``) and, while validation is on
(:func:`hardgrad.set_validation`), inf or NaN logits (``ValueError``). An empty batch
(no tokens) gives empty results and zero gradients.
"""

from __future__ import annotations

from ._balance import cv_squared, load_balancing_loss, router_z_loss
from ._dense_mixer import dense_mixer, unselected_experts, unselected_gates
from ._expectation import enumerate_routes, expectation
from ._noisy import noisy_logits, prob_in_top_k
from ._settings import NORMALIZATIONS, ROUTING_ESTIMATORS, SparseMixer, TopK
from ._topk import topk_route

__all__ = [
    "NORMALIZATIONS",
    "ROUTING_ESTIMATORS",
    "SparseMixer",
    "TopK",
    "cv_squared",
    "dense_mixer",
    "enumerate_routes",
    "expectation",
    "load_balancing_loss",
    "noisy_logits",
    "prob_in_top_k",
    "router_z_loss",
    "topk_route",
    "unselected_experts",
    "unselected_gates",
]
