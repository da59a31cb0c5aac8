"""report.html in a real headless browser (Debian's chromium + chromedriver, selenium): every
figure renders with data, every dropdown button switches the traces it says it does, and no
console error occurs. Planted failures (a script error, a figure emptied, a dead button) make
the same check fail, so the check can fail.

Skipped with a reason where chromium, chromedriver or selenium is missing; .ci/run installs
them (apt-get install chromium chromium-driver; pip install -e ".[test]") and sets
ESOPT_REQUIRE_BROWSER=1, under which their absence fails instead."""

import os
import re
import shutil

import pytest

from helpers import require, write_synthetic_sweep

try:
    from selenium import webdriver
except ImportError:
    require("browser", "selenium is not installed (pip install -e '.[test]')")
from selenium.common.exceptions import TimeoutException  # noqa: E402
from selenium.webdriver.chrome.options import Options  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

CHROMIUM = os.environ.get("CHROMIUM_BIN") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = os.environ.get("CHROMEDRIVER_BIN") or shutil.which("chromedriver") or "/usr/bin/chromedriver"
RENDER_S, BUTTON_S = 90.0, 10.0  # generous: a loaded 2-core machine

# every figure div of the page has been drawn by Plotly.newPlot (null until then)
JS_READY = """
if (document.readyState !== 'complete' || typeof window.Plotly === 'undefined') return null;
const divs = [...document.querySelectorAll('div.figure')];
if (!divs.length) return null;
for (const el of divs) {
  if (!el.classList.contains('js-plotly-plot') || !el._fullData || !el.querySelector('svg.main-svg')) return null;
}
return divs.map(el => el.id);
"""
JS_POINTS = """
return [...document.querySelectorAll('div.figure')].map(el => [el.id, el._fullData.map(t => {
  if (t.visible === false) return 0;
  if (typeof t._length === 'number' && t._length > 0) return t._length;
  for (const k of ['x', 'y', 'z', 'values', 'dimensions']) if (t[k] && t[k].length) return t[k].length;
  return 0;})]);
"""
JS_MENUS = """
return [...document.querySelectorAll('div.figure')].map(el =>
  (el._fullLayout.updatemenus || []).filter(m => m.visible !== false).map(m => ({
    buttons: m.buttons.filter(b => b.visible !== false).map(b => ({label: b.label, method: b.method, args: b.args}))})));
"""
JS_STATE = """
const el = document.querySelectorAll('div.figure')[arguments[0]];
return {visible: el._fullData.map(t => t.visible), active: el._fullLayout.updatemenus[arguments[1]].active};
"""


@pytest.fixture(scope="module")
def driver():
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        require("browser", "chromium and chromedriver are not installed (apt-get install chromium chromium-driver)")
    opts = Options()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1400,1000"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    drv = webdriver.Chrome(options=opts, service=Service(CHROMEDRIVER))  # no Selenium Manager download
    drv.set_page_load_timeout(RENDER_S)
    drv.set_script_timeout(RENDER_S)
    yield drv
    drv.quit()


@pytest.fixture(scope="module")
def report_page(tmp_path_factory):
    from esopt.study.report.aggregate import aggregate

    root = tmp_path_factory.mktemp("browser") / "sweep"
    write_synthetic_sweep(root, models={"tiny-xs": 3e4, "tiny-s": 1e5, "tiny-m": 3e5}, pops=(8, 16, 32),
                          seeds=(0, 1), algos=("es", "grpo", "none", "es_grpo"), iterations=4, eval_every=2,
                          problems=20, samples=8, statuses={"es-tiny-s-p8-s0": "failed"})
    aggregate(root, bootstrap=100)
    return root / "report.html"


def errors(drv):
    return [e["message"] for e in drv.get_log("browser") if e["level"] == "SEVERE"]


def expected_visibility(button, before):
    if button["method"] not in ("update", "restyle") or not button["args"]:
        return None
    vis = button["args"][0].get("visible")
    if vis is None:
        return None
    idx = list(range(len(before)))
    if button["method"] == "restyle" and len(button["args"]) > 1:
        idx = button["args"][-1]
    elif button["method"] == "update" and len(button["args"]) > 2:
        idx = button["args"][2]
    idx = [idx] if isinstance(idx, int) else idx
    out = list(before)
    for k, i in enumerate(idx):
        out[i] = vis[k % len(vis)] if isinstance(vis, list) else vis
    return out


