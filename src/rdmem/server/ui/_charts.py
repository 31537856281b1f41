"""Line charts as plain geometry: the templates draw them as SVG (no script, no library)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["Chart", "Series", "line_chart", "nice_ticks"]

WIDTH, HEIGHT = 640, 280
LEFT, RIGHT, TOP, BOTTOM = 80, 36, 16, 44


@dataclass(frozen=True)
class Series:
    """One line: its name, its style (``series-0`` ...; each also has its own dash pattern) and points in
    pixels."""

    name: str
    css: str
    points: list[tuple[float, float]]

    @property
    def path(self) -> str:
        return " ".join(f"{x:.1f},{y:.1f}" for x, y in self.points)


@dataclass(frozen=True)
class Chart:
    """A chart's geometry: lines, ticks (pixel position, label) and an optional vertical marker."""

    title: str
    xlabel: str
    ylabel: str
    series: list[Series]
    xticks: list[tuple[float, str]]
    yticks: list[tuple[float, str]]
    marker: tuple[float, str] | None = None
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    top: int = TOP
    plot_width: int = field(default=WIDTH - LEFT - RIGHT)
    plot_height: int = field(default=HEIGHT - TOP - BOTTOM)

    @property
    def bottom(self) -> int:
        return self.top + self.plot_height


def nice_ticks(high: float, count: int = 5) -> list[float]:
    """0 and round steps (1, 2 or 5 times a power of ten) up to at least ``high``."""
    if high <= 0:
        return [0.0, 1.0]
    raw = high / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    return [step * i for i in range(int(math.ceil(high / step - 1e-9)) + 1)]


def line_chart(
    title: str, series: Mapping[str, Sequence[tuple[float, float]]], *, xlabel: str, ylabel: str,
    log_x: bool = False, y_max: float | None = None, x_label: Callable[[float], str] = lambda v: f"{v:g}",
    y_label: Callable[[float], str] = lambda v: f"{v:g}", x_ticks: Sequence[float] | None = None,
    marker: tuple[float, str] | None = None,
) -> Chart:
    """Scale data points (x, y) to a chart; ``log_x`` for budgets, which grow by doubling."""
    xs = [x for pts in series.values() for x, _ in pts] + ([marker[0]] if marker else [])
    ys = [y for pts in series.values() for _, y in pts]
    fx = (lambda v: math.log2(max(v, 1e-9))) if log_x else float
    lo, hi = (min(map(fx, xs)), max(map(fx, xs))) if xs else (0.0, 1.0)
    if hi <= lo:
        lo, hi = lo - 1, hi + 1
    yticks = nice_ticks(y_max if y_max is not None else max(ys, default=1.0))
    top = yticks[-1] or 1.0
    pw, ph = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def px(v: float) -> float:
        return LEFT + (fx(v) - lo) / (hi - lo) * pw

    def py(v: float) -> float:
        return TOP + ph - v / top * ph

    lines = [Series(name, f"series-{k}", [(px(x), py(y)) for x, y in pts])
             for k, (name, pts) in enumerate(series.items())]
    ticks_x = sorted(set(x_ticks if x_ticks is not None else [x for pts in series.values() for x, _ in pts]))
    labels = {x_label(v): px(v) for v in reversed(ticks_x)}  # one tick per label, the first of equals
    return Chart(title, xlabel, ylabel, lines, sorted((x, label) for label, x in labels.items()),
                 [(py(v), y_label(v)) for v in yticks], (px(marker[0]), marker[1]) if marker else None)
