"""One self-contained HTML report of audit records (inline CSS and JS, no external assets).

A table of calls with per-stage timing bars, then one collapsible section per call: the
violations with their evidence, the timings, and the behavior tree as nested `<details>`
with the nodes the evidence names highlighted. Every string from a record is escaped (it is
attacker-influenced) and a CSP forbids any fetch. `#call-N` in the URL opens that call.
"""

from __future__ import annotations

import html
import time
from collections.abc import Sequence

from ..model import AuditRecord
from .explain import rollback_lines
from .viewtree import ViewNode, build_view, stage_timings

_CSP = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:"

_CSS = """
:root{--deny:#c62828;--allow:#2e7d32;--warn:#ef6c00;--hit:#fff3cd;--line:#ddd;--dim:#666}
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:0 24px 48px;color:#222}
h1{font-size:20px;margin:18px 0 4px}.meta{color:var(--dim);margin:0 0 12px}
.controls{display:flex;gap:10px;align-items:center;margin-bottom:12px}
.controls input[type=search]{width:320px;padding:4px 6px}
table{border-collapse:collapse;width:100%;margin-bottom:24px}
th,td{border-bottom:1px solid var(--line);padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f5f5f5;font-weight:600}td.num{text-align:right;font-variant-numeric:tabular-nums}
.badge{display:inline-block;padding:0 6px;border-radius:3px;color:#fff;font-weight:700;
font-size:12px}
.badge.deny{background:var(--deny)}.badge.allow{background:var(--allow)}
.badge.incomplete{background:var(--warn)}
.bar{display:flex;width:160px;height:10px;background:#eee;border-radius:2px;overflow:hidden}
.bar span{display:block;height:100%}.bar .pre{background:#5c6bc0}.bar .exec{background:#26a69a}
.bar .settle{background:#9ccc65}.bar .post{background:#ab47bc}
small,.dim{color:var(--dim)}
section.call{border:1px solid var(--line);border-radius:4px;margin:10px 0}
section.call.deny{border-left:4px solid var(--deny)}
section.call.allow{border-left:4px solid var(--allow)}
section.call>details>summary{padding:6px 10px;cursor:pointer;font-weight:600}
.body{padding:4px 14px 12px}
ul.tree,ul.tree ul{list-style:none;margin:0;padding-left:18px;border-left:1px dotted #bbb}
ul.tree{border-left:none;padding-left:0}
li.node{margin:2px 0}li.node>details>summary{cursor:pointer}
.k{display:inline-block;min-width:64px;margin-right:4px;font-size:11px;color:var(--dim);text-transform:uppercase}
.process>details>summary .label{font-weight:600}
.t{display:inline-block;min-width:72px;font-size:11px;color:var(--dim);
font-variant-numeric:tabular-nums}
.leaf{display:block}
.hit>details>summary,.hit>.leaf{background:var(--hit);outline:1px solid #f0c36d;border-radius:2px}
.rule{display:inline-block;margin-left:6px;padding:0 5px;border-radius:3px;background:var(--deny);
color:#fff;font-size:11px}.failed{color:var(--warn)}
code{font:12px ui-monospace,SFMono-Regular,Menlo,monospace;word-break:break-all}
.killed{margin-left:6px;padding:0 5px;border-radius:3px;background:var(--deny);color:#fff;
font-size:11px;font-weight:700}
.violation{margin:4px 0}.violation b{color:var(--deny)}.violation.observe b{color:var(--warn)}
"""

