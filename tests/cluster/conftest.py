"""Fixtures for the cluster tests: see clusterutil.py."""
from clusterutil import cluster, ternd  # noqa: F401  (pytest registers them from here)
