"""One self-contained HTML report of audit records (inline CSS and JS, no external assets).

A table of calls with per-stage timing bars, then one collapsed section per call. A section's
body (violations with their evidence, rollback, timings, network policy, workers, the
behavior tree as nested `<details>` with the nodes the evidence names highlighted, and the
between-call activity) is rendered on demand by the page's script from one compact JSON
block: every string once in a table, nodes as small arrays of indexes into it (viewtree.py's
layout). Strings reach the DOM only as text nodes; the JSON is escaped for
a `<script>` element; a CSP forbids any fetch. `#call-N` in the URL opens that call. A call
whose server never answered (exited, killed online, timed out) shows as ERROR, not ALLOW.
"""

from __future__ import annotations

import html
import json
import time
from collections.abc import Sequence
from typing import Any

from ..model import AuditRecord
from .explain import rollback_lines
from .viewtree import ViewNode, between_view, build_view, outcome, stage_timings, tree_facts

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
.badge.incomplete{background:var(--warn)}.badge.error{background:#6a1b9a}
section.call.error{border-left:4px solid #6a1b9a}.nores{color:#6a1b9a;font-weight:600}
li.node.refused .label{color:var(--deny)}h4{margin:10px 0 2px;font-size:13px}
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
  var D=JSON.parse(document.getElementById('mtguard-data').textContent), S=D.s;
  function el(tag,cls,text){ var e=document.createElement(tag); if(cls) e.className=cls;
    if(text!=null) e.textContent=text; return e; }
  var FAILED=1;
  function node(n){  // [kind, label, detail, at_ms|null, flags, killed|-1, [hits], [kids]]
    var li=el('li','node '+S[n[0]]+(n[6].length?' hit':'')+(n[5]>=0?' killed':''));
    var hits=n[6].map(function(i){return S[i];});
    if(hits.length){ li.setAttribute('data-rules',hits.join(' '));
      li.title='named by: '+hits.join(', '); }
    var line=document.createDocumentFragment();
    line.appendChild(el('span','t',n[3]==null?'before':'+'+n[3].toFixed(2)+' ms'));
    line.appendChild(el('span','k',S[n[0]])); line.appendChild(el('span','label',S[n[1]]));
    if(n[2]>=0) line.appendChild(el('span','dim',' ['+S[n[2]]+']'));
    if(n[4]&FAILED) line.appendChild(el('span','failed',' (failed)'));
    if(n[5]>=0) line.appendChild(el('span','killed','\\u2717 killed: '+S[n[5]]));
    hits.forEach(function(h){ line.appendChild(el('span','rule',h)); });
    if(!n[7].length){ var leaf=el('span','leaf'); leaf.appendChild(line); li.appendChild(leaf);
      return li; }
    var d=el('details'), sm=el('summary'), ul=el('ul'); d.open=true; sm.appendChild(line);
    n[7].forEach(function(k){ ul.appendChild(node(k)); }); d.appendChild(sm); d.appendChild(ul);
    li.appendChild(d); return li;
  }
  function tree(nodes){ var ul=el('ul','tree');
    nodes.forEach(function(n){ ul.appendChild(node(n)); }); return ul; }
  function body(sec){  // build a call's body once, from the data block
    var b=sec.querySelector('.body'); if(b.childNodes.length) return;
    var c=D.c[+sec.getAttribute('data-i')];
    if('x' in c) b.appendChild(el('p','nores','no result: '+S[c.x]));
    if(c.k>=0) b.appendChild(el('p','dim','task: '+S[c.k]));
    if(c.v.length){ var vs=el('ul','violations');
      c.v.forEach(function(v){ var li=el('li','violation '+S[v[1]]);
        li.appendChild(el('b',null,S[v[0]]));
        li.appendChild(document.createTextNode(' ('+S[v[1]]+', '+S[v[2]]+'): '+S[v[3]]));
        var ev=el('ul'); v[4].forEach(function(e){ var i=el('li','evidence');
          i.appendChild(el('code',null,S[e])); ev.appendChild(i); });
        li.appendChild(ev); vs.appendChild(li); });
      b.appendChild(vs); }
    if(c.r>=0) b.appendChild(el('pre','rollback',S[c.r]));
    b.appendChild(el('p','timings',S[c.m]));
    b.appendChild(el('p',c.e>=0?'tree-state':'dim',S[c.e>=0?c.e:c.n]));
    c.f.forEach(function(f){ b.appendChild(el('p','fact dim',S[f])); });
    if(c.t.length) b.appendChild(tree(c.t));
    if(c.b.length){ b.appendChild(el('h4',null,'between calls (workers of earlier calls)'));
      var bt=tree(c.b); bt.classList.add('between'); b.appendChild(bt); }
  }
  function open(sec){ body(sec); sec.querySelector('details').open=true; }
  document.querySelectorAll('section.call>details>summary').forEach(function(s){
    s.addEventListener('click',function(){ body(s.parentElement.parentElement); }); });
  document.querySelectorAll('section.call>details').forEach(function(d){
    d.addEventListener('toggle',function(){ if(d.open) body(d.parentElement); }); });
  function openTarget(){
    var id=decodeURIComponent(location.hash.slice(1)); if(!id) return;
    var sec=document.getElementById(id); if(!sec||!sec.classList.contains('call')) return;
    open(sec); sec.scrollIntoView();
  }
  window.addEventListener('hashchange',openTarget); openTarget();
  document.getElementById('expand-all').addEventListener('click',function(){
    document.querySelectorAll('section.call').forEach(open);
    document.querySelectorAll('details').forEach(function(d){d.open=true;}); });
  document.getElementById('collapse-all').addEventListener('click',function(){
    document.querySelectorAll('details').forEach(function(d){d.open=false;}); });
  var q=document.getElementById('filter'), denied=document.getElementById('only-denied');
  function apply(){
    var text=q.value.toLowerCase(), only=denied.checked;
    document.querySelectorAll('[data-search]').forEach(function(e){
      e.hidden=!((!text||e.getAttribute('data-search').indexOf(text)>=0)&&
                 (!only||e.classList.contains('deny')));
    });
  }
  q.addEventListener('input',apply); denied.addEventListener('change',apply);
})();
"""

_FAILED = 1
_SCRIPT_SAFE = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026",
                              "\u2028": "\\u2028", "\u2029": "\\u2029"})


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


class _Strings:
    """Every string of the report once; the data refers to them by index."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}

    def __call__(self, text: str | None) -> int:
        if text is None or text == "":
            return -1
        return self.index.setdefault(text, len(self.index))


