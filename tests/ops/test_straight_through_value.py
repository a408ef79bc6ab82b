"""hg.straight_through never rewires a tensor it did not create (issue 13, part 1).

The user's situation: a VQ-VAE written as public code writes it (van den Oord et al. 2017).
The encoder output ``z`` is snapped to its nearest codebook row ``z_q``; the decoder sees
``z_q``'s value with the gradient copied to ``z`` (``z + (z_q - z).detach()`` in most
repositories); the codebook learns from its own loss ``||z_q - sg[z]||^2`` built from the
same ``z_q``. hardgrad used to hand back ``z_q`` itself with a new ``grad_fn``, so the
codebook loss trained the encoder and the codebook got no gradient, silently.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

import hardgrad as hg
from _properties import property_settings, surrogate_names, tensor_of, tensors, upstream

SURROGATE_SOFTS = [None, "identity", "clipped", "tanh"]


def _lookup(z: torch.Tensor, codebook: torch.Tensor) -> torch.Tensor:
    """The nearest codebook row of each row of ``z`` (with the codebook's graph)."""
    distances = torch.cdist(z.detach().float(), codebook.detach().float())
    return codebook[distances.argmin(-1)]


def _vq_setup(dtype: torch.dtype = torch.float32):
    g = torch.Generator().manual_seed(0)
    z = torch.randn(6, 3, generator=g).to(dtype).requires_grad_()
    codebook = torch.randn(5, 3, generator=g).to(dtype).requires_grad_()
    return z, codebook


@pytest.mark.parametrize("form", ["callable", "tensor"])
@pytest.mark.parametrize("soft", SURROGATE_SOFTS, ids=str)
def test_the_vq_pattern_leaves_z_q_and_its_graph_alone(form, soft):
    z, codebook = _vq_setup()
    z_q = _lookup(z, codebook)
    grad_fn = z_q.grad_fn
    hard = (lambda _: z_q) if form == "callable" else z_q
    y = hg.straight_through(hard, soft)(z)
    assert y is not z_q
    assert z_q.grad_fn is grad_fn and z_q.requires_grad
    assert torch.equal(y, z_q)  # the value, bit for bit

    # The codebook loss reaches the codebook, the output's gradient reaches z only.
    codebook_loss = (z_q - z.detach()).pow(2).sum()
    upstream = torch.randn(z.shape, generator=torch.Generator().manual_seed(1))
    (y * upstream).sum().backward(retain_graph=True)
    assert codebook.grad is None  # nothing from the output went into the lookup
    if soft in (None, "identity"):
        assert torch.equal(z.grad, upstream)
    else:
        surrogate = hg.surrogates.get(soft)
        torch.testing.assert_close(z.grad, upstream * surrogate.derivative(z.detach()))
    z.grad = None
    codebook_loss.backward()
    assert z.grad is None
    expected = torch.zeros_like(codebook)
    expected.index_add_(
        0, torch.cdist(z.detach(), codebook.detach()).argmin(-1), 2 * (z_q - z).detach()
    )
    torch.testing.assert_close(codebook.grad, expected)


def test_a_callable_soft_also_leaves_z_q_alone():
    z, codebook = _vq_setup(torch.float64)
    z_q = _lookup(z, codebook)
    grad_fn = z_q.grad_fn
    y = hg.straight_through(z_q, torch.tanh)(z)
    assert y is not z_q and z_q.grad_fn is grad_fn
    assert torch.equal(y, z_q)
    y.sum().backward()
    assert codebook.grad is None
    torch.testing.assert_close(z.grad, 1 - torch.tanh(z.detach()) ** 2)


@pytest.mark.parametrize("soft", [*SURROGATE_SOFTS, torch.sin], ids=str)
def test_a_hard_that_returns_its_input_gives_a_new_tensor(soft):
    x = torch.randn(4, requires_grad=True)
    y = hg.straight_through(lambda t: t, soft)(x)
    assert y is not x and x.grad_fn is None and x.is_leaf
    assert torch.equal(y, x)


@pytest.mark.parametrize("soft", [*SURROGATE_SOFTS, torch.sin], ids=str)
def test_a_constant_hard_tensor_is_not_modified(soft):
    x = torch.randn(4, requires_grad=True)
    constant = torch.arange(4.0)
    for hard in (constant, lambda _: constant):
        y = hg.straight_through(hard, soft)(x)
        assert y.requires_grad
        assert not constant.requires_grad and constant.grad_fn is None


@pytest.mark.usefixtures("function_route")
def test_the_output_is_protected_from_in_place_changes():
    z, codebook = _vq_setup()
    z_q = _lookup(z, codebook)
    y = hg.straight_through(z_q)(z)
    with pytest.raises(RuntimeError, match="view"):
        y.add_(1)
    # And changing the hard value in place afterwards is caught, not silently used.
    y = hg.straight_through(z_q)(z)
    with torch.no_grad():
        z_q.mul_(2)
    with pytest.raises(RuntimeError, match="modified inplace"):
        y.sum().backward()


@pytest.mark.usefixtures("function_route")
def test_nothing_is_copied_for_a_surrogate_soft():
    z, codebook = _vq_setup()
    z_q = _lookup(z, codebook)
    y = hg.straight_through(z_q)(z)
    assert y.data_ptr() == z_q.data_ptr()


@pytest.mark.parametrize("soft", [None, "clipped"])
def test_a_small_cpu_output_is_a_copy_that_neither_side_can_change(soft):
    """Up to NATIVE_VALUE_MAX_NUMEL elements the output is a copy recorded by autograd's own
    nodes: changing it in place leaves ``z_q`` alone, changing ``z_q`` afterwards leaves it
    (and its gradient) alone."""
    z, codebook = _vq_setup()
    z_q = _lookup(z, codebook)
    expected = z_q.detach().clone()
    y = hg.straight_through(z_q, soft)(z)
    assert y.data_ptr() != z_q.data_ptr() and type(y.grad_fn).__name__ in {
        "CloneBackward0",
        "MulBackward0",
    }
    y.add_(1)
    assert torch.equal(z_q.detach(), expected)
    y = hg.straight_through(z_q, soft)(z)
    with torch.no_grad():
        z_q.mul_(2)
    assert torch.equal(y.detach(), expected)
    (got,) = torch.autograd.grad(y.sum(), z)
    keep = torch.ones_like(z) if soft is None else (z.detach().abs() <= 1).to(z.dtype)
    assert torch.equal(got, keep)


@pytest.mark.parametrize("form", ["callable", "tensor"])
def test_value_form_matches_the_detach_trick_in_float64(form, dtype):
    z, codebook = _vq_setup(dtype)
    z_q = _lookup(z, codebook)
    hard = (lambda _: z_q) if form == "callable" else z_q
    ours = hg.straight_through(hard)(z)
    assert torch.equal(ours, z_q)
    upstream = torch.randn(z.shape).to(dtype)
    (g_ours,) = torch.autograd.grad((ours * upstream).sum(), z)
    naive = z + (z_q - z).detach()
    (g_naive,) = torch.autograd.grad((naive * upstream).sum(), z)
    assert torch.equal(g_ours, g_naive)


@pytest.mark.compile
def test_value_form_under_torch_func_and_compile():
    z, codebook = _vq_setup(torch.float64)
    z_q = _lookup(z, codebook).detach()
    w = torch.randn(z.shape, dtype=torch.float64)
    g = torch.func.grad(lambda t: (hg.straight_through(z_q, "tanh")(t) * w).sum())(z.detach())
    torch.testing.assert_close(g, w * (1 - torch.tanh(z.detach()) ** 2))
    batched = torch.vmap(lambda t, v: hg.straight_through(v)(t))(z.detach(), z_q)
    assert torch.equal(batched, z_q)

    compiled = torch.compile(
        lambda t, v: hg.straight_through(v, "clipped")(t) * 2, fullgraph=True, backend="eager"
    )
    leaf = z.detach().clone().requires_grad_()
    out = compiled(leaf, z_q)
    assert torch.equal(out, 2 * z_q)
    out.sum().backward()
    torch.testing.assert_close(leaf.grad, 2 * (leaf.detach().abs() <= 1).double())


def test_hard_tensor_must_match_x():
    x = torch.randn(4, 3, requires_grad=True)
    with pytest.raises(ValueError, match=r"`hard`.*shape"):
        hg.straight_through(torch.zeros(3))(x)
    with pytest.raises(ValueError, match=r"`hard`.*dtype"):
        hg.straight_through(torch.zeros(4, 3, dtype=torch.float64))(x)
    with pytest.raises(TypeError, match=r"`hard`.*floating"):
        hg.straight_through(torch.zeros(4, 3, dtype=torch.long))
    with pytest.raises(TypeError, match="`hard`"):
        hg.straight_through("round")  # type: ignore[arg-type]


def test_repr_of_a_tensor_hard():
    text = repr(hg.straight_through(torch.zeros(2, 3), "tanh"))
    assert text == "straight_through(hard=<float32 tensor of shape (2, 3)>, soft=Tanh(slope=1.0))"


# --------------------------------------------------------------------------------------
# A VQ-VAE training step as public code writes it, against the same model with hardgrad.
# --------------------------------------------------------------------------------------


class TinyVQVAE(nn.Module):
    """Encoder -> nearest codebook row -> decoder, with codebook and commitment losses.

    ``losses_first`` picks the order public code uses: the losses from ``z_q`` before the
    straight-through line, or after it (where a rewired ``z_q`` sent the codebook loss to
    the encoder).
    """

    def __init__(self, straight_through: str, losses_first: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.encoder = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
        self.codebook = nn.Parameter(torch.randn(8, 4))
        self.decoder = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 16))
        self.straight_through = straight_through
        self.losses_first = losses_first

    def _losses(self, z: torch.Tensor, z_q: torch.Tensor) -> torch.Tensor:
        codebook_loss = (z_q - z.detach()).pow(2).mean()
        commitment = (z - z_q.detach()).pow(2).mean()
        return codebook_loss + 0.25 * commitment

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.encoder(x)
        z_q = self.codebook[torch.cdist(z.detach(), self.codebook.detach()).argmin(-1)]
        vq_loss = self._losses(z, z_q) if self.losses_first else None
        if self.straight_through == "detach_trick":
            z_st = z + (z_q - z).detach()
        elif self.straight_through == "hardgrad_callable":
            z_st = hg.straight_through(lambda _: z_q)(z)
        else:
            z_st = hg.straight_through(z_q)(z)
        if vq_loss is None:
            vq_loss = self._losses(z, z_q)
        return (self.decoder(z_st) - x).pow(2).mean() + vq_loss


