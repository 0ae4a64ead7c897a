#!/usr/bin/python3
"""Drives the dashboard page in headless Chromium through the DevTools protocol, for
tests/http/dashboard_browser_test.cc. Standard library only: Chromium is started with
--remote-debugging-pipe (commands on its fd 3, answers on its fd 4, NUL-separated JSON).

usage:
  dashboard_browser.py CHROMIUM PROFILE live URL SECONDS
      Loads URL (a study page), counts the history points once the page has drawn, then waits
      up to SECONDS for more, in the same page (no reload: a mark set in the page must still be
      there). Prints {"before", "after", "same_page", "refreshes_before", "refreshes_after"}.
  dashboard_browser.py CHROMIUM PROFILE click URL BUTTON_ID [TOKEN]
      Loads URL; with TOKEN, types it into the page's token form once; clicks BUTTON_ID and
      waits for the page's message. Prints {"class", "message", "token_kept"}.
  dashboard_browser.py CHROMIUM PROFILE eval URL EXPRESSION
      Loads URL, waits until the page has drawn its data, prints {"value": EXPRESSION's value}.
  dashboard_browser.py CHROMIUM PROFILE shot URL OUT.png
      Loads URL, waits until the page has drawn its data, saves a 1280x1800 screenshot.
Exit status 0 when the scenario ran (its outcome is for the caller to judge), 1 otherwise.
"""

import base64
import json
import os
import subprocess
import sys
import time


class Browser:
    def __init__(self, chromium, profile):
        to_chrome_r, to_chrome_w = os.pipe()
        from_chrome_r, from_chrome_w = os.pipe()
        hi_r = os.dup(to_chrome_r)
        hi_w = os.dup(from_chrome_w)

        def fds():
            os.dup2(hi_r, 3)
            os.dup2(hi_w, 4)

        args = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                "--no-first-run", "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--disable-dev-shm-usage", "--remote-debugging-pipe",
                "--user-data-dir=" + profile, "--window-size=1280,1800", "about:blank"]
        self.proc = subprocess.Popen(args, pass_fds=(hi_r, hi_w, 3, 4), preexec_fn=fds,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for fd in (to_chrome_r, from_chrome_w, hi_r, hi_w):
            os.close(fd)
        self.w = to_chrome_w
        self.r = from_chrome_r
        self.buf = b""
        self.next_id = 0
        self.session = None

    def send(self, method, params=None, session=True, timeout=30):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        os.write(self.w, json.dumps(msg).encode() + b"\0")
        deadline = time.time() + timeout
        while time.time() < deadline:
            while b"\0" not in self.buf:
                chunk = os.read(self.r, 1 << 20)
                if not chunk:
                    raise RuntimeError("chromium closed the DevTools pipe")
                self.buf += chunk
            raw, self.buf = self.buf.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError("%s: %s" % (method, reply["error"]))
                return reply.get("result", {})
        raise RuntimeError("no answer to " + method)

    def open(self, url):
        target = self.send("Target.createTarget", {"url": "about:blank"}, session=False)
        self.session = self.send("Target.attachToTarget",
                                 {"targetId": target["targetId"], "flatten": True},
                                 session=False)["sessionId"]
        self.send("Page.enable")
        self.send("Runtime.enable")
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": 1280, "height": 1800, "deviceScaleFactor": 1, "mobile": False})
        self.send("Page.navigate", {"url": url})

    def eval(self, expression):
        r = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in r:
            raise RuntimeError("%s: %s" % (expression, r["exceptionDetails"]))
        return r["result"].get("value")

    def wait(self, expression, seconds):
        deadline = time.time() + seconds
        while time.time() < deadline:
            try:
                value = self.eval(expression)
                if value:
                    return value
            except RuntimeError:
                pass  # the document is not there yet
            time.sleep(0.2)
        return None

    def close(self):
        try:
            self.send("Browser.close", session=False, timeout=5)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


REFRESHES = "Number((document.getElementById('updated') || {dataset: {}}).dataset.refreshes || 0)"
POINTS = "document.querySelectorAll('#history circle[data-trial]').length"


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    chromium, profile, mode, url = sys.argv[1:5]
    b = Browser(chromium, profile)
    try:
        b.open(url)
        if not b.wait(REFRESHES + " >= 1", 60):
            sys.exit("the page did not draw its data within 60 s")
        if mode == "live":
            seconds = float(sys.argv[5])
            before = b.eval(POINTS)
            refreshes_before = b.eval(REFRESHES)
            b.eval("window.__sameDocument = 'yes'")
            b.wait(POINTS + " > " + str(before), seconds)
            print(json.dumps({"before": before, "after": b.eval(POINTS),
                              "same_page": b.eval("window.__sameDocument === 'yes'"),
                              "refreshes_before": refreshes_before,
                              "refreshes_after": b.eval(REFRESHES)}))
        elif mode == "click":
            button = sys.argv[5]
            if len(sys.argv) > 6:
                b.eval("document.getElementById('token-button').click();"
                       "document.getElementById('token-input').value = %s;"
                       "document.getElementById('token-save').click(); true"
                       % json.dumps(sys.argv[6]))
            b.eval("document.getElementById(%s).click(); true" % json.dumps(button))
            b.wait("['ok', 'error'].indexOf(document.getElementById('message').className) >= 0", 30)
            print(json.dumps({"class": b.eval("document.getElementById('message').className"),
                              "message": b.eval("document.getElementById('message').textContent"),
                              "token_kept": b.eval(
                                  "!!sessionStorage.getItem('triald-dashboard-token')")}))
        elif mode == "eval":
            print(json.dumps({"value": b.eval(sys.argv[5])}))
        elif mode == "shot":
            time.sleep(0.5)  # layout of what was just drawn
            shot = b.send("Page.captureScreenshot", {"format": "png"})
            with open(sys.argv[5], "wb") as f:
                f.write(base64.b64decode(shot["data"]))
            print(json.dumps({"ok": True}))
        else:
            sys.exit("unknown mode " + mode)
    finally:
        b.close()


if __name__ == "__main__":
    main()
