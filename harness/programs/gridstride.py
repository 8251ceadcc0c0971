"""`invoke viz gridstride` looks for harness.programs.gridstride (the figure module is
analysis/gridstride.py); the program itself is grid_stride. This re-exports its viz hook."""

from .grid_stride import GridStrideData, viz_data

__all__ = ["GridStrideData", "viz_data"]
