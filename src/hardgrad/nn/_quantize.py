r"""Fake quantization with a learned step size as a module: LSQ, Esser et al. (2020),
https://arxiv.org/abs/1902.08153.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from .. import surrogates as _surrogates
from .._core.checkpoint import SettingsInState
from .._core.compat import IS_EXPORTING_UNDER_COMPILE
from .._core.compiler import compiler_disabled
from .._core.validation import check_floating, check_int, check_positive
from ..ops._autograd import apply_function
from ..ops._quantize import quantize_step_size
from ..ops._quantize_checks import _check_in_range
from ._hard import SurrogateLike
from ._quantize_init import (
    channel_rows,
    fill_uninformative,
    gradient_scale,
    outside_transforms,
)
from ._quantize_step import _step_bounds, _StepSize
from ._sharding import accept_scalar_entry, as_scalar, copy_into, full, is_dtensor, wrapped_forward

#: ``grad_scale_elements`` choices: what :math:`N` counts in :math:`g = 1/\sqrt{N q_+}`.
GRAD_SCALE_ELEMENTS = ("per_scale", "tensor")


class Quantize(SettingsInState, nn.Module):
    r"""Fake quantization with a learned step size (LSQ), for weights or activations.

    Forward: :func:`hardgrad.quantize` with the range of ``bits``-bit integers
    (``[-2^{b-1}, 2^{b-1} - 1]`` when ``signed``, ``[-2^{b-1} + 1, 2^{b-1} - 1]`` when also
    ``narrow``, else ``[0, 2^b - 1]``), zero point 0, and the module's ``scale``: one per
    tensor, or one per channel along ``per_channel_dim``. Backward: masked straight-through
    for the input (by default; what counts as "in range" is ``in_range``, see
    :func:`hardgrad.quantize`) and the LSQ gradient for the scale, times
    :math:`g = 1/\sqrt{N q_+}`, Esser et al. (2020), https://arxiv.org/abs/1902.08153.

    **The gradient scale.** The paper sets :math:`N` to the number of elements its one step
    size scales (the layer's weights, or its features for activations), so that the step
    size's gradient, a sum over those :math:`N` elements, is balanced against each
    element's own. Per-channel scales are not in the paper; that rationale gives
    :math:`N` = the elements *per channel*, ``grad_scale_elements="per_scale"`` (the
    default). ``"tensor"`` uses all elements of the tensor, as torch's learnable
    fake-quantize kernels are usually called and as most LSQ reimplementations do; both
    agree for a per-tensor scale. For activations :math:`N` includes the batch, as in
    those reimplementations.

    **Initialisation.** The scale is set from the first non-empty batch the module sees,
    :math:`s = 2\,\overline{|x|} / \sqrt{q_+}` (per channel if ``per_channel_dim`` is set;
    averaged across ranks when ``torch.distributed`` is initialised, so DDP replicas
    agree; the mean is taken without overflow for magnitudes up to the dtype's largest
    value), unless it was given: ``init_scale`` (a number, or for per-channel scales a 1-D
    tensor with one scale per channel) or :meth:`init_from` (the same formula on a tensor
    you pass, e.g. the weights, without a forward pass). Until then it is a placeholder:
    create the optimizer before or after the first batch alike, since the parameter object
    stays the same; only an optimizer *step* before the first batch would be meaningless.
    An empty batch is passed through and leaves the scale uninitialised, and so does a batch that is all zeros, which carries no step size (its
    gradient for the scale is zero): the scale is set by the first batch with a non-zero
    value, and channels that are all zero in it take the mean scale of the others. That
    batch may come under ``torch.inference_mode`` or ``no_grad`` (calibration: the scale
    stays an ordinary parameter that trains afterwards), or under ``torch.vmap`` (the
    scale is set from all the mapped examples together, as from that batch in eager
    mode). With ``learn_scale=False`` the scale is a buffer fixed after the first batch
    (calibration). Under ``torch.compile(fullgraph=True)`` initialise first
    (``init_scale``, :meth:`init_from` or one eager batch): the first-batch initialisation
    is data-dependent and runs outside the graph. ``torch.export`` of an uninitialised
    module raises, saying so; an initialised one exports with a dynamic batch size.

    **Shapes, DDP and FSDP.** One scale is stored with shape ``(1,)`` and used as a 0-d
    tensor (``torch.distributed.fsdp.fully_shard`` refuses 0-d parameters; the values
    and gradients are those of a 0-d scale, bit for bit). Per-channel scales have shape
    ``(num_channels,)`` from the start when ``num_channels`` (or ``init_scale``) is
    given, else ``(1,)`` until the first batch sets the channel count: such a module must
    see its first batch (or :meth:`init_from`) before ``DistributedDataParallel`` or
    ``fully_shard`` wraps it, and raises if the shape would change inside them. Under
    ``fully_shard`` every scale must be initialised before sharding (``init_scale``,
    :meth:`init_from`, or one batch); a first batch under it raises. For deferred
    initialisation (``torch.device("meta")``, then ``to_empty``),
    :meth:`reset_parameters` restores the scale the module was made with.

    **Checkpoints.** The ``state_dict`` holds the scale, and its metadata what defines the
    quantizer's grid (``bits``, ``signed``, ``narrow``, ``per_channel_dim``; see
    ``hardgrad._core.checkpoint``). Loading a checkpoint saved with other settings, or a
    per-channel scale into a per-tensor module (or the reverse, or another channel count),
    raises with the key and both values instead of quantizing on another grid.
    Checkpoints without the settings (older ones, or a plain ``dict`` of the tensors) load
    when their scale's shape fits; a 0-d scale (saved before one scale was stored as
    ``(1,)``) loads into a per-tensor module.

    The step size the forward uses is the stored :math:`s` made positive and bounded,

    .. math::

        \hat s = \min\big(\max(|s|,\ s_{\min}),\ s_{\max}\big), \qquad
        \frac{\partial \hat s}{\partial s} = \operatorname{sign}(s) \quad
        (\operatorname{sign}(0) = 1),

    where :math:`s_{\min}` is the smallest positive normal number of the dtype the
    quantization is computed in (float32 for half inputs) and
    :math:`s_{\max} = (1 - \epsilon)\,\max_x / \max(|q_-|, q_+)` with :math:`\max_x` the
    largest finite value of the input's dtype, so that every level :math:`q \hat s` of the
    grid is finite in that dtype. An optimizer step that drives a learned :math:`s` to 0 or
    below (e.g. SGD with a large learning rate) therefore leaves the forward finite: a
    negative :math:`s` quantizes like :math:`|s|`. The gradient passes straight through the
    bounds and is mirrored for negative :math:`s`, so such a scale keeps learning (its
    magnitude moves as a positive scale's would).

    Args:
        bits: integer bit width (2 to 16 when signed, 1 to 16 unsigned).
        signed: signed (weights) or unsigned (post-ReLU activations) range.
        per_channel_dim: the channel dimension for per-channel scales, or None.
        learn_scale: make ``scale`` a trainable parameter.
        surrogate: ``"masked"`` (default) or ``"identity"`` backward for the input.
        narrow: the symmetric signed range :math:`[-2^{b-1} + 1, 2^{b-1} - 1]` (``bits=2``
            gives the ternary levels -1, 0, 1); signed ranges only.
        in_range: ``"rounded"`` (default, PyTorch's convention) or ``"unrounded"`` (the
            LSQ paper's): what decides "in range" for the backward; see
            :func:`hardgrad.quantize`.
        grad_scale_elements: ``"per_scale"`` (default) or ``"tensor"``: what :math:`N`
            counts in :math:`g = 1/\sqrt{N q_+}` (above).
        init_scale: the initial scale, which marks the module initialised: a positive
            number (per-tensor), or a 1-D tensor of positive scales (per-channel).
        num_channels: for per-channel scales, the number of channels (the input's size
            along ``per_channel_dim``): the scale gets its final shape at construction,
            as ``DistributedDataParallel`` and ``fully_shard`` need when they wrap the
            module before its first batch.

    Example:
        >>> import torch, hardgrad as hg
        >>> q = hg.nn.Quantize(bits=4, per_channel_dim=0)
        >>> q
        Quantize(bits=4, signed=True, per_channel_dim=0, learn_scale=True)
        >>> w = torch.tensor([[0.5, -1.0, 0.25], [2.0, 0.0, -4.0]], requires_grad=True)
        >>> q(w)
        tensor([[ 0.4410, -0.8819,  0.4410],
                [ 1.5119,  0.0000, -4.5356]], grad_fn=<_SmallLSQBackward>)
        >>> q.scale
        Parameter containing:
        tensor([0.4410, 1.5119], requires_grad=True)

        The LSQ paper's conventions, a symmetric 3-bit range and a given scale:

        >>> q = hg.nn.Quantize(bits=3, narrow=True, in_range="unrounded",
        ...                    grad_scale_elements="tensor", init_scale=0.5)
        >>> q.quant_min, q.quant_max, q.initialized
        (-3, 3, True)
        >>> q(torch.tensor([0.3, -2.0, 1.74]))
        tensor([ 0.5000, -1.5000,  1.5000], grad_fn=<_SmallLSQBackward>)
    """

    scale: Tensor

    def __init__(
        self,
        bits: int = 8,
        signed: bool = True,
        per_channel_dim: int | None = None,
        learn_scale: bool = True,
        *,
        surrogate: SurrogateLike = "masked",
        narrow: bool = False,
        in_range: str = "rounded",
        grad_scale_elements: str = "per_scale",
        init_scale: float | Tensor | None = None,
        num_channels: int | None = None,
    ) -> None:
        super().__init__()
        for flag, name in ((signed, "signed"), (learn_scale, "learn_scale"), (narrow, "narrow")):
            if not isinstance(flag, bool):
                raise TypeError(f"Expected `{name}` to be a bool, but found {type(flag).__name__}")
        if narrow and not signed:
            raise ValueError(
                "Expected `narrow` only with a signed range (it makes the range symmetric "
                "around 0), but found narrow=True with signed=False"
            )
        self.bits = check_int(bits, "bits", low=2 if signed else 1, high=16)
        self.signed = signed
        self.narrow = narrow
        self.per_channel_dim = (
            None if per_channel_dim is None else check_int(per_channel_dim, "per_channel_dim")
        )
        self.learn_scale = learn_scale
        self.surrogate = _surrogates.resolve(surrogate, family="clamp", op="Quantize")
        _check_in_range(in_range)
        self.in_range = in_range
        if grad_scale_elements not in GRAD_SCALE_ELEMENTS:
            raise ValueError(
                "Expected `grad_scale_elements` to be one of "
                f"{', '.join(map(repr, GRAD_SCALE_ELEMENTS))}, but found {grad_scale_elements!r}"
            )
        self.grad_scale_elements = grad_scale_elements
        if signed:
            self.quant_min, self.quant_max = -(2 ** (bits - 1)) + int(narrow), 2 ** (bits - 1) - 1
        else:
            self.quant_min, self.quant_max = 0, 2**bits - 1
        if num_channels is not None:
            if per_channel_dim is None:
                raise ValueError(
                    "Expected `num_channels` only with per-channel scales (`per_channel_dim` "
                    f"set), but found num_channels={num_channels!r} with per_channel_dim=None"
                )
            num_channels = check_int(num_channels, "num_channels", low=1)
        self.num_channels = num_channels
        # The given scale, or a placeholder until the first batch (made here, not copied
        # in: a module built inside a torch.func transform may not mutate .data). Shape
        # (1,) for one scale (fully_shard refuses 0-d parameters; the forward views it as
        # 0-d), (num_channels,) per channel, (1,) until the first batch without it.
        self._initialized = init_scale is not None
        self._init_values: Tensor | None = None  # init_scale, on the CPU
        if init_scale is None:
            initial = torch.ones(1 if num_channels is None else num_channels)
        else:
            given = self._check_init_scale(init_scale)
            self._init_values = given.to("cpu", torch.get_default_dtype(), copy=True)
            device = given.device if isinstance(init_scale, Tensor) else None
            if device is None or torch.get_default_device().type == "meta":
                device = torch.get_default_device()
            initial = given.to(device=device, dtype=torch.get_default_dtype(), copy=True)
        if learn_scale:
            self.scale = nn.Parameter(initial)
        else:
            self.register_buffer("scale", initial)

    @property
    def initialized(self) -> bool:
        """Whether the scale has been set (from data, ``init_scale``, or a state dict)."""
        return self._initialized

    def _check_init_scale(self, value: Any) -> Tensor:
        per_channel = self.per_channel_dim is not None
        if isinstance(value, Tensor):
            check_floating(value, "init_scale")
            if (value.dim() != 1) if per_channel else (value.numel() != 1):
                expected = "a 1-D tensor, one scale per channel" if per_channel else "one value"
                raise ValueError(
                    f"Expected `init_scale` to be {expected}, but found shape {tuple(value.shape)}"
                )
            scale = value.detach().reshape(-1)
            if per_channel and self.num_channels not in (None, scale.numel()):
                raise ValueError(
                    f"Expected `init_scale` to have num_channels={self.num_channels} scales, "
                    f"but found {scale.numel()}"
                )
        elif per_channel:
            raise ValueError(
                "Expected `init_scale` to be a 1-D tensor of one scale per channel for a "
                f"per-channel Quantize, but found {type(value).__name__}; or call init_from()"
            )
        else:
            scale = torch.tensor([check_positive(value, "init_scale")], device="cpu")
        if not bool(((scale > 0) & torch.isfinite(scale)).all()):
            raise ValueError(f"Expected `init_scale` > 0 and finite, but found {scale.tolist()}")
        return scale

    def _set_scale(self, scale: Tensor) -> None:
        if scale.shape == self.scale.shape:
            copy_into(self.scale, scale)  # in place: DDP's and FSDP's references stay valid
        else:  # a per-channel scale without `num_channels` gets its shape now
            wrapper = wrapped_forward(self) or ("fully_shard" if is_dtensor(self.scale) else "")
            if wrapper:
                raise ValueError(
                    f"Expected a per-channel Quantize under {wrapper} to know its channel "
                    f"count before the first batch (its scale cannot change shape once "
                    f"{wrapper} registered it), but found {scale.shape[0]} channels and a "
                    "placeholder scale of shape (1,): pass num_channels="
                    f"{scale.shape[0]} (or init_scale, or call init_from() or run one batch "
                    "before wrapping)"
                )
            with torch.no_grad():
                self.scale.data = scale.to(device=self.scale.device, dtype=self.scale.dtype)
        self._initialized = True

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Back to the scale the module was made with: ``init_scale`` (initialised), or
        the placeholder to be set by the first batch. With ``torch.device("meta")``
        construction and ``to_empty``, this fills the scale with real values (FSDP2's
        deferred initialisation)."""
        if self._init_values is None:
            copy_into(self.scale, torch.ones(self.scale.shape))
        else:
            copy_into(self.scale, self._init_values)
        self._initialized = self._init_values is not None

    def init_from(self, x: Tensor) -> Quantize:
        r"""Set the scale from ``x`` as the first batch would, without a forward pass:
        :math:`s = 2\,\overline{|x|}/\sqrt{q_+}` (per channel along ``per_channel_dim``),
        averaged across ranks under ``torch.distributed``. Returns the module.

        Channels of ``x`` that are all zero take the mean scale of the others. An ``x``
        that is all zero carries no step size: the scale is left as it is (with a
        warning), and an uninitialised module is then set by its first batch with a
        non-zero value.

        Example:
            >>> import torch, hardgrad as hg
            >>> layer = torch.nn.Linear(4, 2)
            >>> q = hg.nn.Quantize(bits=4, per_channel_dim=0).init_from(layer.weight)
            >>> q.initialized, q.scale.shape
            (True, torch.Size([2]))
        """
        check_floating(x, "x")
        if x.numel() == 0:
            raise ValueError("Expected a non-empty `x` to set the scale from, but found 0 elements")
        if not self._initialize(x):
            warnings.warn(
                "Quantize.init_from(x): `x` is all zeros, which gives no step size; the scale "
                f"is left as it is ({'initialised' if self._initialized else 'uninitialised'}: "
                "an uninitialised Quantize takes it from its first batch with a non-zero value)",
                UserWarning,
                stacklevel=2,
            )
        return self

    def _channel_dim(self, x: Tensor) -> int:
        dim = self.per_channel_dim
        assert dim is not None
        if not -x.dim() <= dim < x.dim():
            raise ValueError(
                f"Expected `per_channel_dim` in [{-x.dim()}, {x.dim() - 1}] for a "
                f"{x.dim()}-dim input, but found per_channel_dim={dim}"
            )
        return dim % x.dim()

    def _step_bounds(self, dtype: torch.dtype) -> tuple[float, float]:
        """``(s_min, s_max)`` for inputs of ``dtype`` (see the class docstring)."""
        return _step_bounds(dtype, self.scale.dtype, max(-self.quant_min, self.quant_max))

    def step_size(self, dtype: torch.dtype) -> Tensor:
        r"""The step size :math:`\hat s` the forward uses for inputs of ``dtype``: ``scale``
        made positive and bounded, with the gradient ``sign(scale)`` (class docstring)."""
        low, high = self._step_bounds(dtype)
        scale = self.scale if self.per_channel_dim is not None else as_scalar(self.scale)
        return apply_function(_StepSize, scale, low, high)

    @compiler_disabled  # data-dependent: outside graphs
    @torch.no_grad()
    @outside_transforms  # torch.func: reads the batch whole, computes with ordinary tensors
    def _initialize(self, x: Tensor) -> bool:
        """Set the scale from ``x``; ``False`` (scale unchanged) for all-zero data."""
        x = full(x)  # an FSDP2 shard (e.g. a sharded weight): the whole tensor
        if self.per_channel_dim is None:
            rows = channel_rows(x, None)  # (under torch.vmap: the whole batch)
        else:
            dim = self._channel_dim(x)
            if self.num_channels not in (None, x.shape[dim]):
                raise ValueError(
                    f"Expected `x` to have num_channels={self.num_channels} channels along "
                    f"per_channel_dim={self.per_channel_dim}, but found shape {tuple(x.shape)}"
                )
            rows = channel_rows(x, dim)
        finite_batch = bool(torch.isfinite(rows).all())
        mean = rows.abs().to(self.scale.dtype).mean(1)
        if finite_batch and not bool(torch.isfinite(mean).all()):
            # A finite batch whose mean overflows (magnitudes near the dtype's largest
            # value): the mean of the magnitudes relative to their peak, times the peak.
            wide = rows.abs().double()
            peak = wide.amax(1, keepdim=True)
            ratio = wide / peak.clamp_min(torch.finfo(torch.float64).tiny)
            mean = (peak * ratio.mean(1, keepdim=True)).squeeze(1)
        scale = 2 * mean / math.sqrt(self.quant_max)
        if not finite_batch:
            scale = torch.full_like(scale, math.nan)  # every rank raises below, together
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.all_reduce(scale)
            scale /= torch.distributed.get_world_size()
        if bool(torch.isnan(scale).any()):
            raise ValueError(
                "Expected a finite first batch `x` to initialise `scale`, but found inf or NaN"
            )
        filled = fill_uninformative(scale)  # all-zero channels: the others' mean scale
        if filled is None:  # all zeros: no step size to learn from; wait for data
            return False
        _, high = self._step_bounds(x.dtype)
        with torch.inference_mode(False):  # an ordinary tensor, under inference_mode too
            scale = filled.clamp(torch.finfo(self.scale.dtype).eps, high)
        self._set_scale(scale)
        return True

    def forward(self, x: Tensor) -> Tensor:
        check_floating(x, "x")
        if not self._initialized and x.numel() > 0:
            if wrapped_forward(self) == "fully_shard":
                raise ValueError(
                    "Expected a Quantize under fully_shard to be initialised before sharding "
                    "(a scale set in a forward is lost with the unsharded parameters), but "
                    "found it uninitialised: pass init_scale, call init_from(), or run one "
                    "batch before fully_shard"
                )
            if torch.compiler.is_exporting():
                # (torch 2.11 reads is_exporting() True under torch.compile too: without
                # fullgraph this raise is a graph break and the eager rerun initialises.)
                also = (
                    " (or a fullgraph torch.compile, which cannot run _initialize eagerly)"
                    if IS_EXPORTING_UNDER_COMPILE
                    else ""
                )
                raise RuntimeError(
                    f"Expected Quantize's scale to be initialised before torch.export{also} "
                    "(the first batch sets it from its values, which tracing does not have), "
                    "but found it uninitialised: run one batch through the model eagerly "
                    "first, or pass init_scale= or call init_from()"
                )
            if self.learn_scale and not isinstance(self.scale, nn.Parameter):
                # torch.func.functional_call with a stand-in tensor for the scale: setting
                # it would mark this module initialised while its own scale stays unset.
                raise RuntimeError(
                    "Expected Quantize's scale to be initialised before "
                    "torch.func.functional_call is given a stand-in tensor for it (the "
                    "module's own scale could not be set), but found it uninitialised: run "
                    "one batch through the module first, or pass init_scale= or call "
                    "init_from() (or pass the module's own parameters)"
                )
            self._initialize(x)
        scale = self.scale  # made positive and bounded inside the quantizer (step_size)
        if not self._initialized and self.per_channel_dim is not None and self.scale.numel() == 1:
            # A placeholder that the first informative batch widens to one scale per
            # channel: no gradient (nor optimizer state) of its shape (an empty or
            # all-zero batch, whose gradient for the scale is zero anyway).
            scale = scale.detach()
        per_scale = x.numel()
        if self.per_channel_dim is None:
            # One-element storage; broadcasting it gives the 0-d scale's values and
            # gradient (the same sum), only a 0-d x needs the 0-d view (a node more).
            scale = scale if x.dim() > 0 else as_scalar(scale)
        else:
            dim = self._channel_dim(x)
            shape = [1] * x.dim()
            shape[dim] = -1
            scale = scale.view(shape)
            if self.grad_scale_elements == "per_scale":
                per_scale = per_scale // max(x.shape[dim], 1)
        grad_scale = gradient_scale(per_scale, self.quant_max)  # symbolic under export
        # The step size is bounded to a valid scale for x's dtype: no value checks needed.
        return quantize_step_size(
            x,
            scale,
            quant_min=self.quant_min,
            quant_max=self.quant_max,
            identity=self.surrogate.kind == "identity",
            grad_scale=grad_scale,
            unrounded=self.in_range == "unrounded",
            step_bounds=self._step_bounds(x.dtype),
        )

    def _checkpoint_settings(self) -> dict[str, Any]:
        """What defines the quantizer's grid: stored in checkpoints, checked on load."""
        return {
            "bits": self.bits,
            "signed": self.signed,
            "narrow": self.narrow,
            "per_channel_dim": self.per_channel_dim,
        }

    def get_extra_state(self) -> dict[str, Any]:
        return {"initialized": self._initialized}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self._initialized = bool(state.get("initialized", False))

    def _checkpoint_problems(
        self, state_dict: Mapping[str, Any], prefix: str, local_metadata: Mapping[str, Any]
    ) -> list[str]:
        problems = super()._checkpoint_problems(state_dict, prefix, local_metadata)
        layout = self._scale_shape_mismatch(state_dict.get(prefix + "scale"), prefix + "scale")
        return [*problems, layout] if layout else problems

    def _prepare_to_load(self, state_dict: dict[str, Any], prefix: str) -> None:
        if self.per_channel_dim is None:  # a 0-d scale (saved before it was (1,))
            accept_scalar_entry(state_dict, prefix + "scale", self.scale)
            return
        # A per-channel scale without `num_channels` gets its shape on the first batch:
        # adopt the stored one.
        stored = state_dict.get(prefix + "scale")
        if isinstance(stored, Tensor) and stored.shape != self.scale.shape:
            with torch.no_grad():
                self.scale.data = torch.empty_like(
                    stored, device=self.scale.device, dtype=self.scale.dtype
                )

    def _scale_shape_mismatch(self, stored: Any, key: str) -> str:
        """The message for a stored scale of another layout than this module's, or ''."""
        if not isinstance(stored, Tensor):
            return ""
        if self.per_channel_dim is None and (stored.dim() > 1 or stored.numel() != 1):
            return (
                f"{key}: the checkpoint has per-channel scales of shape "
                f"{tuple(stored.shape)}, this Quantize has one scale (per_channel_dim=None)"
            )
        if self.per_channel_dim is not None and stored.dim() != 1:
            return (
                f"{key}: the checkpoint has a scale of shape {tuple(stored.shape)}, this "
                f"Quantize has one scale per channel (per_channel_dim={self.per_channel_dim})"
            )
        if (
            self.per_channel_dim is not None
            and (self._initialized or self.num_channels is not None)
            and stored.shape != self.scale.shape
        ):
            return (
                f"{key}: the checkpoint has {stored.shape[0]} channel scales, this "
                f"Quantize has {self.scale.shape[0]}"
            )
        return ""

    def extra_repr(self) -> str:
        text = (
            f"bits={self.bits}, signed={self.signed}, per_channel_dim={self.per_channel_dim}, "
            f"learn_scale={self.learn_scale}"
        )
        if self.narrow:
            text += ", narrow=True"
        if self.in_range != "rounded":
            text += f", in_range={self.in_range!r}"
        if self.grad_scale_elements != "per_scale":
            text += f", grad_scale_elements={self.grad_scale_elements!r}"
        if self.surrogate.name != "masked":
            text += f", surrogate={self.surrogate!r}"
        return text
