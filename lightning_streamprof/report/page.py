"""The self-contained HTML page: inline CSS, a few lines of inline script (sortable tables), tables and cards.

Nothing is loaded from elsewhere: no external script, style sheet, font or image, so the file works offline.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from lightning_streamprof.escape import for_html

CSS = """
:root{--fg:#1d2230;--muted:#5b6275;--line:#d9dde6;--bg:#f6f7fa;--card:#fff;--accent:#4e79a7;--warn:#b54708}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;color:var(--fg);
background:var(--bg)}
header{padding:18px 28px;background:#1d2230;color:#fff}
header h1{margin:0 0 4px;font-size:20px}
header .sub{color:#c8cedb;font-size:13px;overflow-wrap:anywhere}
nav{padding:6px 28px;background:#fff;border-bottom:1px solid var(--line);position:sticky;top:0;z-index:1}
nav a{margin-right:14px;color:var(--accent);text-decoration:none;font-size:13px}
main{padding:8px 28px 40px;max-width:1280px}
section{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:14px 18px;margin:16px 0}
section h2{margin:0 0 10px;font-size:17px}
section h3{margin:14px 0 6px;font-size:14px}
.cards{display:flex;flex-wrap:wrap;gap:12px}
.card{flex:1 1 160px;border:1px solid var(--line);border-radius:8px;padding:10px 14px;background:#fbfcfe}
.card .v{font-size:24px;font-weight:600}
.card .k{color:var(--muted);font-size:12px}
.card .n{color:var(--muted);font-size:12px}
.note{color:var(--muted);font-size:13px}
.warn{color:var(--warn)}
.grid2{display:grid;grid-template-columns:repeat(auto-fill,minmax(400px,1fr));gap:12px}
figure{margin:0}
figcaption{font-size:12px;color:var(--muted)}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{padding:4px 8px;border-bottom:1px solid var(--line);text-align:right;vertical-align:top}
th{background:#f0f2f6;cursor:pointer;user-select:none;white-space:nowrap}
th:first-child,td:first-child{text-align:left}
td.name{text-align:left;font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px;overflow-wrap:anywhere}
td.text{text-align:left}
.scroll{max-height:520px;overflow:auto}
pre{background:#f0f2f6;padding:10px;border-radius:6px;white-space:pre;overflow:auto;font-size:12px}
.legend{display:flex;flex-wrap:wrap;gap:12px;margin:4px 0 6px;font-size:12px}
.legend .key i{display:inline-block;width:11px;height:11px;margin-right:4px;border-radius:2px;vertical-align:-1px}
svg.chart{max-width:100%;height:auto}
svg .grid{stroke:#e6e9ef;stroke-width:1}
svg .axis{stroke:#9aa1b1;stroke-width:1}
svg text{font:11px system-ui,sans-serif;fill:#3b4252}
svg .label{font-size:12px}
svg .value{font-size:11px;fill:#5b6275}
.rec{border-left:4px solid var(--warn);padding:6px 12px;margin:10px 0;background:#fffaf5}
.rec .id{font-family:ui-monospace,monospace;font-size:12px;color:var(--warn)}
.rec ul{margin:4px 0 0;padding-left:18px;color:var(--muted);font-size:12px}
.badge{display:inline-block;padding:0 6px;border-radius:9px;background:#fde2e1;color:#9f1c1c;font-size:12px}
.up{color:#9f1c1c}.down{color:#1f7a3a}
"""

#: click a header to sort its table (numbers by value, text by name); no other script runs
SCRIPT = """
document.querySelectorAll("table.sortable th").forEach(function (th, _, all) {
  th.title = "sort";
  th.addEventListener("click", function () {
    var table = th.closest("table"), body = table.tBodies[0], col = th.cellIndex;
    var asc = th.dataset.sort !== "asc";
    table.querySelectorAll("th").forEach(function (h) { delete h.dataset.sort; });
    th.dataset.sort = asc ? "asc" : "desc";
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = a.cells[col].dataset.v || a.cells[col].textContent;
      var y = b.cells[col].dataset.v || b.cells[col].textContent;
      var nx = parseFloat(x), ny = parseFloat(y);
      var c = (!isNaN(nx) && !isNaN(ny)) ? nx - ny : x.localeCompare(y);
      return asc ? c : -c;
    });
    rows.forEach(function (r) { body.appendChild(r); });
  });
});
"""

Cell = tuple[str, Callable[[Any], Any]]


def page(title: str, subtitle: str, sections: Sequence[tuple[str, str, str]]) -> str:
    """A whole document: ``sections`` are ``(anchor id, heading, inner HTML)``; empty ones are left out."""
    shown = [(a, h, body) for a, h, body in sections if body]
    nav = "".join(f'<a href="#{for_html(a)}">{for_html(h)}</a>' for a, h, _ in shown)
    body = "".join(f'<section id="{for_html(a)}"><h2>{for_html(h)}</h2>{inner}</section>' for a, h, inner in shown)
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        f"<title>{for_html(title)}</title><style>{CSS}</style></head><body>"
        f"<header><h1>{for_html(title)}</h1><div class=\"sub\">{subtitle}</div></header>"
        f"<nav>{nav}</nav><main>{body}</main><script>{SCRIPT}</script></body></html>\n"
    )


def cards(items: Sequence[tuple[str, str, str]]) -> str:
    """Overview cards ``(label, value, note)``."""
    return '<div class="cards">' + "".join(
        f'<div class="card"><div class="k">{for_html(k)}</div><div class="v">{for_html(v)}</div>'
        f'<div class="n">{for_html(n)}</div></div>' for k, v, n in items) + "</div>"


def table(columns: Sequence[Cell], rows: Sequence[Any], limit: int | None = None, name_cols: int = 1) -> str:
    """A sortable table of ``rows`` with one column per ``(header, getter)``; a getter returns text, a number,
    ``None`` (empty) or ``(html, sort value)`` for a cell that is already HTML. Columns empty in every row are
    left out. The first ``name_cols`` columns are names (left aligned, monospace)."""
    shown = list(rows[:limit] if limit else rows)
    if not shown:
        return ""
    values = [[get(r) for _, get in columns] for r in shown]
    keep = [i for i in range(len(columns)) if any(v[i] not in (None, "") for v in values)]
    head = "".join(f"<th>{for_html(columns[i][0])}</th>" for i in keep)
    body = []
    for v in values:
        cells = []
        for i in keep:
            cls = ' class="name"' if i < name_cols else ""
            cells.append(_cell(v[i], cls))
        body.append("<tr>" + "".join(cells) + "</tr>")
    more = (f'<p class="note">{len(shown)} of {len(rows)} rows shown.</p>' if limit and len(rows) > limit else "")
    return (f'<div class="scroll"><table class="sortable"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table></div>{more}')


def _cell(value: Any, cls: str) -> str:
    if isinstance(value, tuple):
        html, sort = value
        return f'<td{cls} data-v="{for_html(str(sort))}">{html}</td>'
    if value is None:
        return f"<td{cls}></td>"
    if isinstance(value, float):
        return f'<td{cls} data-v="{value!r}">{value:.3f}</td>'
    if isinstance(value, int) and not isinstance(value, bool):
        return f'<td{cls} data-v="{value}">{value}</td>'
    return f"<td{cls}>{for_html(str(value))}</td>"


def note(text: str) -> str:
    return f'<p class="note">{for_html(text)}</p>'
