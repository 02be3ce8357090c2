"""A report page as headless Chromium shows it: images decoded, sections filled, the first screen.

`open_report` loads ``report/index.html`` (a copy with a probe script, beside it so relative image
paths resolve the same) in a 1200 x 900 window and returns what the probe saw; `assert_readable`
is the check every report kind's browser test makes. Tests using it carry `requires_chromium`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

WINDOW = (1200, 900)

PROBE = """
<script>
window.addEventListener('load', () => {
  const images = [...document.images];
  const facts = {
    images: images.map(i => ({src: i.getAttribute('src'), ok: i.complete && i.naturalWidth > 0,
                              top: i.getBoundingClientRect().top + window.scrollY})),
    empty: [...document.querySelectorAll('section')].filter(s => {
      const rest = [...s.children].filter(c => c.tagName !== 'H2');
      return rest.length === 0 || rest.every(c => c.textContent.trim() === '' && !c.querySelector('img'));
    }).map(s => (s.querySelector('h2') || {}).textContent || '?'),
    sections: [...document.querySelectorAll('section h2')].map(h => h.textContent),
    section_tops: [...document.querySelectorAll('section h2')].map(
      h => h.getBoundingClientRect().top + window.scrollY),
    tables: document.querySelectorAll('table').length,
  };
  const out = document.createElement('pre');
  out.id = 'probe';
  out.textContent = JSON.stringify(facts);
  document.body.appendChild(out);
});
</script>
"""


@dataclass
class Page:
    """What the probe saw: each image (src, decoded, top in px), empty and all section titles."""

    images: list[dict]
    empty: list[str]
    sections: list[str]
    section_tops: list[float]
    tables: int

    def first_screen(self) -> list[str]:
        """The images whose top edge lies within the first window height."""
        return [i["src"] for i in self.images if i["top"] < WINDOW[1]]

    def sections_on_first_screen(self) -> list[str]:
        """The sections whose heading lies within the first window height."""
        return [title for title, top in zip(self.sections, self.section_tops) if top < WINDOW[1]]


def chromium(*args: str) -> str:
    command = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
               f"--window-size={WINDOW[0]},{WINDOW[1]}", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120).stdout


def open_report(report: Path, screenshot: Path | None = None) -> Page:
    """Load ``report/index.html`` in headless Chromium; optionally save a first-screen screenshot."""
    probe = report / "probe.html"
    probe.write_text((report / "index.html").read_text().replace("</body>", PROBE + "</body>"))
    try:
        dom = chromium("--virtual-time-budget=5000", "--dump-dom", probe.as_uri())
    finally:
        probe.unlink()
    if screenshot is not None:
        chromium(f"--screenshot={screenshot}", (report / "index.html").as_uri())
    found = re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S)
    assert found, f"the probe did not run: {dom[-500:]}"
    facts = json.loads(found.group(1).replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">")
                       .replace("&amp;", "&"))
    return Page(**facts)


def assert_readable(report: Path, first_screen: str, name: str) -> Page:
    """Every image of the page decodes, every PNG beside it is shown, no section is empty, and an
    image whose name contains ``first_screen`` (the report's comparison chart) starts within the
    first screen. The first screen is saved as ``<name>.png`` in ``$TESTBED_SCREENSHOTS`` (to look
    at), else beside the report."""
    folder = Path(os.environ.get("TESTBED_SCREENSHOTS") or report.parent)
    folder.mkdir(parents=True, exist_ok=True)
    screenshot = folder / f"{name}.png"
    page = open_report(report, screenshot)
    broken = [i["src"] for i in page.images if not i["ok"]]
    assert not broken, f"images that did not decode: {broken}"
    assert len(page.images) == len(list(report.glob("*.png"))) >= 1
    assert not page.empty, f"empty sections: {page.empty}"
    assert any(first_screen in src for src in page.first_screen()), (
        f"no {first_screen!r} image in the first screen; there: {page.first_screen()}; all: "
        f"{[(i['src'], round(i['top'])) for i in page.images]}")
    assert screenshot.stat().st_size > 10_000  # a rendered page, not a blank one
    return page
