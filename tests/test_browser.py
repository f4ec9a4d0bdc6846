"""The flame graph SVG, the differential SVG and the HTML report in real headless Chromium, driven over
the DevTools protocol: zoom on click, reset, Ctrl-F search with the matched share, tooltips, no console
errors, no network. Where Chromium cannot start these tests skip, except in CI (``CI=true``): there
they fail, so a broken browser setup is never a silent pass."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import zlib

import pytest
from synthetic import training_profile

from flameprof.render.diff_svg import render_diff_svg
from flameprof.render.formats import Rendering, write_formats
from flameprof.render.options import OutputOptions
from flameprof.render.svg import render_svg

TICKS = {"data": 2, "encoder": 3, "head": 1, "tokenize": 1, "backward": 2, "optimizer": 1}
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1400,1000",
    "--remote-debugging-port=0",
]


def _unavailable(reason: str):
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(
            f"browser tests cannot run in CI: {reason} (scripts/setup.sh installs chromium and "
            "websocket-client)",
            pytrace=False,
        )
    pytest.skip(reason)


class Browser:
    """A headless Chromium and a DevTools-protocol session on its page."""

    def __init__(self, profile_dir: str) -> None:
        import websocket

        binary = shutil.which("chromium") or shutil.which("chromium-browser")
        if binary is None:
            _unavailable("chromium is not installed")
        self.proc = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={profile_dir}", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        port = None
        deadline = time.monotonic() + 60
        while port is None and time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line and self.proc.poll() is not None:
                break
            m = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line)
            port = int(m.group(1)) if m else None
        if port is None:
            self.close()
            _unavailable("chromium did not start its DevTools endpoint")
        # keep draining its log, so a chatty browser never blocks on a full pipe
        threading.Thread(target=self.proc.stderr.read, daemon=True).start()
        pages = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30))
        url = next(p["webSocketDebuggerUrl"] for p in pages if p["type"] == "page")
        self.ws = websocket.create_connection(url, timeout=60, suppress_origin=True)
        self.next_id = 0
        self.events: list[dict] = []
        self.prompt_answer: str | None = None
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable")

    def close(self) -> None:
        if getattr(self, "ws", None) is not None:
            self.ws.close()
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the browser and its helper processes
        except ProcessLookupError:
            pass
        self.proc.wait()

    def _handle(self, msg: dict) -> None:
        self.events.append(msg)
        if msg.get("method") == "Page.javascriptDialogOpening":
            self._send(
                "Page.handleJavaScriptDialog",
                accept=self.prompt_answer is not None,
                promptText=self.prompt_answer or "",
            )

    def _send(self, method: str, **params) -> int:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        return self.next_id

    def call(self, method: str, **params) -> dict:
        sent = self._send(method, **params)
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == sent:
                if "error" in msg:
                    raise AssertionError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                self._handle(msg)

    def open(self, path: str) -> None:
        self.events.clear()
        self.call("Page.navigate", url="file://" + path)
        deadline = time.monotonic() + 60
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events):
            assert time.monotonic() < deadline, "page did not load"
            self._handle(json.loads(self.ws.recv()))

    def js(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        assert "exceptionDetails" not in result, result["exceptionDetails"]
        return result["result"].get("value")

    def center(self, selector_js: str) -> tuple[float, float]:
        """Viewport centre of the element ``selector_js`` evaluates to, scrolled into view."""
        box = self.js(
            f"(function(){{var e={selector_js}; e.scrollIntoView({{block:'center'}});"
            f"var r=e.getBoundingClientRect(); return [r.x+r.width/2, r.y+r.height/2];}})()"
        )
        return box[0], box[1]

    def mouse(self, kind: str, x: float, y: float) -> None:
        self.call(
            "Input.dispatchMouseEvent",
            type=kind,
            x=x,
            y=y,
            button="left" if kind != "mouseMoved" else "none",
            clickCount=1 if kind != "mouseMoved" else 0,
        )

    def click(self, selector_js: str) -> None:
        x, y = self.center(selector_js)
        self.mouse("mouseMoved", x, y)
        self.mouse("mousePressed", x, y)
        self.mouse("mouseReleased", x, y)

    def hover(self, selector_js: str) -> None:
        x, y = self.center(selector_js)
        self.mouse("mouseMoved", x + 1, y)

    def ctrl_f(self, answer: str) -> None:
        """Press Ctrl-F and answer the search prompt."""
        self.prompt_answer = answer
        for kind in ("rawKeyDown", "keyUp"):
            self.call(
                "Input.dispatchKeyEvent",
                type=kind,
                key="f",
                code="KeyF",
                modifiers=2,
                windowsVirtualKeyCode=70,
            )
        self.prompt_answer = None

    def errors(self) -> list[str]:
        out = []
        for e in self.events:
            method, params = e.get("method"), e.get("params", {})
            if method == "Runtime.exceptionThrown":
                out.append(json.dumps(params["exceptionDetails"])[:300])
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                out.append(json.dumps(params.get("args"))[:300])
            elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
                out.append(params["entry"]["text"])
        return out

    def requests(self) -> list[str]:
        return [
            e["params"]["request"]["url"]
            for e in self.events
            if e.get("method") == "Network.requestWillBeSent"
        ]


@pytest.fixture(scope="module")
def browser():
    try:
        import websocket  # noqa: F401
    except ImportError:
        _unavailable("the websocket-client package is not installed")
    with tempfile.TemporaryDirectory() as profile_dir:
        b = Browser(profile_dir)
        try:
            yield b
        finally:
            b.close()


def frame(name: str) -> str:
    """JS for the frame rectangle named ``name``."""
    return (
        "Array.prototype.find.call(document.querySelectorAll('#f rect'), "
        f"r => r.getAttribute('n') === {json.dumps(name)})"
    )


ENCODER = "Net.encoder (Encoder)"
LINEAR = "linear (torch/nn/functional.py:2000)"


def check_flame_graph(b: Browser, linear_share: float) -> None:
    """Zoom, reset, search and tooltip on the flame graph of the page ``b`` has open."""
    units = b.js("UNITS")
    assert b.js("document.getElementById('f').getAttribute('viewBox')").startswith("0 0 ")
    b.click(frame(ENCODER))
    x, w = b.js(
        f"(function(){{var r={frame(ENCODER)}; return [+r.getAttribute('x'), +r.getAttribute('width')];}})()"
    )
    view = b.js("document.getElementById('f').getAttribute('viewBox')").split()
    assert [float(view[0]), float(view[2])] == [x, w]
    assert b.js("document.getElementById('reset').style.display") == ""
    assert b.js(f"{frame('train (train.py:10)')}.classList.contains('an')")  # its ancestors are dimmed
    labels = b.js("Array.prototype.map.call(document.querySelectorAll('#l text'), t => t.textContent)")
    assert any(
        t.startswith("linear (torch/nn/functional.py:2000)") for t in labels
    )  # room for the full name now
    b.click("document.getElementById('reset')")
    assert b.js("document.getElementById('f').getAttribute('viewBox')").split()[:3] == ["0", "0", str(units)]
    assert b.js("document.getElementById('reset').style.display") == "none"

    b.ctrl_f("^linear ")
    assert b.js("document.getElementById('matched').textContent") == f"Matched: {100 * linear_share:.1f}%"
    assert b.js("document.querySelectorAll('#f rect.hl').length") == 2
    b.click("document.getElementById('search')")  # "Reset search"
    assert b.js("document.querySelectorAll('#f rect.hl').length") == 0

    b.hover(frame(ENCODER))
    assert b.js("document.getElementById('tip').getAttribute('visibility')") == "visible"


def test_flame_graph_svg(browser, tmp_path):
    path = tmp_path / "profile.svg"
    path.write_text(render_svg(training_profile(TICKS)))
    browser.open(str(path))
    check_flame_graph(browser, 4 / 10)
    browser.hover(frame(LINEAR))
    tip = browser.js("[1,2,3].map(i => document.getElementById('t' + i).textContent)")
    assert tip == [LINEAR, "300 ms (30.00%), 30 samples", "PyTorch"]
    assert browser.errors() == []


def test_differential_svg(browser, tmp_path):
    path = tmp_path / "diff.svg"
    path.write_text(render_diff_svg(training_profile(TICKS), training_profile(dict(TICKS, encoder=5))))
    browser.open(str(path))
    check_flame_graph(browser, 6 / 12)
    browser.hover(frame("Module._call_impl (torch/nn/modules/module.py:1740)"))
    tip = browser.js("[1,2,3].map(i => document.getElementById('t' + i).textContent)")
    assert tip[1] == "600 ms (50.00%), 60 samples"
    assert tip[2] == "total +200.0 ms (+50%), self +0.0 ms (+0%)"
    assert browser.errors() == []


def test_html_report(browser, tmp_path):
    profile = training_profile(TICKS, steps=12, warmup_ticks=20)
    [path] = write_formats(Rendering(profile, OutputOptions()), str(tmp_path / "profile"), ("html",))
    browser.open(path)
    assert browser.js("document.getElementById('fp-verdict').textContent").startswith("HIGHLY input-bound")
    assert browser.js("document.querySelectorAll('#fp-step-chart rect').length") == 12 * 5  # 5 phases a step
    assert browser.js("document.querySelector('#fp-layers td.name').textContent") == ENCODER
    check_flame_graph(browser, 4 * 12 / (10 * 12 + 20))
    browser.hover(frame(LINEAR))
    assert browser.js("document.getElementById('t1').textContent") == LINEAR
    assert browser.errors() == []
    assert [u for u in browser.requests() if u != "file://" + path] == []  # everything is in the file


def png_pixel(data: bytes) -> tuple[int, int, int]:
    """The first pixel of a PNG Chromium wrote (8 bits a channel, RGB or RGBA, not interlaced)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, channels = 8, b"", 0
    while pos < len(data):
        size = struct.unpack(">I", data[pos : pos + 4])[0]
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + size]
        if kind == b"IHDR":
            depth, colour, interlace = body[8], body[9], body[12]
            assert depth == 8 and colour in (2, 6) and interlace == 0, (depth, colour, interlace)
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + size
    row = zlib.decompress(idat)
    assert row[0] <= 4, row[0]  # every filter predicts 0 for the first row's first pixel: stored as it is
    return tuple(row[1 : 1 + channels][:3])


