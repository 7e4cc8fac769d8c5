"""
Operations tests: logging, --dump-config, service-manager notifications,
man pages, make install/uninstall, the systemd unit.  Helpers live in
opsutil.py; the `ternd` factory fixture comes from tests/e2e/conftest.py.
"""
from opsutil import daemon, notify, ternd  # noqa: F401  (pytest registers them from here)