def _nodes(nodes: Sequence[ViewNode], s: _Strings) -> list[Any]:
    return [
        [s(n.kind), s(n.label), s(n.detail), None if n.at_ms is None else round(n.at_ms, 2),
         _FAILED if n.failed else 0, s(n.killed), [s(h) for h in n.hits], _nodes(n.children, s)]
        for n in nodes
    ]


def _call(r: AuditRecord, s: _Strings) -> dict[str, Any]:
    _, why = outcome(r)
    stages = " · ".join(f"{name} {ms:.2f} ms" for name, ms in stage_timings(r))
    rollback = rollback_lines(r)  # already stripped of control characters
    data: dict[str, Any] = {
        "k": s(r.task),
        "v": [[s(v.rule), s(v.mode), s(v.phase), s(v.reason), [s(e) for e in v.evidence]]
              for v in r.violations],
        "r": s("\n".join(rollback)) if rollback else -1,
        "m": s(f"timings: {stages} · total {r.timings_ms.total:.2f} ms"),
        "e": -1, "n": s("no behavior tree (the call was not executed)"),
        "f": [s(f) for f in tree_facts(r)], "t": _nodes(build_view(r), s),
        "b": _nodes(between_view(r), s),
    }
    if r.tree is not None:
        t = r.tree
        state = "complete" if t.complete else "incomplete: " + "; ".join(t.incomplete_reasons)
        drops = ", ".join(f"{k}={n}" for k, n in sorted(t.drops.items()) if n)
        data["e"] = s(f"tree {state}{', drops ' + drops if drops else ''}"
                      f" · {len(t.processes)} process(es)")
    if why:
        data["x"] = s(why)
    return data


def report_data(records: Sequence[AuditRecord]) -> dict[str, Any]:
    """The JSON the page's script renders call bodies from: `s` strings, `c` calls."""
    strings = _Strings()
    calls = [_call(r, strings) for r in records]
    return {"s": list(strings.index), "c": calls}


