"""Take the README's pictures of a built documentation site with a headless Chromium.

Run by scripts/docs-screenshots.sh:  python scripts/docs_screenshots.py BROWSER SITE_DIR OUT_DIR
The browser is driven over the DevTools protocol on a pipe (--remote-debugging-pipe: no port, no
package beyond the standard library), because the command-line --screenshot/--dump-dom modes of
some builds (the headless shell of Chromium 147) never return, and an older headless Chromium drew
a page scrolled to a #fragment blank. Each picture is a 1280x900 window as a reader sees it; at
an API entry the page is scrolled to the entry and the window made tall enough for the entry's
whole parameter table, and the signature and the table must fit their boxes (a clipped one is an
error, not a picture).
"""

from __future__ import annotations

import base64
import json
import os
import select
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["SHOTS", "main"]

WIDTH, HEIGHT = 1280, 900
SHOTS = [  # (picture, page under the site, entry id to scroll to or None for the page's top)
    ("site-home.png", "index.html", None),
    ("site-api-data.png", "api/data/index.html", None),
    ("site-api-callbacks-backup-and-restore.png", "api/callbacks/index.html",
     "distrib.callbacks.BackupAndRestore"),
    ("site-api-callbacks-model-checkpoint.png", "api/callbacks/index.html",
     "distrib.callbacks.ModelCheckpoint"),
]

# Scrolls the entry's heading to just below the theme's fixed header; returns how far down the
# window the entry's parameter table ends, and its signature or table if wider than its box.
_SCROLL_AND_MEASURE = """(async (id) => {
  const heading = document.getElementById(id);
  if (!heading) return {clipped: ["no element with id " + id]};
  const header = document.querySelector("header");  // fixed at the top of the window
  const margin = (header ? header.offsetHeight : 0) + 16;
  window.scrollTo(0, heading.getBoundingClientRect().top + window.scrollY - margin);
  await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
  const entry = heading.closest(".doc-object");
  const signature = entry.querySelector(":scope > .doc-signature pre > code");  // scrolls, not pre
  const table = entry.querySelector(":scope > .doc-contents table");  // the first: Parameters
  if (!signature || !table) return {clipped: ["no signature or no parameter table under " + id]};
  const scroller = table.closest(".md-typeset__scrollwrap");  // the theme's wrapper, if any
  return {bottom: Math.ceil(table.getBoundingClientRect().bottom),
          clipped: [["signature", signature], ["parameter table", table], ["parameter table", scroller]]
            .filter(([, b]) => b && b.scrollWidth > b.clientWidth + 1)
            .map(([what, b]) => `the ${what} is ${b.scrollWidth} px wide in a ${b.clientWidth} px box`)};
})"""


class Browser:
    """A headless Chromium spoken to in DevTools protocol messages over two pipes."""

    def __init__(self, executable: str) -> None:
        to_browser, self._to = os.pipe()
        self._from, from_browser = os.pipe()

        def on_fds_3_and_4() -> None:  # the pipe the browser reads on fd 3 and writes on fd 4
            read, write = os.dup(to_browser), os.dup(from_browser)
            os.dup2(read, 3)
            os.dup2(write, 4)

        self._process = subprocess.Popen(
            [executable, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--hide-scrollbars", "--remote-debugging-pipe", f"--window-size={WIDTH},{HEIGHT}",
             f"--user-data-dir={tempfile.mkdtemp(prefix='docs-screenshots-')}", "about:blank"],
            preexec_fn=on_fds_3_and_4,  # noqa: PLW1509 (this script starts no threads)
            pass_fds=(3, 4), stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_browser)
        os.close(from_browser)
        self._buffer = b""
        self._last_id = 0

    def call(self, method: str, session: str | None = None, **params: object) -> dict:
        """Send one command and return its result (events that arrive meanwhile are dropped)."""
        self._last_id += 1
        message = {"id": self._last_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._to, json.dumps(message).encode() + b"\0")
        reply = self._next(lambda m: m.get("id") == self._last_id)
        if "error" in reply:
            raise RuntimeError(f"docs-screenshots: the browser refused {method}: {reply['error']}")
        return reply["result"]

    def wait_for(self, event: str) -> None:
        """Return when the browser sends `event`."""
        self._next(lambda m: m.get("method") == event)

    def _next(self, wanted) -> dict:
        while True:
            while b"\0" not in self._buffer:
                if not select.select([self._from], [], [], 120)[0]:
                    raise RuntimeError("docs-screenshots: the browser sent nothing for 120 s")
                chunk = os.read(self._from, 1 << 20)
                if not chunk:
                    raise RuntimeError("docs-screenshots: the browser exited (run it by hand with "
                                       "--headless --dump-dom about:blank to see why)")
                self._buffer += chunk
            raw, self._buffer = self._buffer.split(b"\0", 1)
            message = json.loads(raw)
            if wanted(message):
                return message

    def close(self) -> None:
        """Ask the browser to quit, and end it if it does not within 10 s."""
        try:
            self.call("Browser.close")
            self._process.wait(10)
        except (RuntimeError, OSError, subprocess.TimeoutExpired):
            self._process.kill()
            self._process.wait()


