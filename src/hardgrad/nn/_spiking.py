r"""Spiking neurons: the leaky integrate-and-fire (LIF) neuron with a surrogate gradient.

The discrete LIF neuron (Gerstner et al., *Neuronal Dynamics*, 2014,
https://neuronaldynamics.epfl.ch/online/Ch1.S3.html) trained through its spike with a
surrogate gradient (Neftci, Mostafa & Zenke 2019, https://arxiv.org/abs/1901.09948;
Zenke & Ganguli 2018, https://doi.org/10.1162/neco_a_01086), with the update equations
and conventions of snnTorch's ``Leaky`` (Eshraghian et al. 2023,
https://arxiv.org/abs/2109.12894).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from .. import ops
from .. import surrogates as _surrogates
from .._core.checkpoint import SettingsInState
from .._core.kernels import constant, eager_plain
from .._core.validation import check_floating, check_positive, check_real
from ._hard import SurrogateLike
from ._sharding import accept_scalar_entry, copy_into

#: The reset mechanisms of :class:`LIF`.
RESETS = ("subtract", "zero", "none")


def _check_bool(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"Expected `{name}` to be a bool, but found {type(value).__name__}")
    return value


def _check_tensor_setting(value: Tensor, name: str, *, low: float, high: float | None) -> Tensor:
    """A beta or threshold given as a tensor: floating, finite values in the allowed range."""
    check_floating(value, name)
    if high is None:
        bad = ~torch.isfinite(value) | (value <= low)
    else:
        bad = ~((value >= low) & (value <= high))
    if bool(bad.any()):
        where = f"in [{low}, {high}]" if high is not None else f"> {low} and finite"
        found = value.detach()[bad].flatten()[:4].tolist()
        raise ValueError(f"Expected every value of `{name}` {where}, but found {found}")
    return value.detach().clone()


def _numbers_as_tensors(x: Tensor) -> bool:
    """Whether number settings may enter :class:`LIF`'s kernels as cached 0-d tensors of
    ``x``'s dtype: in eager mode for float32 and float64, where a number is rounded to the
    dtype either way (the same results), and a wrapped number costs each small kernel
    about 1 µs more. (Half types compute with the unrounded number.)"""
    return x.dtype in (torch.float32, torch.float64) and eager_plain(x)


def _times(t: Tensor, factor: Tensor | float, numbers: bool) -> Tensor:
    """``factor * t``; ``t`` itself for a factor of 1 (the same values, one kernel fewer:
    a threshold of 1 scales the reset)."""
    if isinstance(factor, Tensor):
        return factor * t
    if factor == 1.0:
        return t
    return torch.mul(t, constant(factor, t)) if numbers else factor * t


def _minus(t: Tensor, value: Tensor | float, numbers: bool) -> Tensor:
    """``t - value``, a number as a cached 0-d tensor where :func:`_numbers_as_tensors`."""
    if numbers and not isinstance(value, Tensor):
        return torch.sub(t, constant(value, t))
    return t - value


def _above(t: Tensor, threshold: Tensor | float, numbers: bool) -> Tensor:
    """``t > threshold`` as 0/1 in ``t``'s dtype, written straight in that dtype where
    possible (a bool result and its conversion take 9 against 1.7 µs on 64 x 128)."""
    if numbers and not isinstance(threshold, Tensor):
        return torch.gt(t, constant(threshold, t), out=torch.empty_like(t))
    return (t > threshold).to(t.dtype)


class LIF(SettingsInState, nn.Module):
    r"""Leaky integrate-and-fire neuron (snnTorch's ``Leaky``), trained with a surrogate gradient.

    **Forward.** With input current :math:`x_t`, membrane :math:`m_t`, decay
    :math:`\beta \in [0, 1]`, threshold :math:`\theta > 0` and the spike of the previous step
    :math:`s_{t-1} = H(m_{t-1} - \theta)` (the reset signal, recomputed from the previous
    membrane as snnTorch does; :math:`m_0 = 0` unless a state is passed):

    .. math::

        m_t = \begin{cases}
            \beta\, m_{t-1} + x_t - s_{t-1}\,\theta & \texttt{reset="subtract"} \\
            \beta\, (1 - s_{t-1})\, m_{t-1} + x_t & \texttt{reset="zero"} \\
            \beta\, m_{t-1} + x_t & \texttt{reset="none"}
        \end{cases}
        \qquad s_t = H(m_t - \theta) = \mathbb 1[m_t > \theta].

    The zero reset is the form snnTorch's ``Leaky`` *computes* (``_base_zero``: the
    previous membrane is zeroed where the neuron spiked, then decayed, then the input is
    added, so the input of a reset step is kept); its docstring writes a different
    formula, :math:`m_t = (1 - s_{t-1})(\beta m_{t-1} + x_t)`, which its code does not
    implement. The returned membrane is :math:`m_t` *before* its own spike's reset (which
    happens at the next step), as in snnTorch with ``reset_delay=True`` (its default).
    ``beta`` is clamped to :math:`[0, 1]` in the forward (only a learned one can leave it).

    **Backward.** The spike's derivative is the surrogate's,
    :math:`\partial s_t / \partial m_t = \sigma'(m_t - \theta)` (through
    :func:`hardgrad.heaviside`), and back-propagation through time follows the recurrence.
    The reset signal :math:`s_{t-1}` is detached by default (``detach_reset=True``, as
    snnTorch always does: the reset passes no gradient); with ``detach_reset=False`` it gets
    the same surrogate derivative. ``beta`` and ``threshold``, when learned, get their exact
    gradients through the recurrence (the threshold also through the surrogate,
    :math:`-\sigma'(m_t - \theta)`, and the subtracted :math:`s_{t-1}\theta`).

    **The surrogate.** The default is :class:`~hardgrad.surrogates.FastSigmoid` with slope
    25, :math:`\sigma'(u) = 1/(1 + 25|u|)^2`: exactly snnTorch's
    ``surrogate.fast_sigmoid()`` (default slope 25, SuperSpike's surrogate), the one
    snnTorch's tutorials train with. Note that snnTorch's ``Leaky`` itself defaults to
    ``surrogate.atan()`` (:math:`\alpha = 2`); ``surrogate="atan"`` gives exactly that
    (:class:`~hardgrad.surrogates.ATan` with its default ``alpha=2``). snnTorch's
    ``surrogate.sigmoid()`` has slope 25, hardgrad's ``"sigmoid"`` slope 1: pass
    ``hg.surrogates.Sigmoid(slope=25.0)`` to match it. Any ``"step"`` surrogate works.

    **Parameters and state.** ``beta`` and ``threshold`` are numbers (one for all neurons)
    or tensors that broadcast to the input (one per neuron, e.g. shape ``(features,)``).
    With ``learn_beta``/``learn_threshold`` they are parameters (a learned threshold is
    used as it is, unlike ``beta`` not clamped: keep it positive); otherwise numbers stay
    Python numbers (exact in every dtype, kept in the checkpoint's settings) and tensors
    are buffers. The membrane is passed explicitly (``spk, mem = lif(x, mem)``; ``mem=None``
    starts from zeros) or, with ``init_hidden=True``, kept in the module as ``lif.mem``
    (then ``lif(x)`` returns only the spikes, for ``nn.Sequential``, as snnTorch's
    ``init_hidden``); :meth:`reset_hidden` clears it, :meth:`detach_hidden` cuts its graph
    (truncated BPTT). The kept membrane is not part of the ``state_dict``.

    Args:
        beta: membrane decay in [0, 1] (number or tensor).
        threshold: firing threshold > 0 (number or tensor).
        reset: ``"subtract"`` (default), ``"zero"`` or ``"none"``.
        surrogate: a ``"step"`` surrogate (name or instance); default fast sigmoid, slope 25.
        learn_beta: make ``beta`` a trainable parameter.
        learn_threshold: make ``threshold`` a trainable parameter.
        detach_reset: stop the gradient through the reset signal (default ``True``).
        init_hidden: keep the membrane in the module.

    Example:
        >>> import torch, hardgrad as hg
        >>> lif = hg.nn.LIF(beta=0.5)
        >>> lif
        LIF(beta=0.5, threshold=1.0, reset='subtract', surrogate=FastSigmoid(slope=25.0))
        >>> x = torch.tensor([0.8, 0.8, 0.8, 0.8])  # one neuron, four steps, one at a time
        >>> mem = None
        >>> for x_t in x:
        ...     spk, mem = lif(x_t, mem)
        ...     print(spk.item(), round(mem.item(), 3))
        0.0 0.8
        1.0 1.2
        0.0 0.4
        0.0 1.0

        A whole sequence (time first); its gradient flows through every step:

        >>> w = torch.tensor([1.0], requires_grad=True)
        >>> spikes, mem = lif.sequence(w * torch.full((6, 1), 0.8))
        >>> spikes.squeeze(1)
        tensor([0., 1., 0., 0., 1., 0.], grad_fn=<SqueezeBackward1>)
        >>> spikes.sum().backward(); w.grad
        tensor([1.5897])
    """

    mem: Tensor | None

    def __init__(
        self,
        beta: float | Tensor,
        threshold: float | Tensor = 1.0,
        reset: str = "subtract",
        surrogate: SurrogateLike = "fast_sigmoid",
        *,
        learn_beta: bool = False,
        learn_threshold: bool = False,
        detach_reset: bool = True,
        init_hidden: bool = False,
    ) -> None:
        super().__init__()
        for flag, name in (
            (learn_beta, "learn_beta"),
            (learn_threshold, "learn_threshold"),
            (detach_reset, "detach_reset"),
            (init_hidden, "init_hidden"),
        ):
            _check_bool(flag, name)
        if not isinstance(reset, str) or reset not in RESETS:
            raise ValueError(
                f"Expected `reset` to be one of {', '.join(map(repr, RESETS))}, but found {reset!r}"
            )
        self.reset = reset
        self.surrogate = _surrogates.resolve(surrogate, family="step", op="LIF")
        self.learn_beta = learn_beta
        self.learn_threshold = learn_threshold
        self.detach_reset = detach_reset
        self.init_hidden = init_hidden
        self._fixed: dict[str, float] = {}
        #: Learned settings that are one number: stored with shape (1,) (fully_shard
        #: refuses 0-d parameters) and used as 0-d; their initial values, for
        #: reset_parameters (deferred initialisation on the meta device).
        self._scalars: set[str] = set()
        self._initial_settings: dict[str, Tensor] = {}
        values: dict[str, float | Tensor] = {}
        if isinstance(beta, Tensor):
            values["beta"] = _check_tensor_setting(beta, "beta", low=0.0, high=1.0)
        else:
            values["beta"] = check_real(beta, "beta")
            if not 0.0 <= values["beta"] <= 1.0:
                raise ValueError(f"Expected `beta` in [0, 1], but found beta={beta!r}")
        if isinstance(threshold, Tensor):
            values["threshold"] = _check_tensor_setting(threshold, "threshold", low=0.0, high=None)
        else:
            values["threshold"] = check_positive(threshold, "threshold")
        for name, learn in (("beta", learn_beta), ("threshold", learn_threshold)):
            value = values[name]
            if learn:
                tensor = value if isinstance(value, Tensor) else torch.tensor(value)
                if tensor.dim() == 0:
                    self._scalars.add(name)
                    tensor = tensor.reshape(1)
                if not tensor.is_meta:
                    self._initial_settings[name] = tensor.detach().to("cpu", copy=True)
                elif not isinstance(value, Tensor):  # made on the meta device from a number
                    self._initial_settings[name] = torch.full((1,), value, device="cpu")
                setattr(self, name, nn.Parameter(tensor))
            elif isinstance(value, Tensor):
                if not value.is_meta:
                    self._initial_settings[name] = value.detach().to("cpu", copy=True)
                self.register_buffer(name, value)
            else:
                self._fixed[name] = value
        self.mem = None

    # ------------------------------------------------------------------ parameters

    def _setting(self, name: str) -> Tensor:
        """The parameter or buffer ``name`` as used: a learned number 0-d (stored as (1,))."""
        value: Tensor = getattr(self, name)
        return value.view(()) if name in self._scalars and value.dim() == 1 else value

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """The learned or tensor ``beta`` and ``threshold`` back to their initial values
        (after ``to_empty`` from the meta device)."""
        for name, initial in self._initial_settings.items():
            copy_into(getattr(self, name), initial)

    def _beta(self, x: Tensor) -> Tensor | float:
        if "beta" in self._fixed:
            return self._fixed["beta"]
        beta: Tensor = self._setting("beta")
        return beta.to(x.dtype).clamp(0.0, 1.0)

    def _threshold(self, x: Tensor) -> Tensor | float:
        if "threshold" in self._fixed:
            return self._fixed["threshold"]
        threshold: Tensor = self._setting("threshold")
        return threshold.to(x.dtype)

    def _check_setting_shapes(self, x: Tensor) -> None:
        for name in ("beta", "threshold"):
            if name not in self._fixed:
                value: Tensor = self._setting(name)
                try:
                    fits = torch.broadcast_shapes(value.shape, x.shape) == x.shape
                except RuntimeError:
                    fits = False
                if not fits:
                    raise ValueError(
                        f"Expected `{name}` (one value per neuron) to broadcast to the input's "
                        f"shape {tuple(x.shape)}, but found shape {tuple(value.shape)}"
                    )

    # ------------------------------------------------------------------ dynamics

    def _step(
        self, x: Tensor, mem: Tensor, beta: Tensor | float, threshold: Tensor | float
    ) -> tuple[Tensor, Tensor]:
        """One step from the previous membrane ``mem``: ``(s_t, m_t)``."""
        numbers = _numbers_as_tensors(x)
        if self.reset == "none":
            new = _times(mem, beta, numbers) + x
        else:
            if self.detach_reset:  # the reset passes no gradient: a plain comparison
                previous = _above(mem.detach(), threshold, numbers)
            else:
                previous = ops.heaviside(_minus(mem, threshold, numbers), surrogate=self.surrogate)
            if self.reset == "subtract":
                new = _times(mem, beta, numbers) + x - _times(previous, threshold, numbers)
            else:
                new = _times(mem * (1 - previous), beta, numbers) + x
        spike = ops.heaviside(_minus(new, threshold, numbers), surrogate=self.surrogate)
        return spike, new

    def _initial(self, x: Tensor, mem: Tensor | None, step_shape: torch.Size) -> Tensor:
        if self.init_hidden:
            if mem is not None:
                raise ValueError(
                    "Expected no `mem` argument with init_hidden=True (the module keeps the "
                    "membrane in `lif.mem`), but found a tensor"
                )
            mem = self.mem
            if mem is not None and mem.shape != step_shape:
                mem = None  # a new batch shape starts from rest, as in snnTorch
            elif mem is not None:
                mem = mem.to(device=x.device)  # the module may have moved since
        if mem is None:
            return torch.zeros(step_shape, dtype=x.dtype, device=x.device)
        check_floating(mem, "mem")
        if mem.shape != step_shape:
            try:
                fits = torch.broadcast_shapes(mem.shape, step_shape) == step_shape
            except RuntimeError:
                fits = False
            if not fits:
                raise ValueError(
                    f"Expected `mem` of shape {tuple(step_shape)} (the input's shape per step) "
                    f"or one that broadcasts to it, but found shape {tuple(mem.shape)}"
                )
            mem = mem.expand(step_shape)
        return mem.to(x.dtype)

    def forward(self, x: Tensor, mem: Tensor | None = None) -> Any:
        """One time step: ``(spk, mem)`` (only ``spk`` with ``init_hidden=True``).

        Args:
            x: the input current of this step, any shape (e.g. ``(batch, features)``).
            mem: the previous membrane, of ``x``'s shape (or one that broadcasts to it,
                e.g. a scalar 0), or ``None`` for zeros.
        """
        check_floating(x, "x")
        self._check_setting_shapes(x)
        previous = self._initial(x, mem, x.shape)
        spike, new = self._step(x, previous, self._beta(x), self._threshold(x))
        if self.init_hidden:
            self.mem = new
            return spike
        return spike, new

    def sequence(
        self, x: Tensor, mem: Tensor | None = None, *, return_membranes: bool = False
    ) -> tuple[Tensor, ...]:
        r"""Run over a whole sequence, time first: ``x`` of shape ``(T, *shape)``.

        Returns ``(spikes, mem)``: the spikes of every step, shape ``(T, *shape)``, and the
        final membrane :math:`m_T`, shape ``shape``; with ``return_membranes=True``
        ``(spikes, membranes, mem)`` with every :math:`m_t` too. Equal to ``T`` calls of
        the step API (a Python loop over time: ``torch.compile(fullgraph=True)`` unrolls it;
        with ``dynamic=True``, torch 2.13 needs ``torch._dynamo.config.specialize_float =
        True``, see the spiking guide).
        With ``init_hidden=True`` the kept membrane is the initial state and is updated.

        Example:
            >>> import torch, hardgrad as hg
            >>> lif = hg.nn.LIF(beta=0.9, reset="zero")
            >>> spikes, membranes, mem = lif.sequence(torch.full((4, 2), 0.6),
            ...                                       return_membranes=True)
            >>> spikes[:, 0], membranes[:, 0]
            (tensor([0., 1., 0., 1.]), tensor([0.6000, 1.1400, 0.6000, 1.1400]))
        """
        check_floating(x, "x")
        _check_bool(return_membranes, "return_membranes")
        if x.dim() < 1:
            raise ValueError(
                "Expected `x` with a time dimension first, shape (T, ...), but found a 0-dim tensor"
            )
        step_shape = x.shape[1:]
        if x.shape[0] > 0:
            self._check_setting_shapes(x[0])
        current = self._initial(x, mem, step_shape)
        beta, threshold = self._beta(x), self._threshold(x)
        spikes, membranes = [], []
        for t in range(x.shape[0]):
            spike, current = self._step(x[t], current, beta, threshold)
            spikes.append(spike)
            if return_membranes:
                membranes.append(current)
        if self.init_hidden:
            self.mem = current
        empty = x.new_zeros((0, *step_shape))
        spike_seq = torch.stack(spikes) if spikes else empty
        if return_membranes:
            return spike_seq, torch.stack(membranes) if membranes else empty, current
        return spike_seq, current

    # ------------------------------------------------------------------ kept state

    def init_leaky(self) -> None:
        """snnTorch's name for a neuron at rest: returns ``None``, which ``lif(x, mem)``
        reads as a zero membrane of the input's shape (``mem = lif.init_leaky()`` in
        ported code keeps working)."""
        return None

    def reset_hidden(self) -> None:
        """Forget the kept membrane (``init_hidden=True``): the next call starts from rest."""
        self.mem = None

    def detach_hidden(self) -> None:
        """Cut the kept membrane from its graph (truncated back-propagation through time)."""
        if self.mem is not None:
            self.mem = self.mem.detach()

    # ------------------------------------------------------------------ checkpoints, repr

    def _checkpoint_settings(self) -> dict[str, Any]:
        """The reset mechanism and the fixed numbers (not state) that give the state its meaning."""
        return {"reset": self.reset, **self._fixed}

    def _prepare_to_load(self, state_dict: dict[str, Any], prefix: str) -> None:
        for name in self._scalars:  # saved 0-d, before they were stored as (1,)
            accept_scalar_entry(state_dict, prefix + name, getattr(self, name))

    def extra_repr(self) -> str:
        parts = []
        for name, learn in (("beta", self.learn_beta), ("threshold", self.learn_threshold)):
            if name in self._fixed:
                parts.append(f"{name}={self._fixed[name]}")
            else:
                shape = tuple(self._setting(name).shape)
                parts.append(f"{name}={'learned' if learn else 'tensor'}{list(shape)}")
        parts += [f"reset={self.reset!r}", f"surrogate={self.surrogate!r}"]
        if not self.detach_reset:
            parts.append("detach_reset=False")
        if self.init_hidden:
            parts.append("init_hidden=True")
        return ", ".join(parts)