def render_html(
    records: Sequence[AuditRecord], *, title: str = "mtguard audit report", source: str = ""
) -> str:
    status = [outcome(r)[0] for r in records]
    denied, errors = status.count("deny"), status.count("error")
    failed = f" · {errors} failed (server died)" if errors else ""
    generated = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    origin = f" · from <code>{_e(source)}</code>" if source else ""
    rows = "".join(_row(i, r) for i, r in enumerate(records, start=1))
    sections = "".join(_section(i, r) for i, r in enumerate(records, start=1))
    data = json.dumps(report_data(records), ensure_ascii=False, separators=(",", ":"))
    data = data.translate(_SCRIPT_SAFE)  # no `</script>` or `<!--` inside the block
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{_CSP}">
<meta name="viewport" content="width=device-width,initial-scale=1">
<title>{_e(title)}</title><style>{_CSS}</style></head>
<body><header><h1>{_e(title)}</h1>
<p class="meta">{len(records)} calls · {denied} denied · {status.count("allow")} allowed{failed}
{origin} · generated {generated}</p>
<div class="controls">
<input id="filter" type="search" placeholder="filter: tool, server, rule, call id">
<label><input id="only-denied" type="checkbox"> denied only</label>
<button id="expand-all" type="button">Expand all</button>
<button id="collapse-all" type="button">Collapse all</button></div></header>
<table id="calls"><thead><tr><th>#</th><th>time (UTC)</th><th>decision</th><th>tool</th>
<th>server</th><th>call</th><th>phase</th><th>rules</th><th>stages</th><th>total ms</th>
<th>tree</th></tr></thead><tbody>{rows}</tbody></table>
<main>{sections}</main>
<script type="application/json" id="mtguard-data">{data}</script>
<script>{_JS}</script></body></html>
"""


def _search(r: AuditRecord) -> str:
    words = [r.tool, r.server, r.call_id, r.request_id or "", outcome(r)[0], *r.rules]
    return _e(" ".join(words).lower())


def _when(r: AuditRecord) -> str:
    if not r.ts:
        return "?"
    return time.strftime("%H:%M:%S", time.gmtime(r.ts)) + f".{int(r.ts * 1000) % 1000:03d}"


def _request(r: AuditRecord) -> str:
    return f'<br><small>request <code>{_e(r.request_id)}</code></small>' if r.request_id else ""


def _row(i: int, r: AuditRecord) -> str:
    status = outcome(r)[0]
    total = r.timings_ms.total or sum(ms for _, ms in stage_timings(r)) or 1.0
    bar = "".join(
        f'<span class="{name}" style="width:{min(100.0, 100 * ms / total):.1f}%"></span>'
        for name, ms in stage_timings(r)
    )
    legend = " · ".join(f"{name} {ms:.1f}" for name, ms in stage_timings(r))
    tree = "—" if r.tree is None else (
        "complete" if r.tree_complete else '<span class="badge incomplete">incomplete</span>'
    )
    return (
        f'<tr class="{status}" data-search="{_search(r)}"><td class="num">{i}</td>'
        f'<td>{_when(r)}</td><td><span class="badge {status}">'
        f"{status.upper()}</span></td>"
        f'<td><a href="#call-{i}">{_e(r.tool)}</a></td><td>{_e(r.server)}</td>'
        f"<td><code>{_e(r.call_id)}</code>{_request(r)}</td><td>{_e(r.phase or '')}</td>"
        f"<td>{_e(', '.join(r.rules))}</td><td><div class=\"bar\">{bar}</div>"
        f"<small>{legend}</small></td><td class=\"num\">{r.timings_ms.total:.1f}</td>"
        f"<td>{tree}</td></tr>"
    )


def _section(i: int, r: AuditRecord) -> str:
    status = outcome(r)[0]
    summary = (
        f'<span class="badge {status}">{status.upper()}</span> tools/call {_e(r.tool)}'
        f' <span class="dim">{_e(r.server)} · call {_e(r.call_id)}'
        f"{' · ' + _e(r.phase) if r.phase else ''} · {_e(r.mode)} · {r.timings_ms.total:.1f} ms"
        f"{' · ' + _e(', '.join(r.rules)) if r.rules else ''}</span>"
    )
    return (
        f'<section id="call-{i}" class="call {status}" data-i="{i - 1}">'
        f'<details><summary>{summary}</summary><div class="body"></div></details></section>'
    )
