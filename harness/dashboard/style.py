"""The page's stylesheet and its script-error catcher, inlined into every dashboard (no files beside it)."""

from __future__ import annotations

#: Runs before plotly.js and every plot script.  Errors land in ``#script-errors``, visible to a
#: reader (a plot may be missing) and readable by the headless-browser test from the dumped DOM.
ERROR_CATCHER = """
(function () {
  var box = document.getElementById("script-errors");
  function record(text) {
    box.hidden = false;
    var line = document.createElement("div");
    line.className = "script-error";
    line.textContent = text;
    box.appendChild(line);
  }
  window.poolfuzzRecordError = record;  // for a shared plotly.js file that did not load (its onerror)
  window.onerror = function (message, source, line, column) {
    record(message + " (" + (source || "inline") + ":" + line + ":" + column + ")");
  };
  window.addEventListener("unhandledrejection", function (event) {
    record("unhandled promise rejection: " + event.reason);
  });
})();
"""

CSS = """
:root {
  --ink: #1d2330; --muted: #5b6474; --rule: #dfe3ea; --panel: #f6f7f9;
  --ok: #1b7f3b; --ok-bg: #e4f4e8; --bad: #b3261e; --bad-bg: #fbe7e5; --warn: #8a5a00; --warn-bg: #fdf1d8;
}
* { box-sizing: border-box; }
body {
  margin: 0; color: var(--ink); background: #fff;
  font: 15px/1.45 system-ui, -apple-system, "Segoe UI", "DejaVu Sans", sans-serif;
}
main { max-width: 1320px; margin: 0 auto; padding: 24px 28px 48px; }
h1 { font-size: 26px; margin: 0 0 4px; }
h2 { font-size: 20px; margin: 36px 0 6px; padding-bottom: 4px; border-bottom: 1px solid var(--rule); }
p.lede, p.explain, .context { color: var(--muted); margin: 4px 0 12px; }
code, .mono { font-family: "DejaVu Sans Mono", ui-monospace, Menlo, Consolas, monospace; font-size: 13px; }
.cards { display: flex; gap: 14px; margin: 18px 0 8px; flex-wrap: wrap; }
.card { flex: 1 1 160px; background: var(--panel); border-radius: 8px; padding: 12px 16px; }
.card .value { font-size: 26px; font-weight: 650; }
.card .label { color: var(--muted); font-size: 13px; }
.card.bad { background: var(--bad-bg); } .card.bad .value { color: var(--bad); }
.card.good .value { color: var(--ok); }
table.targets { width: 100%; border-collapse: collapse; font-variant-numeric: tabular-nums; }
table.targets th, table.targets td { padding: 7px 10px; border-bottom: 1px solid var(--rule); text-align: left; }
table.targets th { font-size: 13px; color: var(--muted); font-weight: 600; background: var(--panel); }
table.targets td.num, table.targets th.num { text-align: right; }
table.targets tr:hover td { background: #fafbfc; }
table.targets td.impl { color: var(--muted); font-size: 12px; overflow-wrap: anywhere; }
table.targets td.key, table.targets td.box, table.targets .nowrap { white-space: nowrap; }
table.targets td.bad { color: var(--bad); font-weight: 700; }
p.legend { color: var(--muted); font-size: 13px; margin: 6px 0 0; }
.swatch { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin-right: 7px; }
.pill { display: inline-block; padding: 1px 9px; border-radius: 10px; font-size: 12px; font-weight: 600; }
.pill.ok { color: var(--ok); background: var(--ok-bg); }
.pill.failed { color: var(--bad); background: var(--bad-bg); }
.pill.crashed, .pill.other { color: var(--warn); background: var(--warn-bg); }
.note { background: var(--warn-bg); color: #5c3d00; border-radius: 6px; padding: 8px 12px; margin: 8px 0; }
.empty { background: var(--ok-bg); color: var(--ok); border-radius: 6px; padding: 12px 16px; font-weight: 600; }
.failure { border: 1px solid #f0c4c0; border-left: 5px solid var(--bad); border-radius: 6px;
  padding: 10px 14px; margin: 10px 0; }
.failure .title { font-weight: 650; }
.failure .invariant { color: var(--bad); }
.failure .message { margin: 4px 0 8px; }
.failure dl { display: grid; grid-template-columns: max-content 1fr; gap: 4px 14px; margin: 0; }
.failure dt { color: var(--muted); }
.failure dd { margin: 0; }
.command { display: inline-block; background: #1d2330; color: #f2f4f8; padding: 3px 8px; border-radius: 4px;
  user-select: all; }
details pre { background: var(--panel); padding: 10px; border-radius: 6px; overflow-x: auto; font-size: 12px; }
.plot { border: 1px solid var(--rule); border-radius: 8px; padding: 6px; }
#script-errors { background: var(--bad-bg); color: var(--bad); padding: 10px 28px; font-weight: 600; }
#script-errors::before { content: "This page hit a script error; some plots may be missing:"; display: block; }
.live { background: #e3f0fd; color: #0b4a8b; border-radius: 6px; padding: 8px 12px; margin: 8px 0;
  font-weight: 600; }
.table-wrap { overflow-x: auto; }
footer { margin-top: 40px; color: var(--muted); font-size: 13px; }
footer table td { padding: 1px 12px 1px 0; }
"""