def window(browser: Browser, session: str, height: int) -> None:
    """Make the page's window WIDTH x `height` pixels."""
    browser.call("Emulation.setDeviceMetricsOverride", session, width=WIDTH, height=height,
                 deviceScaleFactor=1, mobile=False)


def scroll_to(browser: Browser, session: str, url: str, entry: str) -> int:
    """Scroll to `entry`, check that it fits its boxes, and return where its table ends."""
    result = browser.call("Runtime.evaluate", session, awaitPromise=True, returnByValue=True,
                          expression=f"{_SCROLL_AND_MEASURE}({json.dumps(entry)})")
    measured = result["result"].get("value") or {"clipped": [str(result)]}
    if measured["clipped"]:
        raise RuntimeError(f"docs-screenshots: {url}#{entry} does not fit its boxes: "
                           f"{'; '.join(measured['clipped'])}")
    return measured["bottom"]


def shoot(browser: Browser, url: str, entry: str | None, out: Path) -> None:
    """Save the window showing `url` (scrolled to `entry`) as the PNG `out`."""
    target = browser.call("Target.createTarget", url="about:blank")["targetId"]
    session = browser.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
    window(browser, session, HEIGHT)
    browser.call("Page.enable", session)
    browser.call("Page.navigate", session, url=url)
    browser.wait_for("Page.loadEventFired")
    browser.call("Runtime.evaluate", session, expression="document.fonts.ready.then(() => 0)",
                 awaitPromise=True)
    if entry is not None:
        bottom = scroll_to(browser, session, url, entry)
        if bottom + 24 > HEIGHT:  # a window tall enough to show the whole table
            window(browser, session, bottom + 24)
            scroll_to(browser, session, url, entry)
    data = browser.call("Page.captureScreenshot", session, format="png")["data"]
    out.write_bytes(base64.b64decode(data))
    browser.call("Target.closeTarget", targetId=target)


def main(argv: list[str]) -> int:
    """Take every picture in SHOTS; argv is BROWSER SITE_DIR OUT_DIR."""
    if len(argv) != 3:
        print("usage: docs_screenshots.py BROWSER SITE_DIR OUT_DIR", file=sys.stderr)
        return 2
    executable, site, out_dir = argv[0], Path(argv[1]).resolve(), Path(argv[2])
    try:
        browser = Browser(executable)
    except OSError as error:
        print(f"docs-screenshots: cannot start the browser {executable!r} ({error}); "
              "set CHROMIUM=/path/to/chromium", file=sys.stderr)
        return 1
    try:
        for picture, page, entry in SHOTS:
            shoot(browser, (site / page).as_uri(), entry, out_dir / picture)
            print(out_dir / picture)
    except RuntimeError as error:
        print(error, file=sys.stderr)
        return 1
    finally:
        browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
