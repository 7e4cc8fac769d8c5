"""
The status page in a real browser: Debian's chromium, headless, driven by
chromedriver through python3-selenium, against a ternd with known traffic
(test_status_page.known_traffic).  With JavaScript on it checks what the
page shows (names, depths, open items, waiters, statuses, the charts drawn
as SVG with a size), that its script refreshes the figures in place after
more traffic, and that the console stays clean; with JavaScript off, that
the same figures and charts are there.

TERN_STATUS_SHOT=FILE.png also saves a screenshot of the page as the test
sees it, to look at what it checked.
"""
import os
import shutil
import time

import pytest
from selenium.common.exceptions import StaleElementReferenceException

from opsutil import TIMEOUT, wait_until
from test_status_page import CONF, known_traffic, start

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


@pytest.fixture
def browser(tmp_path):
    """Factory: browser(js=True) -> a headless chromium WebDriver with a
    fresh profile; every one is quit at teardown."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.path.exists(path):
            pytest.fail("%s missing (tools/install-deps.sh installs chromium and "
                        "chromium-driver)" % path)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    drivers = []

    def make(js=True):
        o = webdriver.ChromeOptions()
        o.binary_location = CHROMIUM
        profile = tmp_path / ("profile%d" % len(drivers))
        for a in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync",
                  "--user-data-dir=%s" % profile, "--window-size=1400,1000"):
            o.add_argument(a)
        if not js:
            # JavaScript blocked for every site, as in the settings page
            o.add_experimental_option(
                "prefs", {"profile.managed_default_content_settings.javascript": 2})
        o.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        d = webdriver.Chrome(service=Service(CHROMEDRIVER), options=o)
        d.set_page_load_timeout(TIMEOUT)
        drivers.append(d)
        return d

    yield make
    for d in drivers:
        d.quit()


# The queue table read in one step in the page (the script replaces it
# every second, faster than reading it cell by cell through the driver).
TABLE_JS = """
var out = {};
document.querySelectorAll('#queue-table tbody tr').forEach(function (tr) {
  var row = {};
  tr.querySelectorAll('td').forEach(function (td) {
    row[td.className.split(' ')[0]] = td.innerText;
  });
  out[tr.getAttribute('data-queue')] = row;
});
return out;
"""


def shown(d, js=True):
    """{queue: {cell class: text}} of the queue table as rendered: read by
    a script in the page when it runs scripts, else cell by cell (the page
    does not change then)."""
    if js:
        return d.execute_script(TABLE_JS)
    out = {}
    for tr in d.find_elements("css selector", "#queue-table tbody tr"):
        out[tr.get_attribute("data-queue")] = {
            td.get_attribute("class").split(" ")[0]: td.text
            for td in tr.find_elements("css selector", "td")}
    return out


def check_figures(d, js=True):
    rows = shown(d, js)
    assert list(rows) == ["emails", "frozen", "idle", "orders"]
    assert [rows[q]["items"] for q in rows] == ["3", "1", "0", "20"]
    assert rows["emails"]["open"] == "2" and rows["idle"]["waiters"] == "1"
    assert [rows[q]["status"] for q in rows] == ["UP", "READONLY", "UP", "UP"]
    assert d.find_element("id", "server-status").text == "UP"
    assert d.find_element("id", "ready").text == "ready"
    assert d.find_element("id", "queue-count").text == "4"
    # every chart is drawn: an SVG of its size with the lines in it
    sparks = d.find_elements("css selector", "#queue-table svg.spark")
    assert len(sparks) == 4
    for s in sparks:
        assert s.size["width"] == 150 and s.size["height"] == 30, s.size
        assert s.find_elements("css selector", "polyline.in")
    big = d.find_element("css selector", "#server svg.chart")
    assert big.size["width"] == 560
    line = big.find_element("css selector", "polyline.in")
    assert line.get_attribute("points").strip() and line.size["width"] > 0
    bars = d.find_elements("css selector", "#fsync-chart rect.bar")
    assert len(bars) == 15


def test_page_in_chromium(ternd, browser):
    srv, mport = start(ternd, conf=CONF)
    conns = known_traffic(srv)
    time.sleep(1.1)  # the slot in progress is a second old: its rates are drawn
    d = browser()
    d.get("http://127.0.0.1:%d/?refresh=0" % mport)
    assert d.title == "tern UP: 4 queues, ready"
    check_figures(d)
    assert d.find_element("id", "refresh-note").text == "not refreshing (refresh=0)"
    shot = os.environ.get("TERN_STATUS_SHOT")
    if shot:
        d.set_window_size(1400, d.execute_script("return document.body.scrollHeight") + 20)
        assert d.save_screenshot(shot), shot
    # the script brings new figures without a reload
    d.get("http://127.0.0.1:%d/?refresh=1" % mport)
    assert d.find_element("id", "refresh-note").text == "refreshing every 1 s"
    marker = d.find_element("id", "main")
    for i in range(7):
        assert conns[0].set("orders", "more %d" % i) == b"STORED\r\n"
    wait_until(lambda: shown(d)["orders"]["items"] == "27", timeout=10,
               what="the page to refresh itself")
    assert "last at" in d.find_element("id", "refresh-note").text
    with pytest.raises(StaleElementReferenceException):
        marker.get_attribute("id")  # the <main> it replaced is gone
    severe = [e for e in d.get_log("browser") if e["level"] == "SEVERE"]
    assert not severe, severe
    for c in conns:
        c.close()


def test_page_without_javascript(ternd, browser):
    srv, mport = start(ternd, conf=CONF)
    conns = known_traffic(srv)
    time.sleep(1.1)
    d = browser(js=False)
    d.get("http://127.0.0.1:%d/" % mport)
    check_figures(d, js=False)
    # the script did not run, and the page was parsed with scripting off:
    # its <noscript> note is shown
    assert d.find_element("id", "refresh-note").text == \
        "JavaScript is off: reload the page to see it change."
    assert len(d.find_elements("css selector", "#refresh-note noscript span")) == 1
    for c in conns:
        c.close()
