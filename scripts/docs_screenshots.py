#!/usr/bin/env python
"""Open the built documentation site in headless Chromium and screenshot four pages.

Serves the site on 127.0.0.1, opens home, the plugin author's guide, the specification and the
protocols' API page, and for each one asserts:

- no console error, no uncaught exception, no failed request;
- no request leaves the machine (every request the page makes goes to the local server; the
  browser also resolves every other host to nothing, so an attempt fails instead of leaking);
- the page rendered: its title is set and, on the home page, the architecture diagram loaded.

Screenshots go to ``--out`` (default ``site-screenshots/``) as ``home.png``, ``guide.png``,
``spec.png``, ``api.png``. Chromium is driven through the DevTools protocol over a pipe
(``--remote-debugging-pipe``), so nothing but the standard library is needed.

Usage::

    apt-get install -y chromium                       # once
    python scripts/docs_screenshots.py                # builds the site first (mkdocs build)
    python scripts/docs_screenshots.py --site /tmp/site --out shots

Exit status: 0 every page passed, 1 a page failed (each problem printed), 2 no browser.
"""

from __future__ import annotations

import argparse
import base64
import functools
import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
PAGES = {
    "home": "",
    "guide": "plugin-authors/guide/",
    "spec": "spec/",
    "api": "api/#trainspec.CheckpointIO",  # a protocol, its lifecycle first
}
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
SETTLE_S = 1.0  # a page is done when its load event fired and no request started for this long
PAGE_LIMIT_S = 60.0


class Browser:
    """Headless Chromium, driven through the DevTools protocol on a pipe (fds 3 and 4)."""

    def __init__(self, executable: str, profile: str) -> None:
        to_browser_read, self._to_browser = os.pipe()
        self._from_browser, from_browser_write = os.pipe()
        arguments = [
            executable,
            "--headless=new",
            "--remote-debugging-pipe",
            "--no-sandbox",  # root in a container: the sandbox needs user namespaces
            "--disable-gpu",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--disable-features=Translate,OptimizationHints,MediaRouter",
            # Every host but the local server resolves to nothing: a request that tries to
            # leave fails (and is reported), it never reaches the network.
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
            f"--user-data-dir={profile}",
            "about:blank",
        ]

        def pipes() -> None:
            os.dup2(to_browser_read, 3)
            os.dup2(from_browser_write, 4)

        self._process = subprocess.Popen(
            arguments,
            preexec_fn=pipes,  # the DevTools pipe must be fds 3 and 4 of the browser
            close_fds=False,  # (closing would run after preexec_fn and close them)
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_browser_read)
        os.close(from_browser_write)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except Exception:  # closing anyway
            pass
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)

    def call(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        """Send one command and return its result; events that arrive meanwhile are kept."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session is not None:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read(timeout=PAGE_LIMIT_S)
            if reply is None:
                raise TimeoutError(f"no reply to {method}")
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return dict(reply.get("result", {}))
            self.events.append(reply)

    def pump(self, seconds: float) -> None:
        """Collect events for up to ``seconds``."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            event = self._read(timeout=left)
            if event is not None:
                self.events.append(event)

    def _read(self, timeout: float) -> dict[str, Any] | None:
        import select

        deadline = time.monotonic() + timeout
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self._from_browser], [], [], left)
            if not ready:
                return None
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise RuntimeError("the browser closed the DevTools pipe")
            self._buffer += chunk
        raw, _, self._buffer = self._buffer.partition(b"\0")
        return dict(json.loads(raw))