_JS = """
(function(){
  function openTarget(){
    var id=decodeURIComponent(location.hash.slice(1)); if(!id) return;
    var el=document.getElementById(id); if(!el) return;
    var d=el.querySelector('details'); if(d) d.open=true;
    for(var p=el.parentElement;p;p=p.parentElement){ if(p.tagName==='DETAILS') p.open=true; }
    el.scrollIntoView();
  }
  window.addEventListener('hashchange',openTarget); openTarget();
  function all(open){ document.querySelectorAll('details').forEach(function(d){d.open=open;}); }
  document.getElementById('expand-all').addEventListener('click',function(){all(true);});
  document.getElementById('collapse-all').addEventListener('click',function(){all(false);});
  var q=document.getElementById('filter'), denied=document.getElementById('only-denied');
  function apply(){
    var text=q.value.toLowerCase(), only=denied.checked;
    document.querySelectorAll('[data-search]').forEach(function(el){
      el.hidden=!((!text||el.getAttribute('data-search').indexOf(text)>=0)&&
                  (!only||el.classList.contains('deny')));
    });
  }
  q.addEventListener('input',apply); denied.addEventListener('change',apply);
})();
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def render_html(
    records: Sequence[AuditRecord], *, title: str = "mtguard audit report", source: str = ""
) -> str:
    denied = sum(r.decision == "deny" for r in records)
    generated = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    origin = f" · from <code>{_e(source)}</code>" if source else ""
    rows = "".join(_row(i, r) for i, r in enumerate(records, start=1))
    sections = "".join(_section(i, r) for i, r in enumerate(records, start=1))
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{_CSP}">
<meta name="viewport" content="width=device-width,initial-scale=1">
<title>{_e(title)}</title><style>{_CSS}</style></head>
<body><header><h1>{_e(title)}</h1>
<p class="meta">{len(records)} calls · {denied} denied · {len(records) - denied} allowed{origin}
 · generated {generated}</p>
<div class="controls">
<input id="filter" type="search" placeholder="filter: tool, server, rule, call id">
<label><input id="only-denied" type="checkbox"> denied only</label>
<button id="expand-all" type="button">Expand all</button>
<button id="collapse-all" type="button">Collapse all</button></div></header>
<table id="calls"><thead><tr><th>#</th><th>time (UTC)</th><th>decision</th><th>tool</th>
<th>server</th><th>call</th><th>phase</th><th>rules</th><th>stages</th><th>total ms</th>
<th>tree</th></tr></thead><tbody>{rows}</tbody></table>
<main>{sections}</main>
<script>{_JS}</script></body></html>
"""


def _search(r: AuditRecord) -> str:
    words = [r.tool, r.server, r.call_id, r.request_id or "", r.decision, *r.rules]
    return _e(" ".join(words).lower())


def _when(r: AuditRecord) -> str:
    if not r.ts:
        return "?"
    return time.strftime("%H:%M:%S", time.gmtime(r.ts)) + f".{int(r.ts * 1000) % 1000:03d}"


def _request(r: AuditRecord) -> str:
    return f'<br><small>request <code>{_e(r.request_id)}</code></small>' if r.request_id else ""


def _row(i: int, r: AuditRecord) -> str:
    total = r.timings_ms.total or sum(ms for _, ms in stage_timings(r)) or 1.0
    bar = "".join(
        f'<span class="{name}" style="width:{min(100.0, 100 * ms / total):.1f}%"'
        f' title="{name} {ms:.2f} ms"></span>'
        for name, ms in stage_timings(r)
    )
    legend = " · ".join(f"{name} {ms:.1f}" for name, ms in stage_timings(r))
    tree = "—" if r.tree is None else (
        "complete" if r.tree_complete else '<span class="badge incomplete">incomplete</span>'
    )
    return (
        f'<tr class="{r.decision}" data-search="{_search(r)}"><td class="num">{i}</td>'
        f'<td>{_when(r)}</td><td><span class="badge {r.decision}">'
        f"{r.decision.upper()}</span></td>"
        f'<td><a href="#call-{i}">{_e(r.tool)}</a></td><td>{_e(r.server)}</td>'
        f"<td><code>{_e(r.call_id)}</code>{_request(r)}</td><td>{_e(r.phase or '')}</td>"
        f"<td>{_e(', '.join(r.rules))}</td><td><div class=\"bar\">{bar}</div>"
        f"<small>{legend}</small></td><td class=\"num\">{r.timings_ms.total:.1f}</td>"
        f"<td>{tree}</td></tr>"
    )


