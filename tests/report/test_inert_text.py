"""Names from a trace are inert in every report: markdown images, links, autolinks and raw HTML in operator,
kernel, frame, run and device names render as text in TensorBoard's text tab (through its own markdown and
sanitiser) and in the HTML report and compare page, which load nothing from the network."""

import os
from html.parser import HTMLParser

import msgspec
from tracebuilder import TraceBuilder

from lightning_streamprof.api import analyze_runs
from lightning_streamprof.report.compare import compare, render_compare_html
from lightning_streamprof.report.html import render_report
from lightning_streamprof.report.markdown import window_markdown

HOSTILE = [
    "![x](https://example.invalid/a.png)",
    "<img src=https://example.invalid/b.png>",
    "[l](https://example.invalid/c)",
    "<https://example.invalid/d>",
    "https://example.invalid/e",
    "`` ![f](https://example.invalid/f.png) |x\\",  # backticks, a column break and a backslash around an image
]
#: attributes through which a page loads or links to something
_FETCHING = {"src", "href", "srcset", "action", "formaction", "poster", "data", "xlink:href", "background", "cite"}


class _Parsed(HTMLParser):
    """The tags of a document with their attributes, the text inside ``<code>`` and each table's cells per row."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.code: list[str] = []
        self.tables: list[list[int]] = []
        self._in_code = 0
        self.feed(html)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append(0)
        elif tag in ("td", "th"):
            self.tables[-1][-1] += 1
        if tag == "code":
            self._in_code += 1
            self.code.append("")

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        if tag == "code":
            self._in_code -= 1

    def handle_data(self, data):
        if self._in_code:
            self.code[-1] += data


def _remote(html: str) -> list[tuple[str, str, str]]:
    """Every ``(tag, attribute, value)`` that points at the network."""
    return [(tag, name, value) for tag, attrs in _Parsed(html).tags for name, value in attrs.items()
            if value and (name in _FETCHING or name.startswith("on") or (name == "style" and "url(" in value))
            and value.strip().lower().startswith(("http:", "https:", "//", "ftp:"))]


def _hostile_trace(directory, run: str):
    """A trace whose operators, kernels, frames, run and device carry every name of :data:`HOSTILE`."""
    b = TraceBuilder()
    b.meta["streamprof"] = {"run": run, "window": 0, "first_step": 0, "host": HOSTILE[1]}
    b.device_properties({"id": 0, "name": HOSTILE[0], "totalGlobalMem": 2**34, "numSms": 100})
    b.step(0, 0, 10_000)
    for i, name in enumerate(HOSTILE):
        t = 100 + 1000 * i
        ext = b.op(name, t, 500 - 50 * i, **{"Input Dims": [[3, 4]]})  # the first ones top the tables
        b.launch(name, t + 1, t + 10, 300 - 20 * i, ext, blocks=1.0, occupancy=0.5)
        b.frame(f"{name}.py({i + 1}): {name}", t, 500)
        b.memory(t + 2, 1 << 20, (i + 1) << 20, 2 << 30)
    directory.mkdir(parents=True, exist_ok=True)
    return b.write(directory / "rank0.1.pt.trace.json.gz")


def _runs(tmp_path):
    _hostile_trace(tmp_path / HOSTILE[2], HOSTILE[3])
    (run,) = analyze_runs(tmp_path)
    return run


def test_the_html_report_of_hostile_names_loads_nothing(tmp_path):
    run = _runs(tmp_path)
    names = {k.name for k in run.merged.kernels} | {o.name for o in run.merged.operators}
    assert set(HOSTILE) <= names  # the names reach the report
    html = render_report([run], HOSTILE[4], notes=[HOSTILE[0]], pipeline={run.run: HOSTILE[1]})
    assert _remote(html) == []
    assert {t for t, _ in _Parsed(html).tags}.isdisjoint({"img", "iframe", "link", "object", "embed", "image", "use"})
    assert "<img" not in html and "<a href=\"http" not in html
    assert "&lt;img src=https://example.invalid/b.png&gt;" in html  # shown, as text


def test_the_compare_page_of_hostile_names_loads_nothing(tmp_path):
    a = _runs(tmp_path / "a").merged
    b = msgspec.structs.replace(a, kernels=[msgspec.structs.replace(k, total_ns=2 * k.total_ns) for k in a.kernels])
    html = render_compare_html(compare(a, b, HOSTILE[0], HOSTILE[1]))
    assert _remote(html) == []
    assert "<img" not in html and "&lt;https://example.invalid/d&gt;" in html


def test_tensorboard_renders_hostile_names_as_text(tmp_path):
    from tensorboard.plugin_util import markdown_to_safe_html

    result = _runs(tmp_path).merged
    quoting = [msgspec.structs.replace(r, message=f"{r.message} (see {HOSTILE[0]} and {HOSTILE[1]})")
               for r in result.recommendations]
    assert quoting, "the hostile trace should get a recommendation"
    result = msgspec.structs.replace(result, recommendations=quoting)
    text = window_markdown(result, 0, 0, 0, moved=HOSTILE[2], cost=HOSTILE[3], path=os.path.join("runs", HOSTILE[5]))
    html = markdown_to_safe_html(text)
    parsed = _Parsed(html)
    assert {t for t, _ in parsed.tags} <= {"p", "strong", "em", "code", "table", "thead", "tbody", "tr", "th", "td",
                                           "ul", "li"}, html  # no <img>, no <a>, no HTML of the names
    assert _remote(html) == [] and "<img" not in html and "<a " not in html
    assert set(HOSTILE[:5]) <= set(parsed.code)  # each name whole, in a code span of its own (the top five)
    assert os.path.join("runs", HOSTILE[5]) in parsed.code
    last_first = msgspec.structs.replace(result, kernels=result.kernels[::-1], operators=result.operators[::-1])
    table = _Parsed(markdown_to_safe_html(window_markdown(last_first, 0, 0, 0)))
    assert HOSTILE[5] in table.code and "img" not in {t for t, _ in table.tags}  # its column break stays in the cell
    assert all(len(set(rows)) == 1 for rows in table.tables)  # every row as wide as its header
    assert f"(see {HOSTILE[0]} and {HOSTILE[1]})" in html.replace("&lt;", "<").replace("&gt;", ">")
