"""
Fixtures for the client matrix (tests/clients); the harness and the shared
scenario live in clientmatrix.py (a plain module name, so this directory can
run in one pytest invocation with tests/e2e).
"""
import pytest

pytest.register_assert_rewrite("clientmatrix")

from clientmatrix import drivers, server, ternd  # noqa: F401  (pytest registers them from here)
