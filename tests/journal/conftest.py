"""
Journal end-to-end tests: bounded memory, restarts (expired items, delete,
segment reuse), damaged journals, full disk.  Helpers live in jutil.py (a
plain module name, so this directory can run in one pytest invocation with
tests/e2e); the `ternd` factory fixture comes from tests/e2e/conftest.py.
"""
from jutil import ternd  # noqa: F401  (pytest registers it from here)
