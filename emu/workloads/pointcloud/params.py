"""The parameters of a pillar model (spec §1); all of them are configuration."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np


@dataclass(frozen=True)
class PillarParams:
    """Ranges, grid and limits of one model; float values are used as float32."""

    name: str
    dims: int
    back: float
    front: float
    right: float
    left: float
    bottom: float
    top: float
    lower: float
    upper: float
    x_scale: float
    y_scale: float
    max_pillars: int
    max_points_per_pillar: int
    max_input_points: int
    scale: float
    slot_major: bool
    """True: features are [0, c, s, n] (CenterPoint); False: [0, c, n, s] (PointPillars)."""

    @property
    def x_len(self) -> int:
        return round((self.front - self.back) / self.x_scale)

    @property
    def y_len(self) -> int:
        return round((self.left - self.right) / self.y_scale)

    @property
    def features_shape(self) -> tuple[int, int, int, int]:
        p, k = self.max_pillars, self.max_points_per_pillar
        return (1, self.dims, k, p) if self.slot_major else (1, self.dims, p, k)

    @property
    def coords_shape(self) -> tuple[int, int, int, int]:
        return (1, 1, self.max_pillars, 4)

    def f32(self) -> np.ndarray:
        """[back, front, right, left, bottom, top, lower, upper, x_scale, y_scale, scale]
        as float32, the order every kernel takes them in."""
        return np.array([self.back, self.front, self.right, self.left, self.bottom, self.top,
                         self.lower, self.upper, self.x_scale, self.y_scale, self.scale],
                        dtype=np.float32)

    def with_overrides(self, **changes: object) -> PillarParams:
        return replace(self, **changes)  # type: ignore[arg-type]


CENTERPOINT = PillarParams(
    name="centerpoint", dims=5, back=-51.2, front=51.2, right=-51.2, left=51.2, bottom=-5.0,
    top=3.0, lower=0.0, upper=255.0, x_scale=0.2, y_scale=0.2, max_pillars=40000,
    max_points_per_pillar=20, max_input_points=300000, scale=1 / 128, slot_major=True,
)
POINTPILLARS = PillarParams(
    name="pointpillars", dims=4, back=0.0, front=69.12, right=-39.68, left=39.68, bottom=-3.0,
    top=1.0, lower=0.0, upper=1.0, x_scale=0.16, y_scale=0.16, max_pillars=12000,
    max_points_per_pillar=100, max_input_points=150000, scale=1 / 128, slot_major=False,
)
MODELS = {p.name: p for p in (CENTERPOINT, POINTPILLARS)}