def click(drv, fig, menu, button):
    el = drv.find_elements(By.CSS_SELECTOR, "div.figure")[fig]
    group = el.find_elements(By.CSS_SELECTOR, "g.updatemenu-container")[menu]
    items = group.find_elements(By.CSS_SELECTOR, "g.updatemenu-button")
    if not items:  # a dropdown: open it first
        group.find_element(By.CSS_SELECTOR, "g.updatemenu-header-group").click()
        items = WebDriverWait(drv, BUTTON_S, poll_frequency=0.05).until(
            lambda d: group.find_elements(By.CSS_SELECTOR, "g.updatemenu-dropdown-button"),
            message="the dropdown did not open")
    items[button].click()


def check_page(drv, path, button_s: float = BUTTON_S) -> dict:
    """Open the page and check it; returns {figure id: trace points}, raises AssertionError."""
    drv.get_log("browser")
    drv.get(path.resolve().as_uri())
    try:
        ids = WebDriverWait(drv, RENDER_S, poll_frequency=0.2).until(lambda d: d.execute_script(JS_READY))
    except TimeoutException:
        raise AssertionError(f"figures did not render; console errors: {errors(drv)}") from None
    points = dict(drv.execute_script(JS_POINTS))
    for fig_id, per_trace in points.items():
        assert any(n > 0 for n in per_trace), f"figure {fig_id} has no trace with points: {per_trace}"
    for f, menus in enumerate(drv.execute_script(JS_MENUS)):
        for m, menu in enumerate(menus):
            for b in reversed(range(len(menu["buttons"]))):  # the first click always changes `active`
                before = drv.execute_script(JS_STATE, f, m)["visible"]
                want = expected_visibility(menu["buttons"][b], before)
                click(drv, f, m, b)

                def switched(d, f=f, m=m, b=b, want=want):
                    s = d.execute_script(JS_STATE, f, m)
                    return s["active"] == b and (want is None or s["visible"] == want)

                WebDriverWait(drv, button_s, poll_frequency=0.05).until(
                    switched, message=f"{ids[f]} button {menu['buttons'][b]['label']!r}: expected visible={want}")
    found = errors(drv)
    assert not found, f"console errors: {found}"
    return points


def test_report_renders_with_data_working_dropdowns_and_no_errors(driver, report_page):
    points = check_page(driver, report_page)
    for fig in ("fig-parcoords", "fig-curves", "fig-passk", "fig-entropy", "fig-heatmap", "fig-status"):
        assert fig in points, sorted(points)


def test_planted_script_error_fails_the_check(driver, report_page, tmp_path):
    bad = tmp_path / "report.html"
    bad.write_text(report_page.read_text().replace("</body>", "<script>throw new Error('planted')</script></body>"))
    with pytest.raises(AssertionError, match="console errors: .*planted"):
        check_page(driver, bad)


def test_planted_empty_figure_fails_the_check(driver, report_page, tmp_path):
    html = report_page.read_text()
    m = re.search(r'(<script type="application/json" class="figure-data" data-figure="fig-heatmap">)(.*?)(</script>)',
                  html, flags=re.S)
    empty = html[:m.start(2)] + '{"data": [], "layout": {}}' + html[m.end(2):]
    bad = tmp_path / "report.html"
    bad.write_text(empty)
    with pytest.raises(AssertionError, match="figure fig-heatmap has no trace with points"):
        check_page(driver, bad)


def test_planted_dead_dropdown_fails_the_check(driver, report_page, tmp_path):
    html = report_page.read_text()  # buttons whose clicks do nothing (execute: false)
    bad = tmp_path / "report.html"
    bad.write_text(html.replace('"method":"update"', '"method":"update","execute":false'))
    assert bad.read_text() != html
    with pytest.raises(Exception, match="expected visible"):
        check_page(driver, bad, button_s=2.0)


LINK = '<a href="http://example.invalid/">click</a>'


