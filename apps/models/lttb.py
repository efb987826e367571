"""A metric series read as raw columns for a chart, which `portal.lib.lttb` then downsamples.

A 1M-point series is read as two float arrays (no model instances, no dicts) and reduced with numpy.
"""

from __future__ import annotations

import numpy as np
from django.db import connection

from apps.models.models import Metric

MAX_POINTS = 10_000


def series(run_id: int, key: str) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) of one metric in step order; NaN and ±Infinity points are left out (a chart cannot place
    them, and one would turn every triangle area of its bucket into NaN; the run's table shows such values)."""
    table = Metric._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f'SELECT "step", "value" FROM {table} WHERE "run_id" = %s AND "key" = %s AND NOT "is_nan" '
            'ORDER BY "step", "timestamp", "id"',
            [run_id, key],
        )
        rows = cursor.fetchall()
    if not rows:
        return np.empty(0), np.empty(0)
    data = np.array(rows, dtype=np.float64)
    data = data[np.isfinite(data[:, 1])]
    return data[:, 0], data[:, 1]
