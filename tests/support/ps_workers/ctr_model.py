"""A tiny CTR model shared by the PS test scripts and their single-process references.

logit = sum over an example's FIELDS keys of emb[key] . w[:DIM] + w[DIM]; the loss is
the mean binary cross-entropy. Data is a pure function of the seed.
"""

from __future__ import annotations

import numpy as np

DIM = 4
FIELDS = 3
NUM_KEYS = 200


def make_data(seed: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, NUM_KEYS, size=(n, FIELDS)).astype(np.int64)
    truth = rng.normal(0, 1, size=NUM_KEYS)
    labels = (truth[keys].sum(axis=1) + rng.normal(0, 0.3, n) > 0).astype(np.float32)
    return keys, labels


def forward_backward(
    rows: np.ndarray, w: np.ndarray, labels: np.ndarray
) -> tuple[float, np.ndarray, np.ndarray]:
    """rows: (n, FIELDS, DIM) embeddings. Returns loss, grad of w, grad of rows (mean loss)."""
    n = len(labels)
    pooled = rows.sum(axis=1)  # (n, DIM)
    logit = pooled @ w[:DIM] + w[DIM]
    p = 1.0 / (1.0 + np.exp(-logit))
    eps = 1e-7
    loss = float(-np.mean(labels * np.log(p + eps) + (1 - labels) * np.log(1 - p + eps)))
    dlogit = ((p - labels) / n).astype(np.float32)
    gw = np.empty(DIM + 1, dtype=np.float32)
    gw[:DIM] = dlogit @ pooled
    gw[DIM] = dlogit.sum()
    grows = np.broadcast_to(dlogit[:, None, None] * w[None, None, :DIM], rows.shape)
    return loss, gw, np.ascontiguousarray(grows, dtype=np.float32)
