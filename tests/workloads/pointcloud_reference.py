"""A slow, literal transcription of shared/spec/pointcloud.md §3-§4 (one point at a time).

NaN intensity or time (not range-tested by the spec) quantises to 0, +-inf to the limits:
the emulator's choice, as the original C has undefined behaviour there.
"""

from __future__ import annotations

import math

import numpy as np

f32 = np.float32


def _quantize(v: np.float32) -> int:
    if math.isnan(v):
        return 0
    r = float(np.rint(v))
    return int(min(max(r, -128.0), 127.0))


def preprocess(points: np.ndarray, p) -> dict:
    """features (int8), coords (int32), pillars, valid, kept for a model `p` (PillarParams)."""
    back, front, right, left = f32(p.back), f32(p.front), f32(p.right), f32(p.left)
    bottom, top, lower, upper = f32(p.bottom), f32(p.top), f32(p.lower), f32(p.upper)
    xs, ys, scale = f32(p.x_scale), f32(p.y_scale), f32(p.scale)
    x_len, y_len = p.x_len, p.y_len
    P, K, dims = p.max_pillars, p.max_points_per_pillar, p.dims
    features = np.zeros(p.features_shape, np.int8)
    coords = np.tile(np.array([0, -1, -1, -1], np.int32), (P, 1)).reshape(p.coords_shape)
    table: dict[tuple[int, int], int] = {}
    filled = [0] * P
    used = valid = kept = 0
    spans = [front - back, left - right, top - bottom, upper - lower]
    lows = [back, right, bottom, lower]
    with np.errstate(all="ignore"):
        for point in points[: p.max_input_points]:
            x, y, z = point[0], point[1], point[2]
            if not (back < x < front and right < y < left and bottom < z < top):
                continue
            idx = int((x - back) / xs)
            idy = int((y - right) / ys)
            if idx >= x_len or idy >= y_len:
                continue
            valid += 1
            if (idx, idy) not in table:
                if used < P:
                    n = used
                    used += 1
                else:
                    n = P - 1
                table[(idx, idy)] = n
                coords[0, 0, n] = (0, 0, idy, idx)
            n = table[(idx, idy)]
            if filled[n] >= K:
                continue
            s = filled[n]
            filled[n] += 1
            kept += 1
            for c in range(dims):
                v = point[c]
                if c < 4:
                    encoded = ((v - lows[c]) / spans[c]) / scale
                else:
                    encoded = v / scale
                q = _quantize(f32(encoded))
                if p.slot_major:
                    features[0, c, s, n] = q
                else:
                    features[0, c, n, s] = q
    return {"features": features, "coords": coords, "pillars": used, "valid": valid,
            "kept": kept}
