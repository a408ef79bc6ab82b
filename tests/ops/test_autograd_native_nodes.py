"""Small CPU ops recorded with autograd's own nodes (``hardgrad.ops._autograd.records_natively``).

Up to ``NATIVE_NODE_MAX_NUMEL`` elements, in plain eager mode on CPU, an op whose backward is
the identity or a saved mask is recorded as ``x.clone()`` or ``x * mask`` with its values
then replaced by the hard result, instead of a Python ``autograd.Function``. The conformance
suites run every op on both routes (``conftest.autograd_route``); this file checks what is
particular to the native one: when it is taken, that it never touches the input or the hard
value, and that everything autograd offers (double backward, retained graphs, strided
inputs, later ops that save the output) behaves as on the Function route.
"""

from __future__ import annotations

import math

import pytest
import torch

import hardgrad as hg
import hardgrad.ops._autograd as autograd_module
from hardgrad.ops import OPS

LIMIT = autograd_module.NATIVE_NODE_MAX_NUMEL
NATIVE_NODES = {"CloneBackward0", "MulBackward0"}

#: The ops whose default backward is the identity or a mask (the native route's ops).
ROUTED = [
    name
    for name in OPS.names()
    if name
    in {"round", "floor", "ceil", "trunc", "sign", "binarize", "clamp", "quantize", "ternarize"}
]


def _node(y: torch.Tensor) -> str:
    return type(y.grad_fn).__name__


