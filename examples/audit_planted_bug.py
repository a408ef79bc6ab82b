"""Finding a planted gradient bug with ``hardgrad audit``: a VQ-VAE without straight-through.

This hand-written VQ-VAE on scikit-learn's digits has a classic bug: the decoder reads
``codebook[distances.argmin(-1)]``, and the ``argmin`` index carries no gradient, so the
reconstruction loss never reaches the encoder. Nothing fails: the loss goes down (the
decoder and the codebook learn, and the commitment term still gives the encoder *a*
gradient), only worse than it should. Run it under the audit:

    hardgrad audit examples/audit_planted_bug.py --quick

which trains as usual and then prints (long lines cut here)::

    test mse 0.0783 (fixed: False)
    audit: 1 problem in 6094 torch calls watched; 2 notes (shown by --all or ...)
      examples/audit_planted_bug.py:64: graph_cut: Tensor.argmin indices (x30)
          the term made by mean of the loss depends on these only through this op, so
          its gradient never reaches them (they get gradient from the other terms only):
          VQVAE.encoder.0.weight, VQVAE.encoder.0.bias, VQVAE.encoder.2.weight, ...
          -> if it picks the nearest codebook vector (VQ-VAE), hg.vector_quantize(z,
          codebook) does the lookup with a straight-through (or rotation-trick) gradient
          to the encoder ...

It names the line of the ``argmin``, the parameters it cuts off from the reconstruction
term (the encoder's: they still get the commitment term's gradient, which is why nothing
looks wrong), and the fix. ``--fixed`` applies it (``hg.vector_quantize``: the same
nearest code, the straight-through gradient to the encoder); under the audit that run
reports ``no problems found`` (``--all`` shows the VQ loss's two deliberate ``.detach()``
as notes). The script's last line is ``test mse M (fixed: F)``; measured here after the
full run's 1,500 steps: 0.0741 with the bug (no better than predicting the mean image,
0.0738), 0.0194 fixed.

    python examples/audit_planted_bug.py [--fixed] [--quick]
"""

import argparse

import torch
from sklearn.datasets import load_digits
from torch import nn

import hardgrad as hg


def load_data(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The digits as rows in [0, 1], split 80/20 by a seeded permutation."""
    x = torch.tensor(load_digits().data, dtype=torch.float32) / 16.0
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    return x[order[: int(0.8 * len(x))]], x[order[int(0.8 * len(x)) :]]


class VQVAE(nn.Module):
    def __init__(self, fixed: bool) -> None:
        super().__init__()
        self.fixed = fixed
        self.encoder = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 4 * 8))
        self.codebook = nn.Parameter(torch.empty(32, 8).uniform_(-1 / 32, 1 / 32))
        self.decoder = nn.Sequential(nn.Linear(4 * 8, 128), nn.ReLU(), nn.Linear(128, 64))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z = self.encoder(x).view(-1, 4, 8)  # 4 tokens of dimension 8 per image
        if self.fixed:
            z_q, indices = hg.vector_quantize(z, self.codebook)  # straight-through to z
        else:
            indices = torch.cdist(z, self.codebook).argmin(-1)  # the planted bug
            z_q = self.codebook[indices]
        codes = self.codebook[indices]
        codebook_loss = (codes - z.detach()).square().mean()  # trains the codebook
        commitment = (z - codes.detach()).square().mean()  # keeps z near its code
        return self.decoder(z_q.flatten(1)), codebook_loss + 0.25 * commitment


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short run, for CI")
    parser.add_argument("--fixed", action="store_true", help="straight-through, no bug")
    args = parser.parse_args()
    torch.set_num_threads(1)  # a small model: one thread is fastest, and immune to a busy CPU
    x_train, x_test = load_data(seed=0)
    torch.manual_seed(0)
    model = VQVAE(args.fixed)
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    batches = torch.Generator().manual_seed(1)
    for _ in range(30 if args.quick else 1500):
        batch = x_train[torch.randint(len(x_train), (128,), generator=batches)]
        reconstruction, vq_loss = model(batch)
        loss = (reconstruction - batch).square().mean() + vq_loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        mse = float((model(x_test)[0] - x_test).square().mean())
    print(f"test mse {mse:.4f} (fixed: {args.fixed})")


if __name__ == "__main__":
    main()
