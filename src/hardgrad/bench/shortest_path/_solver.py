"""The solver of the ``shortest-path`` benchmark: Dijkstra on the k x k grid, batched."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

# --------------------------------------------------------------------------- the solver


def _grid_graph(n: int, k: int) -> tuple[Any, Any, Any]:
    """CSR structure of ``n`` disjoint k x k right/down grids plus a super-source (node 0)
    joined to every grid's top-left cell: (indptr, indices, target cell of each edge)."""
    import numpy as np

    cells = k * k
    r, c = np.divmod(np.arange(cells), k)
    src, dst = [], []
    right = c < k - 1
    down = r < k - 1
    src.append(np.arange(cells)[right])
    dst.append(np.arange(cells)[right] + 1)
    src.append(np.arange(cells)[down])
    dst.append(np.arange(cells)[down] + k)
    s_local, d_local = np.concatenate(src), np.concatenate(dst)
    offsets = (np.arange(n) * cells)[:, None]
    s_all = (s_local[None] + offsets).ravel() + 1
    d_all = (d_local[None] + offsets).ravel() + 1
    s_all = np.concatenate([np.zeros(n, dtype=np.int64), s_all])
    d_all = np.concatenate([np.arange(n) * cells + 1, d_all])
    order = np.argsort(s_all, kind="stable")
    s_all, d_all = s_all[order], d_all[order]
    indptr = np.searchsorted(s_all, np.arange(n * cells + 2))
    return indptr, d_all, d_all - 1


def grid_shortest_path(costs: Tensor) -> Tensor:
    r"""The cheapest top-left to bottom-right path on each grid of vertex costs, by Dijkstra.

    ``costs`` has shape ``(N, k, k)`` (any sign); the result is the 0/1 indicator of the
    cells on the path (moves right or down; a path pays every cell it visits), the
    minimiser of :math:`\langle c, y\rangle`. Every path has :math:`2k - 1` cells, so
    adding a constant to an instance's costs does not change its solution: each instance
    is shifted to positive costs (Dijkstra needs non-negative weights) before SciPy's
    ``csgraph.dijkstra`` runs once on a graph holding all ``N`` grids and a super-source.

    Example:
        >>> import torch
        >>> from hardgrad.bench.shortest_path import grid_shortest_path
        >>> c = torch.tensor([[[1.0, 9.0, 9.0], [1.0, 1.0, 9.0], [9.0, 1.0, 1.0]]])
        >>> grid_shortest_path(c)[0]
        tensor([[1., 0., 0.],
                [1., 1., 0.],
                [0., 1., 1.]])
    """
    import numpy as np
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import dijkstra

    n, k = costs.shape[0], costs.shape[-1]
    cells = k * k
    c = costs.detach().reshape(n, cells).to(torch.float64).cpu()
    c = c - c.amin(1, keepdim=True) + 1.0  # positive; same argmin (fixed path length)
    indptr, indices, target_cell = _grid_graph(n, k)
    weights = c.numpy().ravel()[target_cell]
    graph = csr_matrix((weights, indices, indptr), shape=(n * cells + 1, n * cells + 1))
    _, pred = dijkstra(graph, directed=True, indices=0, return_predecessors=True)
    path = np.zeros(n * cells + 1, dtype=np.float64)
    node = np.arange(n) * cells + cells  # each grid's bottom-right cell (1-based)
    for _ in range(2 * k - 1):
        path[node] = 1.0
        node = pred[node]
    y = torch.from_numpy(path[1:].reshape(n, k, k))
    return y.to(device=costs.device, dtype=costs.dtype)
