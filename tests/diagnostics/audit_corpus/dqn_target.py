"""Deep Q-learning with a target network: targets computed under ``torch.no_grad()``.

Pattern: ``target_net`` is a ``deepcopy`` of the online network (its parameters still
require grad) that only ever runs under ``torch.no_grad()`` and is synced with
``load_state_dict``; the TD target ``r + gamma * max_a Q_target(s', a)`` uses ``.max(1)``;
the chosen actions' values come from ``gather``; epsilon-greedy actions from ``argmax``.
"""

import copy
import random

import torch
from torch import nn
from torch.nn import functional as F


def main():
    torch.manual_seed(11)
    random.seed(11)
    online = nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Linear(32, 4))
    target_net = copy.deepcopy(online)
    optimizer = torch.optim.Adam(online.parameters(), lr=1e-3)
    gamma, epsilon = 0.99, 0.2
    for step in range(6):
        state = torch.randn(32, 6)
        if random.random() < epsilon:
            action = torch.randint(0, 4, (32,))
        else:
            action = online(state).argmax(dim=1)  # <greedy>
        reward = torch.randn(32)
        next_state = torch.randn(32, 6)
        done = torch.rand(32) < 0.1
        with torch.no_grad():
            next_q = target_net(next_state).max(1).values  # <target>
            target = reward + gamma * next_q * (~done).float()
        q = online(state).gather(1, action.unsqueeze(1)).squeeze(1)
        loss = F.smooth_l1_loss(q, target)
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(online.parameters(), 10.0)
        optimizer.step()
        if step % 3 == 2:
            target_net.load_state_dict(online.state_dict())
        print(step, round(loss.item(), 4))  # <log>


if __name__ == "__main__":
    main()
