"""A classifier's training epoch followed by the usual evaluation code.

Pattern: validation under ``torch.no_grad()`` and a test pass under
``torch.inference_mode()`` with ``model.eval()``: ``argmax`` predictions, accuracy from
``(pred == y).sum().item()``, a confusion matrix built with integer indexing, the number of
samples from ``numel()``, the per-class scores as a NumPy array. None of it is trained, so
none of it is a finding.
"""

import torch
from torch import nn
from torch.nn import functional as F


def make_model():
    return nn.Sequential(
        nn.Linear(10, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 32), nn.ReLU(),
        nn.Linear(32, 3),
    )  # fmt: skip


def evaluate(model, batches):
    model.eval()
    correct, seen = 0, 0
    confusion = torch.zeros(3, 3, dtype=torch.long)
    with torch.no_grad():
        for x, y in batches:
            logits = model(x)  # <val_call>
            pred = logits.argmax(dim=1)  # <val_argmax>
            correct += (pred == y).sum().item()  # <val_item>
            seen += y.numel()
            for t, p in zip(y.tolist(), pred.tolist(), strict=True):
                confusion[t, p] += 1
    model.train()
    return correct / seen, confusion


def main():
    torch.manual_seed(10)
    batches = [(torch.randn(32, 10), torch.randint(0, 3, (32,))) for _ in range(4)]
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-2)
    for x, y in batches:
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    accuracy, confusion = evaluate(model, batches)
    print("validation accuracy", accuracy, confusion.diag().tolist())
    model.eval()
    with torch.inference_mode():
        scores = F.softmax(model(batches[0][0]), dim=-1)  # <test_call>
        top = scores.max(dim=1)  # <test_max>
        print(scores.numpy().round(2)[:2], top.indices[:4].tolist())  # <test_numpy>


if __name__ == "__main__":
    main()