@pytest.mark.parametrize("losses_first", [False, True], ids=["losses_after", "losses_first"])
@pytest.mark.parametrize("form", ["hardgrad_callable", "hardgrad_tensor"])
def test_vq_vae_training_matches_the_hand_written_model(form, losses_first):
    data = torch.randn(64, 16, generator=torch.Generator().manual_seed(3)).double()
    reference = TinyVQVAE("detach_trick", losses_first).double()
    ours = TinyVQVAE(form, losses_first).double()
    opt_ref = torch.optim.Adam(reference.parameters(), lr=1e-2)
    opt_ours = torch.optim.Adam(ours.parameters(), lr=1e-2)
    codebook_start = ours.codebook.detach().clone()
    for _ in range(30):
        for model, opt in ((reference, opt_ref), (ours, opt_ours)):
            opt.zero_grad()
            model(data).backward()
            opt.step()
        assert ours.codebook.grad is not None and bool(ours.codebook.grad.abs().sum() > 0)
    for (name, p_ref), p_ours in zip(reference.named_parameters(), ours.parameters(), strict=True):
        torch.testing.assert_close(p_ours, p_ref, rtol=1e-9, atol=1e-9, msg=name)
    assert not torch.equal(ours.codebook.detach(), codebook_start)  # the codebook learned