def serve(site: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def check_page(browser: Browser, base: str, name: str, path: str, out: Path) -> list[str]:
    """Open one page in a fresh tab; its problems (empty when it passed)."""
    target = browser.call("Target.createTarget", url="about:blank")["targetId"]
    session = browser.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
    for domain in ("Page", "Runtime", "Log", "Network"):
        browser.call(f"{domain}.enable", session)
    browser.call(
        "Emulation.setDeviceMetricsOverride",
        session,
        width=1280,
        height=900,
        deviceScaleFactor=1,
        mobile=False,
    )
    browser.events.clear()
    browser.call("Page.navigate", session, url=base + path)
    deadline = time.monotonic() + PAGE_LIMIT_S
    loaded = False
    while time.monotonic() < deadline:
        seen = len(browser.events)
        browser.pump(SETTLE_S)
        mine = [e for e in browser.events if e.get("sessionId") == session]
        loaded = loaded or any(e.get("method") == "Page.loadEventFired" for e in mine)
        fresh = browser.events[seen:]
        if loaded and not any(e.get("method") == "Network.requestWillBeSent" for e in fresh):
            break
    problems: list[str] = [] if loaded else [f"{name}: the page never finished loading"]
    local = urlsplit(base).netloc
    for event in (e for e in browser.events if e.get("sessionId") == session):
        method, params = event.get("method"), event.get("params", {})
        if method == "Network.requestWillBeSent":
            url = params["request"]["url"]
            if urlsplit(url).scheme not in ("data", "blob", "about") and (
                urlsplit(url).netloc != local
            ):
                problems.append(f"{name}: a request left the machine: {url}")
        elif method == "Network.loadingFailed" and not params.get("canceled"):
            problems.append(f"{name}: a request failed: {params.get('errorText')}")
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            problems.append(f"{name}: uncaught exception: {details.get('text')} {details}")
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            texts = [str(a.get("value", a.get("description"))) for a in params.get("args", [])]
            problems.append(f"{name}: console error: {' '.join(texts)}")
        elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
            entry = params["entry"]
            problems.append(f"{name}: console error: {entry.get('text')} {entry.get('url', '')}")
    check = browser.call(
        "Runtime.evaluate",
        session,
        expression=(
            "JSON.stringify({title: document.title, images: Array.from(document.images)"
            ".map(i => [i.getAttribute('src'), i.complete && i.naturalWidth > 0])})"
        ),
        returnByValue=True,
    )
    rendered = json.loads(check["result"]["value"])
    if not rendered["title"]:
        problems.append(f"{name}: the page has no title")
    for source, ok in rendered["images"]:
        if not ok:
            problems.append(f"{name}: image {source} did not load")
    if name == "home" and not any(s.endswith("architecture.svg") for s, _ in rendered["images"]):
        problems.append("home: the architecture diagram is missing")
    shot = browser.call("Page.captureScreenshot", session, format="png")
    (out / f"{name}.png").write_bytes(base64.b64decode(shot["data"]))
    browser.call("Target.closeTarget", targetId=target)
    return problems


def build_site(directory: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--quiet",
            "--site-dir",
            str(directory),
        ],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=True,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", type=Path, help="a built site (default: build one now)")
    parser.add_argument("--out", type=Path, default=Path("site-screenshots"))
    parser.add_argument("--browser", help="the Chromium executable (default: found on PATH)")
    args = parser.parse_args(argv)
    executable = args.browser or next((b for b in map(shutil.which, BROWSERS) if b), None)
    if executable is None:
        print("no Chromium found: apt-get install -y chromium", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="trainspec-screenshots-") as scratch:
        site = args.site
        if site is None:
            site = Path(scratch) / "site"
            build_site(site)
        server, base = serve(site)
        browser = Browser(executable, str(Path(scratch) / "profile"))
        problems: list[str] = []
        try:
            for name, path in PAGES.items():
                found = check_page(browser, base, name, path, args.out)
                problems += found
                print(f"{name:6} {base + path}: {'ok' if not found else 'FAILED'}")
        finally:
            browser.close()
            server.shutdown()
    for problem in problems:
        print(problem, file=sys.stderr)
    print(f"screenshots in {args.out}/ ({', '.join(f'{n}.png' for n in PAGES)})")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
