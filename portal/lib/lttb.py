"""Largest-Triangle-Three-Buckets downsampling of a series (for charts): metric series (apps/models) and a task's
resource samples (apps/jobs/usage.py). Numbers only; the callers read their series.

The per-bucket loop runs over at most `points` buckets, not over the points.
"""

from __future__ import annotations

import numpy as np


def lttb(x: np.ndarray, y: np.ndarray, points: int) -> tuple[np.ndarray, np.ndarray]:
    """Keep `points` points of (x, y) that preserve the shape: first, last, and per bucket the point forming
    the largest triangle with the previous kept point and the next bucket's mean."""
    n = len(x)
    if points >= n or points < 3:
        return x, y
    edges = np.linspace(1, n - 1, points - 1).astype(np.int64)  # points-2 buckets between first and last
    keep = np.empty(points, dtype=np.int64)
    keep[0], keep[-1] = 0, n - 1
    previous = 0
    for i in range(points - 2):
        start, end = edges[i], max(edges[i + 1], edges[i] + 1)
        if i + 2 < len(edges):
            next_start, next_end = edges[i + 1], max(edges[i + 2], edges[i + 1] + 1)
            avg_x, avg_y = x[next_start:next_end].mean(), y[next_start:next_end].mean()
        else:
            avg_x, avg_y = x[-1], y[-1]
        px, py = x[previous], y[previous]
        area = np.abs((px - avg_x) * (y[start:end] - py) - (px - x[start:end]) * (avg_y - py))
        previous = start + int(np.argmax(area))
        keep[i + 1] = previous
    return x[keep], y[keep]
