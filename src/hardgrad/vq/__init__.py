r"""Vector quantization with a chosen gradient, and the lookup-free quantizers FSQ and LFQ.

Papers:

* VQ-VAE and the straight-through codebook lookup: van den Oord et al. (2017),
  https://arxiv.org/abs/1711.00937.
* The rotation trick: Fifty et al. (2024), https://arxiv.org/abs/2410.06424.
* Gumbel-softmax over codes (DALL-E's dVAE style): Jang et al. (2017),
  https://arxiv.org/abs/1611.01144; the pathwise estimators of :mod:`hardgrad.estimators`.
* Finite scalar quantization (FSQ): Mentzer et al. (2023), https://arxiv.org/abs/2309.15505.
* Lookup-free quantization (LFQ) and its entropy loss, MAGVIT-v2: Yu et al. (2023),
  https://arxiv.org/abs/2310.05737.

:func:`vector_quantize` is the op: the nearest codebook row, exactly, with the gradient to
the encoder output ``z`` chosen by ``estimator``. The codebook never gets a gradient
through ``z_q``: it learns through its own loss (``||sg[z] - z_q||^2``) or an exponential
moving average, as :class:`hardgrad.nn.VectorQuantize` does. :func:`fsq` and :func:`lfq`
quantize without a learned codebook; :func:`codebook_usage` gives the usual health metrics.

Every function takes dense (strided) floating tensors and refuses, naming the argument,
integer or sparse ones (``TypeError``) and, while validation is on
(:func:`hardgrad.set_validation`), inf or NaN values (``ValueError``). Empty batches give
empty results (and zero gradients). Half-precision inputs are computed in float32 inside
(distances, the rotation, FSQ's bounding, LFQ's entropies), and results of the input's
dtype rounded once.

The package, one concern per module: ``_search`` (the nearest-code search and its
distances), ``_rotation`` (the rotation trick), ``_quantize`` (:func:`vector_quantize`
and its estimators), ``_usage`` (:func:`codebook_usage`), ``_fsq`` and ``_lfq``, over
``_common`` (the shared checks and layout helpers). The modules with a learned codebook
(its loss, EMA, dead-code restarts, k-means init) are in :mod:`hardgrad.nn`.
"""

from __future__ import annotations

# (``name as name``: re-exported though not in ``__all__``, for hardgrad.nn's modules)
from . import _quantize, _search
from ._common import _check_choice as _check_choice
from ._common import _check_codebook as _check_codebook
from ._common import _check_indices as _check_indices
from ._common import _compute_dtype as _compute_dtype
from ._common import _flatten as _flatten
from ._common import code_back as code_back
from ._common import code_last as code_last
from ._common import code_last_shape as code_last_shape
from ._fsq import _check_levels as _check_levels
from ._fsq import _checked_fsq as _checked_fsq
from ._fsq import fsq, fsq_codes_to_indices, fsq_indices_to_codes
from ._lfq import LFQ_EXACT_BITS as LFQ_EXACT_BITS
from ._lfq import _lfq_entropy as _lfq_entropy
from ._lfq import lfq, lfq_entropy, lfq_indices_to_codes
from ._quantize import EstimatorLike as EstimatorLike
from ._quantize import _resolve_estimator as _resolve_estimator
from ._quantize import vector_quantize
from ._rotation import rotation_gradient
from ._search import _nearest as _nearest
from ._search import _nearest_rows as _nearest_rows
from ._search import nearest_code
from ._usage import codebook_usage
from ._usage import usage_from_counts as usage_from_counts

__all__ = [
    "DISTANCES",
    "VQ_ESTIMATORS",
    "codebook_usage",
    "fsq",
    "fsq_codes_to_indices",
    "fsq_indices_to_codes",
    "lfq",
    "lfq_entropy",
    "lfq_indices_to_codes",
    "nearest_code",
    "rotation_gradient",
    "vector_quantize",
]

#: The gradient estimators of :func:`vector_quantize` by name (an estimator instance from
#: :mod:`hardgrad.estimators` selects the stochastic one with its settings).
VQ_ESTIMATORS = _quantize.VQ_ESTIMATORS
#: The distances :func:`vector_quantize` can use.
DISTANCES = _search.DISTANCES