# --------------------------------------------------------------------------------------
# Properties on drawn inputs (shapes from 0-dim to empty, every dtype, extremes, inf, NaN).
# --------------------------------------------------------------------------------------


@property_settings(60)
@given(
    data=st.data(),
    x=tensors(nonfinite=True),
    soft=st.sampled_from([None, *surrogate_names("step")]),
    as_tensor=st.booleans(),
)
def test_property_value_form_returns_the_value_and_leaves_it_alone(data, x, soft, as_tensor):
    value = data.draw(tensor_of(x.dtype, tuple(x.shape), nonfinite=True)).requires_grad_()
    tracked = value * 1  # a non-leaf with a graph of its own
    grad_fn = tracked.grad_fn
    x = x.clone().requires_grad_()
    y = hg.straight_through(tracked if as_tensor else (lambda _: tracked), soft)(x)
    assert y is not tracked and tracked.grad_fn is grad_fn
    nan = y.isnan()
    assert torch.equal(nan, tracked.isnan())
    assert torch.equal(y[~nan], tracked[~nan])
    assert torch.equal(torch.signbit(y[~nan]), torch.signbit(tracked[~nan]))
    g = upstream(y, seed=1)
    (got_x, got_value) = torch.autograd.grad(y, (x, value), g, allow_unused=True)
    assert got_value is None  # nothing reaches what produced the value
    surrogate = hg.surrogates.get("identity" if soft is None else soft)
    expected = surrogate.backward(g, x.detach())
    assert torch.equal(got_x.isnan(), expected.isnan())
    assert torch.equal(got_x.nan_to_num(), expected.nan_to_num())


