"""
The end-to-end suite's harness (tests/e2e/conftest.py: the ternd fixture,
Server, Conn, wait_until, TIMEOUT ...) as one module, loaded once under
one name, for the helpers of the other suites (clients, cluster, journal,
ops): `from e2eshared import e2e` once tests/ is on sys.path.
"""
import importlib.util
import os
import sys

_NAME = "tern_e2e_conftest"

if _NAME in sys.modules:
    e2e = sys.modules[_NAME]
else:
    _path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "e2e", "conftest.py")
    _spec = importlib.util.spec_from_file_location(_NAME, _path)
    e2e = importlib.util.module_from_spec(_spec)
    sys.modules[_NAME] = e2e
    _spec.loader.exec_module(e2e)
