"""The power-cut tests' fixture: scenario(mode, ...) makes a pcut.Scenario
in the test's temporary directory, closed (servers ended, pcfs unmounted)
when the test ends."""
import pytest

import pcut


@pytest.fixture
def scenario(tmp_path):
    made = []

    def make(*a, **k):
        s = pcut.Scenario(tmp_path / ("s%d" % len(made)), *a, **k)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()