@pytest.mark.usefixtures("function_route")
def test_a_new_hard_value_becomes_the_output_and_a_kept_one_is_left_alone():
    """In eager mode a hard value that nothing else holds is handed back itself (no view);
    one the callable keeps (a cache, a constant, its input) keeps the protecting view and
    its own autograd state, and both give the same value and gradient."""
    x = torch.randn(5, requires_grad=True)
    upstream = torch.arange(5.0)
    cache: dict[str, torch.Tensor] = {}

    def keeps(t: torch.Tensor) -> torch.Tensor:
        cache["last"] = torch.round(t)
        return cache["last"]

    fresh = hg.straight_through(torch.round)(x)
    kept = hg.straight_through(keeps)(x)
    # (Which form the new value takes is checked in a fresh interpreter below: earlier
    # tests in this process can leave a reference to it, and then it takes the view.)
    assert type(kept.grad_fn).__name__ == "_ValueWithSurrogateBackward"
    assert kept is not cache["last"] and not cache["last"].requires_grad
    assert cache["last"].grad_fn is None
    assert torch.equal(fresh, kept) and torch.equal(fresh, torch.round(x.detach()))
    (g_fresh,) = torch.autograd.grad(fresh, x, upstream)
    (g_kept,) = torch.autograd.grad(kept, x, upstream)
    assert torch.equal(g_fresh, upstream) and torch.equal(g_kept, upstream)


def test_a_new_hard_value_is_the_output_itself_in_a_fresh_interpreter():
    """The fast form is taken where nothing else references the new value (a clean process:
    in this one, earlier compile tests can leave references behind)."""
    code = (
        "import torch, hardgrad as hg\n"
        "from hardgrad.ops import _autograd\n"
        "x = torch.randn(_autograd.NATIVE_VALUE_MAX_NUMEL + 1, requires_grad=True)\n"
        "y = hg.straight_through(torch.round)(x)\n"
        "print(type(y.grad_fn).__name__)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "IdentityGradientBackward"
