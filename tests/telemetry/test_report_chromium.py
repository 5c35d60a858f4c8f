"""The HTML report in real headless Chromium: it renders, a tree expands, a screenshot exists.

The probe is a copy of the report with one inline script appended that clicks a call's
summary and writes what it saw into the DOM; `--dump-dom` hands that DOM back. A call's body
is built lazily from the data block: before the click the denied call's tree is not in the
DOM at all; after it, the key read is there, visible and highlighted. Hostile text from the
record lands as text (no script runs), and a call whose server died reads ERROR.
"""

from __future__ import annotations

import html
import json
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from mtguard_rt.cli import main
from mtguard_rt.telemetry import AuditLog

from .fixtures import SSH_KEY, allowed_record, denied_record, pre_denied_record

HOSTILE = "</script><script>window.pwned=1</script><img src=x onerror=window.pwned=1>"
DIED = "mtguard: the server exited (code 137) before answering"

pytestmark = pytest.mark.chromium

CHROMIUM_TIMEOUT_S = 60  # a cold start on a loaded 2-core box takes a few seconds

PROBE = """<script>
(function(){
  var sec=document.getElementById('call-1'), d=sec.querySelector('details');
  function seen(el){ return el.checkVisibility() && el.getClientRects().length>0; }
  var before={open:d.open, nodes:sec.querySelectorAll('li.node').length};
  sec.querySelector('summary').click();
  var key=sec.querySelector('li.file.hit .leaf');
  var after={open:d.open, visible:seen(key), text:key.textContent,
    evidence:[].map.call(sec.querySelectorAll('li.evidence'),function(e){return e.textContent;})};
  var died=document.getElementById('call-4');
  died.querySelector('summary').click();
  var q=document.getElementById('filter');
  q.value='send_email'; q.dispatchEvent(new Event('input'));
  var rows=document.querySelectorAll('#calls tbody tr');
  var shown=[].filter.call(rows,function(r){return !r.hidden;}).length;
  document.body.setAttribute('data-probe', JSON.stringify({before:before, after:after,
    hits:[].map.call(sec.querySelectorAll('.hit'),
                     function(n){return n.getAttribute('data-rules');}),
    shown:shown, pwned:!!window.pwned,
    died:{badge:died.querySelector('.badge').textContent,
          why:died.querySelector('.nores').textContent},
    rowBadges:[].map.call(rows,function(r){return r.querySelector('.badge').textContent;})}));
})();
</script>"""


def chromium(tmp: Path, *args: str, timeout: float = CHROMIUM_TIMEOUT_S) -> str:
    """Run headless Chromium to completion; kill its whole process group whatever happens."""
    cmd = [
        "chromium", "--headless", "--no-sandbox", "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
        f"--user-data-dir={tmp / 'profile'}", "--window-size=1280,1000", *args,
    ]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True, text=True
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # renderer/zygote children share the group
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)
    assert proc.returncode == 0, f"chromium exited {proc.returncode}"
    return out


@pytest.fixture
def report(tmp_path: Path) -> Path:
    log = tmp_path / "audit.jsonl"
    denied, died = denied_record(), allowed_record("10")
    denied.violations[0].evidence.append(HOSTILE)
    died.reasons.append(DIED)  # what the guard records when the server dies mid-call
    with AuditLog(log) as audit:
        for r in (denied, allowed_record(), pre_denied_record(), died):
            audit.write_sync(r)
    out = tmp_path / "report.html"
    assert main(["view", str(log), "--html", str(out)]) == 0
    return out


def test_report_renders_and_a_tree_expands(report: Path, tmp_path: Path) -> None:
    probe = tmp_path / "probe.html"
    probe.write_text(report.read_text().replace("</body>", PROBE + "</body>"))
    dom = chromium(tmp_path, "--dump-dom", probe.as_uri())
    match = re.search(r'data-probe="([^"]*)"', dom)
    assert match, "the probe script did not run"
    seen = json.loads(html.unescape(match.group(1)))
    assert seen["before"] == {"open": False, "nodes": 0}  # collapsed, body not yet built
    assert seen["after"]["open"] is True and seen["after"]["visible"] is True
    assert SSH_KEY in seen["after"]["text"]
    assert HOSTILE in seen["after"]["evidence"] and seen["pwned"] is False  # text, not markup
    assert seen["died"] == {"badge": "ERROR", "why": "no result: " + DIED[len("mtguard: "):]}
    assert seen["rowBadges"] == ["DENY", "ALLOW", "DENY", "ERROR"]
    # evidence highlighted: cat (pid 102), its key read, the server (pid 100), its connect
    assert sorted(seen["hits"]) == sorted(
        ["undeclared-egress", "secret-file-read", "secret-file-read", "undeclared-egress"]
    )
    assert seen["shown"] == 1  # the filter box hides the other rows


def test_report_screenshot_with_deep_link(report: Path, tmp_path: Path) -> None:
    shot = tmp_path / "report.png"
    chromium(tmp_path, f"--screenshot={shot}", report.as_uri() + "#call-1")
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1280, 1000)
    assert len(data) > 20_000  # a rendered page, not a blank frame
