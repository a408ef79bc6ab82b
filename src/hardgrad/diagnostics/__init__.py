r"""Diagnostics: exact gradients, estimator quality on your objective.

* :func:`exact_gradient`: :math:`\nabla_\theta \sum_j E[f_j(b)]` by enumeration;
* :func:`gradient_samples`: independent draws of an estimator's gradient;
* :func:`compare`: bias, spread, cosine, SNR, MSE and cost of several estimators against
  the exact gradient (a :class:`Comparison`);
* :func:`compare_sequence_estimators`: the same for policy-gradient estimators over sampled
  sequences (:mod:`hardgrad.policy`: RLOO, GRPO, Dr. GRPO, ...) on your small policy and
  reward, against the exact gradient by enumeration, with standard errors;
* :func:`compare_layers`: the same figures for layers of one tensor (solver layers, sorts
  and ranks, subset samplers) against an exact or high-sample reference;
* :func:`audit`: a context manager that reports where gradient flow dies in your training
  step, with your ``file:line``: *problems* (something that should be trained gets no
  gradient, with the cause and a fix that keeps your estimator) and *notes* (deliberate
  stop-gradients and the like);
* :func:`probe`: autograd's derivative at chosen points next to the one-sided difference
  quotients, with kinks and autograd's convention there.

Diagnostics use the ops, samplers and :func:`hardgrad.expectation`; nothing there imports
them back.
"""

from ._audit import AuditReport, Finding, audit
from ._compare import Comparison, ComparisonRow, compare, compare_layers
from ._compare_sequences import compare_sequence_estimators
from ._gradients import exact_gradient, gradient_samples
from ._probe import ProbePoint, ProbeReport, probe
from ._sequences import SequenceComparison, SequenceComparisonRow

__all__ = [
    "AuditReport",
    "Comparison",
    "ComparisonRow",
    "Finding",
    "ProbePoint",
    "ProbeReport",
    "SequenceComparison",
    "SequenceComparisonRow",
    "audit",
    "compare",
    "compare_layers",
    "compare_sequence_estimators",
    "exact_gradient",
    "gradient_samples",
    "probe",
]
