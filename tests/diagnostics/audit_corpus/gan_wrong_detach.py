"""A GAN whose generator step detaches the fake batch as the discriminator step does.

Pattern (DCGAN-style training loop): the discriminator step scores ``fake.detach()``
(correct: the generator is not updated there); the generator step, copied from it, scores
``generator(noise).detach()`` too, so the generator's loss never reaches the generator and
its optimizer steps with no gradient. Only the generator step's detach is the bug.
"""

import torch
from torch import nn
from torch.nn import functional as F


def main():
    torch.manual_seed(5)
    generator = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 8))
    discriminator = nn.Sequential(nn.Linear(8, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1))
    opt_g = torch.optim.Adam(generator.parameters(), lr=2e-4)
    opt_d = torch.optim.Adam(discriminator.parameters(), lr=2e-4)
    for _ in range(3):
        real = torch.randn(16, 8) + 2
        noise = torch.randn(16, 4)
        fake = generator(noise)
        real_score = discriminator(real)
        fake_score = discriminator(fake.detach())  # <d_detach>
        d_loss = F.binary_cross_entropy_with_logits(
            real_score, torch.ones_like(real_score)
        ) + F.binary_cross_entropy_with_logits(fake_score, torch.zeros_like(fake_score))
        opt_d.zero_grad()
        d_loss.backward()
        opt_d.step()
        score = discriminator(generator(noise).detach())  # <g_detach>
        g_loss = F.binary_cross_entropy_with_logits(score, torch.ones_like(score))
        opt_g.zero_grad()
        g_loss.backward()
        opt_g.step()


if __name__ == "__main__":
    main()
