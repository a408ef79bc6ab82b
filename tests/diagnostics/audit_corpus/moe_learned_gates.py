"""A top-k mixture of experts (Shazeer et al. 2017, Mixtral-style) with learned gates.

Pattern: the router's softmax picks ``k`` experts per token with ``topk``; the tokens are
dispatched to each expert by the indices; the experts' outputs are mixed with the top-k
probabilities renormalised to sum to 1, which gives the router its gradient from the task
loss; a Switch-style load-balancing loss on the router's softmax is added. All deliberate.
"""

import torch
from torch import nn
from torch.nn import functional as F


class TopKMoE(nn.Module):
    def __init__(self, dim=16, experts=4, k=2, classes=3):
        super().__init__()
        self.k, self.experts_n = k, experts
        self.router = nn.Linear(dim, experts)
        self.experts = nn.ModuleList(nn.Linear(dim, dim) for _ in range(experts))
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        probs = F.softmax(self.router(x), dim=-1)
        top_p, top_i = probs.topk(self.k, dim=-1)  # <topk>
        gates = top_p / top_p.sum(-1, keepdim=True)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            rows, slot = (top_i == e).nonzero(as_tuple=True)  # <dispatch>
            if rows.numel():
                out[rows] += gates[rows, slot].unsqueeze(-1) * expert(x[rows])
        # Switch-style balancing: fraction of tokens sent to each expert times its mean prob.
        frac = F.one_hot(top_i, self.experts_n).float().sum(1).mean(0)
        balance = self.experts_n * (frac * probs.mean(0)).sum()
        return self.head(F.relu(out)), balance


def main():
    torch.manual_seed(39)
    model = TopKMoE()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(3):
        x, y = torch.randn(32, 16), torch.randint(0, 3, (32,))
        logits, balance = model(x)
        loss = F.cross_entropy(logits, y) + 0.01 * balance
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
