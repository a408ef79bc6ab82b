"""REINFORCE with a running-mean baseline and an entropy bonus.

Pattern: ``dist = Categorical(logits=policy(s)); action = dist.sample()``; the loss is
``-(advantage * dist.log_prob(action)).mean() - 0.01 * dist.entropy().mean()``, with the
advantage a plain number per draw (reward minus a running mean). All deliberate.
"""

import torch
from torch import nn
from torch.distributions import Categorical


def main():
    torch.manual_seed(7)
    policy = nn.Sequential(nn.Linear(6, 32), nn.Tanh(), nn.Linear(32, 4))
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-2)
    baseline = 0.0
    for _ in range(4):
        state = torch.randn(64, 6)
        dist = Categorical(logits=policy(state))
        action = dist.sample()  # <sample>
        reward = (action == state[:, :4].argmax(-1)).float()  # <reward>
        advantage = reward - baseline
        policy_loss = -(advantage * dist.log_prob(action)).mean()
        loss = policy_loss - 0.01 * dist.entropy().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        baseline = 0.9 * baseline + 0.1 * reward.mean().item()  # <log>


if __name__ == "__main__":
    main()