def _section(i: int, r: AuditRecord) -> str:
    parts = []
    if r.task:
        parts.append(f'<p class="dim">task: {_e(r.task)}</p>')
    if r.violations:
        items = "".join(
            f'<li class="violation {_e(v.mode)}"><b>{_e(v.rule)}</b> ({_e(v.mode)}, {_e(v.phase)}):'
            f" {_e(v.reason)}<ul>"
            + "".join(f'<li class="evidence"><code>{_e(e)}</code></li>' for e in v.evidence)
            + "</ul></li>"
            for v in r.violations
        )
        parts.append(f'<ul class="violations">{items}</ul>')
    rollback = rollback_lines(r)  # already stripped of control characters; escaped here
    if rollback:
        parts.append('<pre class="rollback">' + _e("\n".join(rollback)) + "</pre>")
    stages = " · ".join(f"{name} {ms:.2f} ms" for name, ms in stage_timings(r))
    parts.append(f'<p class="timings">timings: {stages} · total {r.timings_ms.total:.2f} ms</p>')
    if r.tree is None:
        parts.append('<p class="dim">no behavior tree (the call was not executed)</p>')
    else:
        t = r.tree
        state = "complete" if t.complete else "incomplete: " + "; ".join(t.incomplete_reasons)
        drops = ", ".join(f"{k}={n}" for k, n in sorted(t.drops.items()) if n)
        parts.append(
            f'<p class="tree-state">tree {_e(state)}{_e(", drops " + drops) if drops else ""}'
            f" · {len(t.processes)} process(es)</p>"
        )
        parts.append('<ul class="tree">' + "".join(_node(n) for n in build_view(r)) + "</ul>")
    summary = (
        f'<span class="badge {r.decision}">{r.decision.upper()}</span> tools/call {_e(r.tool)}'
        f' <span class="dim">{_e(r.server)} · call {_e(r.call_id)}'
        f"{' · ' + _e(r.phase) if r.phase else ''} · {_e(r.mode)} · {r.timings_ms.total:.1f} ms"
        f"{' · ' + _e(', '.join(r.rules)) if r.rules else ''}</span>"
    )
    return (
        f'<section id="call-{i}" class="call {r.decision}" data-search="{_search(r)}">'
        f'<details><summary>{summary}</summary><div class="body">{"".join(parts)}</div>'
        "</details></section>"
    )


def _node(node: ViewNode) -> str:
    rules = "".join(f'<span class="rule">{_e(rule)}</span>' for rule in node.hits)
    hit = " hit" if node.hits else ""
    title = f' title="named by: {_e(", ".join(node.hits))}"' if node.hits else ""
    data = f' data-rules="{_e(" ".join(node.hits))}"' if node.hits else ""
    detail = f' <span class="dim">[{_e(node.detail)}]</span>' if node.detail else ""
    failed = ' <span class="failed">(failed)</span>' if node.failed else ""
    killed = f' <span class="killed">✗ killed: {_e(node.killed)}</span>' if node.killed else ""
    when = f"+{node.at_ms:.2f} ms" if node.at_ms is not None else "before"
    line = (
        f'<span class="t">{when}</span><span class="k">{_e(node.kind)}</span>'
        f'<span class="label">{_e(node.label)}</span>{detail}{failed}{killed}{rules}'
    )
    cls = f'class="node {_e(node.kind)}{hit}{" killed" if node.killed else ""}"{title}{data}'
    if not node.children:
        return f'<li {cls}><span class="leaf">{line}</span></li>'
    kids = "".join(_node(c) for c in node.children)
    return f"<li {cls}><details open><summary>{line}</summary><ul>{kids}</ul></details></li>"
