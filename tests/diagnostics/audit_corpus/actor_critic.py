"""REINFORCE with a learned value baseline (advantage actor-critic), written correctly.

Pattern: ``action = dist.sample()``, the actor loss ``-(log_prob * advantage)`` with the
advantage ``(returns - V(s)).detach()`` so that the baseline does not train the policy,
the critic trained on ``(returns - V(s))^2``, an entropy bonus; discounted returns built
from Python floats over an episode.
"""

import torch
from torch import nn
from torch.distributions import Categorical


class ActorCritic(nn.Module):
    def __init__(self, obs=4, actions=3, hidden=32):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(obs, hidden), nn.ReLU())
        self.actor = nn.Linear(hidden, actions)
        self.critic = nn.Linear(hidden, 1)

    def forward(self, state):
        h = self.body(state)
        return Categorical(logits=self.actor(h)), self.critic(h).squeeze(-1)


def step(state, action):
    """A toy environment: reward 1 when the action matches the sign pattern of the state."""
    target = (state[:2] > 0).long().sum().item()  # <env>
    next_state = torch.roll(state, 1) + 0.1 * torch.randn(4)
    return next_state, float(action == target)


def main():
    torch.manual_seed(7)
    model = ActorCritic()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    gamma = 0.9
    for episode in range(4):
        state = torch.randn(4)
        log_probs, values, rewards, entropies = [], [], [], []
        for _ in range(8):
            dist, value = model(state)
            action = dist.sample()  # <sample>
            state, reward = step(state, action.item())  # <action_item>
            log_probs.append(dist.log_prob(action))
            entropies.append(dist.entropy())
            values.append(value)
            rewards.append(reward)
        returns, running = [], 0.0
        for r in reversed(rewards):
            running = r + gamma * running
            returns.insert(0, running)
        returns = torch.tensor(returns)
        values = torch.stack(values)
        advantage = (returns - values).detach()  # <baseline>
        actor_loss = -(torch.stack(log_probs) * advantage).sum()
        critic_loss = (returns - values).pow(2).sum()
        loss = actor_loss + 0.5 * critic_loss - 0.01 * torch.stack(entropies).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(episode, sum(rewards))


if __name__ == "__main__":
    main()