def test_the_demo_opens_on_its_loop(browser, tmp_path):
    """``flameprof demo``'s flame graph at 1400x900: under 1,000 pixels high, no importlib chain, and its
    layers painted on the first screen (a screenshot's pixel in each layer over 100 px wide is its colour)."""
    out = tmp_path / "demo"
    done = subprocess.run(
        [sys.executable, "-m", "flameprof", "demo", "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    svg = (out / "profile.svg").read_text()
    height = int(re.search(r'<svg[^>]* height="(\d+)"', svg).group(1))
    assert height < 1000
    assert 'n="import torch"' in svg and "_find_and_load" not in svg and 'n="startup"' in svg
    browser.call(
        "Emulation.setDeviceMetricsOverride", width=1400, height=900, deviceScaleFactor=1, mobile=False
    )
    try:
        browser.open(str(out / "profile.svg"))
        layers = browser.js(
            "Array.prototype.filter.call(document.querySelectorAll('#f rect'), "
            "r => /^y/.test(r.getAttribute('class')))"
            ".map(r => { var b = r.getBoundingClientRect(); "
            "return [r.getAttribute('n'), b.x, b.y, b.width, b.height, getComputedStyle(r).fill]; })"
            ".filter(l => l[3] > 100).sort((a, b) => b[3] - a[3])"
        )
        assert len(layers) >= 2 and layers[0][0] == "SmallCNN", layers  # the model and its features
        for name, x, y, width, h, fill in layers:
            assert 0 <= y and y + h <= 900 and 0 <= x and x + width <= 1400, (name, x, y, width)
            shot = browser.call(
                "Page.captureScreenshot",
                format="png",
                clip={
                    "x": x + width - 3,
                    "y": y + h / 2,
                    "width": 1,
                    "height": 1,
                    "scale": 1,
                },  # past its label
            )
            painted = png_pixel(base64.b64decode(shot["data"]))
            expected = tuple(int(v) for v in re.findall(r"\d+", fill)[:3])
            assert max(abs(a - b) for a, b in zip(painted, expected)) <= 2, (name, painted, fill)
    finally:
        browser.call("Emulation.clearDeviceMetricsOverride")
    assert browser.errors() == []


def _fill(b: Browser, name: str) -> str:
    return b.js(f"getComputedStyle({frame(name)}).fill")


def _rgb(color: str) -> str:
    return "rgb({}, {}, {})".format(*(int(color[i : i + 2], 16) for i in (1, 3, 5)))


def test_frames_coloured_by_phase_in_the_svg_and_by_the_html_reports_toggle(browser, tmp_path):
    from flameprof.render.svg import PHASE_COLORS

    profile = training_profile(TICKS)
    [svg] = write_formats(Rendering(profile, OutputOptions(color="phase")), str(tmp_path / "phase"), ("svg",))
    browser.open(svg)
    assert _fill(browser, ENCODER) == _rgb(PHASE_COLORS["forward"])
    assert _fill(browser, "SGD.step (torch/optim/sgd.py:80)") == _rgb(PHASE_COLORS["optimizer"])
    legend = browser.js(
        "Array.prototype.map.call(document.querySelectorAll('#plegend text'), t => t.textContent)"
    )
    assert legend == ["data.wait", "forward", "backward", "optimizer", "other"]
    assert browser.js("getComputedStyle(document.getElementById('legend')).display") == "none"

    [page] = write_formats(Rendering(profile, OutputOptions()), str(tmp_path / "report"), ("html",))
    browser.open(page)
    kind_fill = _fill(browser, ENCODER)
    assert kind_fill != _rgb(PHASE_COLORS["forward"])
    browser.click("document.getElementById('fp-color-phase')")
    assert _fill(browser, ENCODER) == _rgb(PHASE_COLORS["forward"])
    assert _fill(
        browser, "_MultiProcessingDataLoaderIter._get_data (torch/utils/data/dataloader.py:1300)"
    ) == _rgb(PHASE_COLORS["data.wait"])
    assert browser.js("getComputedStyle(document.getElementById('plegend')).display") != "none"
    browser.ctrl_f("^linear ")  # a search's highlight still shows over the phase colours
    assert browser.js("getComputedStyle(document.querySelector('#f rect.hl')).fill") == "rgb(224, 60, 224)"
    browser.click("document.getElementById('fp-color-phase')")
    assert _fill(browser, ENCODER) == kind_fill
    assert browser.errors() == []