def test_a_link_in_a_model_name_renders_as_text(driver, tmp_path):
    """Plotly draws ``<a href>`` in trace names and labels as a live SVG link: a model name that
    carries one is shown as its characters, and the page holds no link at all."""
    from esopt.study.report.aggregate import aggregate

    root = tmp_path / "sweep"
    write_synthetic_sweep(root, models={f"m{LINK}": 3e4, "tiny-s": 1e5}, pops=(8, 16), seeds=(0,),
                          algos=("es", "grpo"), iterations=2, eval_every=2, problems=10, samples=4)
    aggregate(root, bootstrap=20)
    check_page(driver, root / "report.html")
    links = driver.execute_script(  # Plotly's modebar buttons are <a> elements without a target
        "return document.querySelectorAll('svg a').length + Array.from(document.querySelectorAll('a'))"
        ".filter(function (a) { return (a.getAttribute('href') || a.getAttribute('xlink:href') || '')"
        ".indexOf('example.invalid') >= 0; }).length")
    shown = driver.execute_script(  # legends, labels: the name's characters, brackets included
        "var s = arguments[0]; return Array.from(document.querySelectorAll('.figure text'))"
        ".filter(function (t) { return t.textContent.indexOf(s) >= 0; }).length;", LINK)
    assert links == 0 and shown > 0


@pytest.fixture(scope="module")
def quickstart_page(tmp_path_factory):
    """A sweep shaped like the quickstart's: one model, one population, none / es / grpo x 2
    seeds (6 runs), with the claims computed (every one unclear at this grid)."""
    from esopt.study.report.aggregate import aggregate

    root = tmp_path_factory.mktemp("quickstart") / "quickstart"
    write_synthetic_sweep(root, models={"tiny-s": 1e5}, pops=(16,), seeds=(0, 1), algos=("none", "es", "grpo"),
                          iterations=30, eval_every=10, problems=100, samples=16)
    aggregate(root, bootstrap=50, claims=True)
    return root / "report.html"


JS_TOPS = """
const top = id => { const el = document.getElementById(id); return el ? el.getBoundingClientRect().top : null; };
return {height: window.innerHeight, summary: top('summary'), passk: top('fig-passk'), curves: top('fig-curves'),
        claims: top('claims'), heatmap: top('fig-heatmap'), trend: top('fig-trend')};
"""


def test_the_top_of_the_report_is_what_the_sweep_measured(driver, quickstart_page, tmp_path):
    """Screenshot of the top of the quickstart's page: the summary and Pass@K fill the first
    screen, the claims come after the sweep's curves, one row each with the test's wording
    folded (not displayed until opened), and the one-cell heatmap and one-point trend are a
    sentence each, not a plot."""
    check_page(driver, quickstart_page)
    driver.execute_script("window.scrollTo(0, 0)")
    shot = tmp_path / "top.png"
    assert driver.save_screenshot(str(shot)) and shot.stat().st_size > 20_000   # a drawn page, not a blank one
    from PIL import Image

    img = Image.open(shot).convert("L")
    assert img.size[1] >= 600 and len(set(img.getdata())) > 50                     # text and a plot on it
    tops = driver.execute_script(JS_TOPS)
    assert 0 <= tops["summary"] < tops["passk"] < tops["height"], tops          # on the first screen
    assert tops["passk"] < tops["curves"] < tops["claims"], tops
    assert tops["claims"] > tops["height"], tops                                # not on the first screen
    assert tops["heatmap"] is None and tops["trend"] is None, tops              # no plot of one cell / point
    for fig, words in (("fig-heatmap", "a heatmap of one cell shows no pattern"),
                       ("fig-trend", "needs at least two sizes")):
        assert words in driver.find_element(By.ID, f"{fig}-missing").text
    rows = driver.find_elements(By.CSS_SELECTOR, "#table-claims tbody tr")
    assert len(rows) == 11
    for row in rows:
        cells = row.find_elements(By.TAG_NAME, "td")
        assert cells[2].text.startswith("unclear: data") and cells[4].text, row.text
        wording = row.find_element(By.CSS_SELECTOR, "details small")
        assert not wording.is_displayed()                                       # folded away
    rows[0].find_element(By.CSS_SELECTOR, "details summary").click()
    assert rows[0].find_element(By.CSS_SELECTOR, "details small").is_displayed()
