"""An actor-critic on a one-step bandit-like task whose actor loss forgot ``log_prob``.

Pattern: ``dist = Categorical(logits=policy(s)); action = dist.sample()``; the critic is
trained on the return; the actor loss is written as ``-(advantage * action)`` instead of
``-(advantage * dist.log_prob(action))``. The loss still has a gradient (the critic's),
so nothing raises, but the policy never learns: the draw has no gradient.
"""

import torch
from torch import nn
from torch.distributions import Categorical


def reward_of(state, action):
    best = state.argmax(-1)
    return (action == best).float()


def main():
    torch.manual_seed(6)
    policy = nn.Sequential(nn.Linear(5, 32), nn.Tanh(), nn.Linear(32, 5))
    critic = nn.Sequential(nn.Linear(5, 32), nn.Tanh(), nn.Linear(32, 1))
    optimizer = torch.optim.Adam([*policy.parameters(), *critic.parameters()], lr=1e-2)
    for episode in range(6):
        state = torch.randn(64, 5)
        dist = Categorical(logits=policy(state))
        action = dist.sample()  # <sample>
        reward = reward_of(state, action)
        value = critic(state).squeeze(-1)
        advantage = reward - value.detach()  # <baseline>
        actor_loss = -(advantage * action.float()).mean()
        critic_loss = (reward - value).pow(2).mean()
        optimizer.zero_grad()
        (actor_loss + critic_loss).backward()
        optimizer.step()
        print(episode, reward.mean().item())  # <log>


if __name__ == "__main__":
    main()