def _input(n: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    g = torch.Generator().manual_seed(n)
    x = 3 * torch.randn(n, generator=g, dtype=torch.float64)
    x[:4] = torch.tensor([math.inf, -math.inf, math.nan, -0.0], dtype=torch.float64)
    return x.to(dtype).requires_grad_()


def test_the_routed_ops_are_in_the_registry():
    assert {"round", "sign", "clamp", "quantize"} <= set(ROUTED)


@pytest.mark.parametrize("name", ROUTED)
def test_the_route_switches_at_the_limit(name):
    spec = OPS.get(name)
    small, large = _input(LIMIT), _input(LIMIT + 1)
    assert _node(spec(small)) in NATIVE_NODES
    assert _node(spec(large)) not in NATIVE_NODES


@pytest.mark.parametrize("name", ROUTED)
def test_no_node_without_a_gradient_to_record(name):
    spec = OPS.get(name)
    x = _input(64)
    assert spec(x.detach()).grad_fn is None
    with torch.no_grad():
        assert spec(x).grad_fn is None
    with torch.inference_mode():
        assert spec(x).grad_fn is None


@pytest.mark.parametrize("name", ROUTED)
def test_transforms_and_forward_mode_take_the_function(name):
    spec = OPS.get(name)
    x = _input(64).detach()
    (tangent,) = torch.func.jvp(spec, (x,), (torch.ones_like(x),))[1:]
    assert tangent.shape == x.shape
    with torch.autograd.forward_ad.dual_level():
        dual = torch.autograd.forward_ad.make_dual(x.requires_grad_(), torch.ones_like(x))
        y = spec(dual)
        assert _node(y) not in NATIVE_NODES
        assert torch.autograd.forward_ad.unpack_dual(y).tangent is not None


@pytest.mark.parametrize("name", ROUTED)
def test_neither_the_input_nor_its_graph_is_touched(name):
    spec = OPS.get(name)
    leaf = _input(64)
    before = leaf.detach().clone()
    x = leaf * 1.0  # a non-leaf input too
    y = spec(x)
    assert y.data_ptr() != x.data_ptr()
    assert torch.equal(leaf.detach().nan_to_num(), before.nan_to_num())
    assert x._version == 0 and leaf._version == 0
    with torch.no_grad():
        y.add_(1)  # the output is the caller's to change
    assert torch.equal(x.detach().nan_to_num(), before.nan_to_num())


def _both_routes(fn, monkeypatch):
    native = fn()
    with monkeypatch.context() as patch:
        patch.setattr(autograd_module, "NATIVE_NODE_MAX_NUMEL", 0)
        patch.setattr(autograd_module, "NATIVE_VALUE_MAX_NUMEL", 0)
        patch.setattr(autograd_module, "NATIVE_CLAMP_MAX_NUMEL", 0)
        function = fn()
    return native, function


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (
        a.dtype == b.dtype
        and torch.equal(a.isnan(), b.isnan())
        and torch.equal(a.nan_to_num(), b.nan_to_num())
        and torch.equal(a.signbit(), b.signbit())
    )


@pytest.mark.parametrize("name", ROUTED)
def test_strided_inputs_and_non_finite_gradients_match_the_function(name, dtype, monkeypatch):
    spec = OPS.get(name)
    base = _input(96, dtype).detach()
    x = base.view(12, 8).t().requires_grad_()  # non-contiguous
    upstream = torch.randn(8, 12, dtype=torch.float64).to(dtype)
    upstream[0, :3] = torch.tensor([math.inf, math.nan, -math.inf]).to(dtype)

    def run():
        y = spec(x)
        return y.detach(), y.stride(), torch.autograd.grad(y, x, upstream)[0]

    (y_n, stride_n, g_n), (y_f, _, g_f) = _both_routes(run, monkeypatch)
    assert _same(y_n, y_f) and _same(g_n, g_f)
    assert stride_n == x.stride()  # the copy keeps the input's layout


@pytest.mark.parametrize("name", ROUTED)
def test_double_backward_and_retained_graphs_match_the_function(name, monkeypatch):
    spec = OPS.get(name)
    x = torch.linspace(-2, 2, 50, dtype=torch.float64, requires_grad=True)

    def run():
        y = spec(x)
        loss = (y * x.pow(2)).sum()
        (first,) = torch.autograd.grad(loss, x, create_graph=True)
        (second,) = torch.autograd.grad(first.sum(), x, retain_graph=True)
        (again,) = torch.autograd.grad(first.sum(), x)
        return first.detach(), second, again

    native, function = _both_routes(run, monkeypatch)
    for a, b in zip(native, function, strict=True):
        assert _same(a, b)


def test_a_later_op_that_saves_the_output_backpropagates():
    """The values are replaced before anything else sees the output, so an op that saves
    it (``y * y``) finds the version it saved."""
    x = torch.randn(64, requires_grad=True)
    y = hg.round(x)
    (y * y).sum().backward()
    assert torch.equal(x.grad, 2 * torch.round(x.detach()))


@pytest.mark.parametrize("soft", [None, "clipped"])
def test_straight_through_callable_and_tensor_match_the_function(soft, dtype, monkeypatch):
    x = _input(40, dtype)
    value = torch.round(x.detach() * 3) / 3
    upstream = torch.randn(40, dtype=torch.float64).to(dtype)

    def run(hard):
        y = hg.straight_through(hard, soft)(x)
        return y.detach(), torch.autograd.grad(y, x, upstream)[0], _node(y)

    for hard in (lambda t: torch.round(t * 3) / 3, value):
        (y_n, g_n, node_n), (y_f, g_f, node_f) = _both_routes(
            lambda hard=hard: run(hard), monkeypatch
        )
        assert node_n in NATIVE_NODES and node_f not in NATIVE_NODES
        assert _same(y_n, y_f) and _same(g_n, g_f)
        assert _same(y_n, value.detach())


@pytest.mark.parametrize("soft", [None, "clipped"])
def test_a_computed_value_switches_route_at_its_own_limit(soft):
    """The straight-through of a computed value (a callable's result, a tensor) stays on
    autograd's own nodes up to NATIVE_VALUE_MAX_NUMEL elements, beyond the elementwise ops'
    NATIVE_NODE_MAX_NUMEL, and takes the Function above it."""
    value_limit = autograd_module.NATIVE_VALUE_MAX_NUMEL
    assert value_limit > LIMIT
    for n, native in ((LIMIT + 1, True), (value_limit, True), (value_limit + 1, False)):
        x = _input(n)
        for hard in (lambda t: torch.round(t * 3) / 3, torch.round(x.detach() * 3) / 3):
            y = hg.straight_through(hard, soft)(x)
            assert (_node(y) in NATIVE_NODES) is native, (n, hard)
        assert (_node(hg.round(x)) in NATIVE_NODES) is False  # the ops keep their own limit


def test_a_smooth_surrogate_keeps_the_function():
    x = torch.randn(64, requires_grad=True)
    assert _node(hg.sign(x, surrogate="tanh")) not in NATIVE_NODES
    assert _node(hg.straight_through(torch.sign, "tanh")(x)) not in NATIVE_NODES


@pytest.mark.parametrize("reentrant", [False, True])
def test_activation_checkpointing_recomputes_the_same_gradient(reentrant):
    """torch.utils.checkpoint reruns the forward in backward: the native nodes (and the
    values written into them outside autograd) must give the gradient of the plain run."""
    g = torch.Generator().manual_seed(11)
    w = torch.randn(32, 32, generator=g, requires_grad=True)
    x = torch.randn(16, 32, generator=g, requires_grad=True)

    def block(t: torch.Tensor) -> torch.Tensor:
        h = hg.clamp(hg.round(t @ w * 2) / 2, -1.0, 1.0)
        h = hg.straight_through(torch.sign)(h * 1.5)
        return (hg.quantize(h, 0.25, quant_min=-4, quant_max=3) ** 2).sum()

    block(x).backward()  # (reentrant checkpointing works with .backward() only)
    plain = (w.grad.clone(), x.grad.clone())
    w.grad = x.grad = None
    torch.utils.checkpoint.checkpoint(block, x, use_reentrant=reentrant).backward()
    assert torch.equal(w.grad, plain[0]) and torch.equal(x.grad, plain[1])


# --------------------------------------------------------------------------- tensor bounds

CLAMP_LIMIT = autograd_module.NATIVE_CLAMP_MAX_NUMEL


def _clamp_case(n: int, dtype: torch.dtype, learns: tuple[bool, bool]):
    """x with inf, NaN and -0.0; per-channel bounds (8 channels) of which some cross."""
    x = _input(n, dtype)
    g = torch.Generator().manual_seed(3)
    lo = (torch.rand(8, 1, generator=g, dtype=torch.float64) - 1.5).to(dtype)
    hi = (torch.rand(8, 1, generator=g, dtype=torch.float64) + 0.5).to(dtype)
    lo[2], hi[2] = 1.0, -1.0  # crossed: y = hi, no entry in range
    lo[5] = hi[5] = 0.25  # equal bounds
    lo.requires_grad_(learns[0])
    hi.requires_grad_(learns[1])
    return x.view(8, -1), lo, hi


@pytest.mark.parametrize("learns", [(False, False), (True, False), (False, True), (True, True)])
def test_tensor_bound_clamp_is_torch_clamp_on_small_tensors(learns, dtype, monkeypatch):
    """Up to NATIVE_CLAMP_MAX_NUMEL elements a masked clamp with tensor bounds is torch's
    own (one C++ node): the Function's values and gradients (x's and the learned bounds'),
    bit for bit for finite incoming gradients, crossed and equal bounds, inf, NaN and -0.0
    in x included (the sign of a NaN value and of a zero gradient aside); above the limit,
    and with the identity surrogate, the Function."""
    x, lo, hi = _clamp_case(CLAMP_LIMIT, dtype, learns)
    upstream = torch.randn(x.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    upstream = upstream.to(dtype)
    inputs = [t for t in (x, lo, hi) if t.requires_grad]

    def run():
        y = hg.clamp(x, lo, hi)
        return (_node(y), y.detach(), *torch.autograd.grad(y, inputs, upstream))

    (node_n, *native), (node_f, *function) = _both_routes(run, monkeypatch)
    assert node_n.startswith("ClampBackward") and not node_f.startswith("ClampBackward")
    y_n, *grads_n = native
    y_f, *grads_f = function
    assert torch.equal(y_n.isnan(), y_f.isnan())
    assert _same(y_n, y_f.where(y_f.isnan().logical_not(), y_n))  # (a NaN's sign: y_n's)
    for a, b in zip(grads_n, grads_f, strict=True):  # (zeros: + from torch's select,
        assert torch.equal(a, b)  # the sign of the product on the Function)
    big, lo_big, hi_big = _clamp_case(CLAMP_LIMIT + 8, dtype, learns)
    assert not _node(hg.clamp(big, lo_big, hi_big)).startswith("ClampBackward")
    assert not _node(hg.clamp(x, lo, hi, surrogate="identity")).startswith("ClampBackward")


def test_tensor_bound_clamp_takes_torch_gradients_at_saturated_entries():
    """The one difference between the routes, as documented: an inf or NaN incoming
    gradient at a saturated entry gives 0 there on the native route (torch's clamp
    selects) and NaN on the Function (the mask multiplies)."""
    x = torch.tensor([-2.0, 0.5, 2.0], requires_grad=True)
    hi = torch.tensor(1.0, requires_grad=True)
    upstream = torch.tensor([math.inf, 1.0, math.nan])
    (grad_x,) = torch.autograd.grad(hg.clamp(x, -1.0, hi), x, upstream)
    assert grad_x.tolist() == [0.0, 1.0, 0.0]
    assert torch.equal(grad_x, torch.autograd.grad(torch.clamp(x, -1.0, 1.0), x, upstream)[0])


# --------------------------------------------------------------------------- one_hot_argmax

#: float32's stand-in for infinity in the softmax of the selections (finfo.max / 4).
_BIG32 = torch.finfo(torch.float32).max / 4


def _selection_logits(dtype: torch.dtype) -> torch.Tensor:
    """(12, 16) logits whose rows take each branch of the native route: finite rows (the
    softmax of the logits as they are), -inf entries beside a finite maximum (still as they
    are), and rows that need the finite copy: NaN, +inf, all -inf, and a -inf entry beside
    a maximum below -big, where reading -inf as -big changes the softmax."""
    g = torch.Generator().manual_seed(5)
    x = 4 * torch.randn(12, 16, generator=g, dtype=torch.float64)
    x[1, 3] = x[1, 9] = -math.inf
    x[2, 0] = 1e30  # a large finite maximum: the other entries get weight 0
    x[3, 5] = math.nan
    x[4, 7] = math.inf
    x[5] = -math.inf
    x[6] = -3 * _BIG32 * (1 + torch.rand(16, generator=g, dtype=torch.float64) / 8)
    x[6, 2] = -math.inf
    x[7, :4] = x[7, 4:8] = 2.5  # ties
    x[8, 1] = -0.0
    return x.to(dtype)


def _one_hot_both_routes(x, dim, tau, upstream, monkeypatch):
    def run():
        logits = x.detach().requires_grad_()
        y = hg.one_hot_argmax(logits, dim=dim, tau=tau)
        return _node(y), y.detach(), torch.autograd.grad(y, logits, upstream)[0]

    return _both_routes(run, monkeypatch)


@pytest.mark.parametrize("tau", [1.0, 0.5, 3.0])
@pytest.mark.parametrize("layout", ["rows", "columns"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_one_hot_argmax_native_route_matches_the_function(tau, layout, dtype, monkeypatch):
    """Small float32/float64 CPU logits: torch's own softmax and copy nodes, the same one-hot
    and the same gradient as the Function bit for bit (signed zeros included), on every
    branch of the finite logits (each row of _selection_logits alone, then all together),
    with non-finite incoming gradients, along dim 0 of a transposed tensor too."""
    logits = _selection_logits(dtype)
    upstream = torch.randn(
        logits.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(2)
    )
    upstream = upstream.to(dtype)
    upstream[0, :3] = upstream[9, :3] = torch.tensor([math.inf, math.nan, -math.inf], dtype=dtype)
    cases = [(logits[i : i + 1], upstream[i : i + 1]) for i in range(logits.shape[0])]
    for x, up in [*cases, (logits, upstream)]:
        dim = -1
        if layout == "columns":
            x, up, dim = x.t(), up.t(), 0  # non-contiguous, selected along dim 0
        (node_n, y_n, g_n), (node_f, y_f, g_f) = _one_hot_both_routes(x, dim, tau, up, monkeypatch)
        assert node_n == "CloneBackward0" and node_f == "_OneHotArgmaxBackward"
        assert _same(y_n, y_f) and _same(g_n, g_f), x
        # A finite upstream gives a finite gradient, NaN and inf logits included.
        finite = up.nan_to_num(0.0, 0.0, 0.0)
        (_, _, g_n), (_, _, g_f) = _one_hot_both_routes(x, dim, tau, finite, monkeypatch)
        assert g_n.isfinite().all() and _same(g_n, g_f), x


def test_one_hot_argmax_reads_minus_inf_as_minus_big_below_it(monkeypatch):
    """A -inf entry beside entries below -big counts as -big, so it takes the whole softmax
    weight, as on the Function route: the saturated softmax's gradient is zero either way,
    but its signed zeros show which entry the weight went to."""
    x = _selection_logits(torch.float32)[6]
    upstream = torch.zeros(16)
    upstream[2] = 1.0
    (_, _, g_n), (_, _, g_f) = _one_hot_both_routes(x, -1, 1.0, upstream, monkeypatch)
    assert _same(g_n, g_f)
    assert g_n.signbit().sum() == 15 and not g_n[2].signbit()  # -0 off the -inf entry


def test_one_hot_argmax_takes_the_function_elsewhere():
    """Above NATIVE_NODE_MAX_NUMEL elements, for half types, without a gradient to record
    and under torch.func: the Function (or no node)."""
    assert _node(hg.one_hot_argmax(torch.randn(64, 128, requires_grad=True))) == "CloneBackward0"
    assert (
        _node(hg.one_hot_argmax(torch.randn(64, 129, requires_grad=True)))
        == "_OneHotArgmaxBackward"
    )
    half = torch.randn(8, 8, dtype=torch.float16, requires_grad=True)
    assert _node(hg.one_hot_argmax(half)) == "_OneHotArgmaxBackward"
    x = torch.randn(8, 8, requires_grad=True)
    with torch.no_grad():
        assert hg.one_hot_argmax(x).grad_fn is None
    assert hg.one_hot_argmax(x.detach()).grad_fn is None
    assert hg.one_hot_argmax(torch.empty(0, 4, requires_grad=True)).shape == (0, 4)
    jac = torch.func.jacrev(lambda t: hg.one_hot_argmax(t, tau=2.0))(x.detach()[0])
    p = torch.softmax(x.detach()[0] / 2, -1)
    torch.testing.assert_close(jac, (torch.diag(p) - torch.outer(p, p)) / 2)


@pytest.mark.parametrize("tau", [1.0, 0.5])
def test_one_hot_argmax_double_backward_and_untouched_input(tau, monkeypatch):
    """Second derivatives through the softmax's own double backward equal the Function's
    (finite logits); the logits and their graph are left alone, and the output is the
    caller's to change."""
    leaf = torch.randn(6, 10, dtype=torch.float64, requires_grad=True)
    weights = torch.randn(6, 10, dtype=torch.float64)

    def run():
        logits = leaf * 1.0  # a non-leaf input
        y = hg.one_hot_argmax(logits, tau=tau)
        loss = (y * weights * logits).sum()
        (first,) = torch.autograd.grad(loss, leaf, create_graph=True)
        (second,) = torch.autograd.grad(first.pow(2).sum(), leaf)
        assert logits._version == 0 and leaf._version == 0
        return first.detach(), second

    (first_n, second_n), (first_f, second_f) = _both_routes(run, monkeypatch)
    assert _same(first_n, first_f)
    torch.testing.assert_close(second_n, second_f, rtol=1e-12, atol=1e-15)
    y = hg.one_hot_argmax(leaf)
    with torch.no_grad():
        y.add_(1)
    assert y.sum() == 2 * 60 - 54


@pytest.mark.parametrize("reentrant", [False, True])
def test_one_hot_argmax_under_checkpointing_and_anomaly_mode(reentrant):
    """The native one_hot_argmax (both branches: tau 1 with finite logits as they are, tau
    0.5 through the finite copy) recomputed by torch.utils.checkpoint, and run under
    anomaly detection, gives the plain run's gradients."""
    g = torch.Generator().manual_seed(0)
    w = torch.randn(16, 32, generator=g, requires_grad=True)
    x = torch.randn(8, 16, generator=g, requires_grad=True)

    def block(t: torch.Tensor) -> torch.Tensor:
        logits = t @ w
        first = (hg.one_hot_argmax(logits) * torch.arange(32.0)).sum()
        return first + (hg.one_hot_argmax(logits, tau=0.5) * logits).sum()

    assert _node(hg.one_hot_argmax(x @ w)) == "CloneBackward0"
    block(x).backward()
    plain = (w.grad.clone(), x.grad.clone())
    w.grad = x.grad = None
    torch.utils.checkpoint.checkpoint(block, x, use_reentrant=reentrant).backward()
    assert torch.equal(w.grad, plain[0]) and torch.equal(x.grad, plain[1])
    w.grad = x.grad = None
    with torch.autograd.set_detect_anomaly(True):
        block(x).backward()
    assert torch.equal(w.grad, plain[0]) and torch.equal(x.grad, plain[1])
