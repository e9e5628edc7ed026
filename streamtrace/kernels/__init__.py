"""Numba kernels of streamtrace and their plain-Python reference twins."""
