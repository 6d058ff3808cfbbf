// The StreamProfiler tab: TensorBoard loads this module in the tab's frame (its base is the plugin's routes) and
// calls render(). The runs come from ./runs; the selected run's report is shown in a frame of its own.

const SECTIONS = [
  ["overview", "Overview", () => true],
  ["breakdown", "Windows: step breakdown", () => true],
  ["distributed", "Stragglers (per rank)", (run) => run.ranks.length > 1],
  ["recommendations", "Recommendations", () => true],
  ["traces", "Traces", () => true],
];

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value);
  }
  node.append(...children.filter((c) => c !== null && c !== undefined));
  return node;
}

function query(path, params) {
  return `${path}?${new URLSearchParams(params).toString()}`;
}

function size(bytes) {
  return bytes >= 1 << 20 ? `${(bytes / (1 << 20)).toFixed(1)} MiB` : `${Math.max(1, Math.round(bytes / 1024))} KiB`;
}

function plural(n, word) {
  return `${n} ${word}${n === 1 ? "" : "s"}`;
}

function runLabel(run) {
  const when = [run.stage, run.started].filter(Boolean).join(" · ");
  const what = `${plural(run.windows.length, "window")}, ${plural(run.ranks.length, "rank")}`;
  return [el("div", { class: "name", text: run.name }),
    el("div", { class: "meta", text: [run.where, when, what].filter(Boolean).join(" · ") })];
}

function windowsTable(run) {
  const rows = run.windows.map((w) => el("tr", {},
    el("td", { text: String(w.window) }), el("td", { text: String(w.first_step) }),
    el("td", {}, ...w.traces.map((t) => el("a", {
      class: "trace", href: query("trace", { run: run.id, file: t.file }), download: "",
      title: t.file, text: `rank ${t.rank} (${size(t.bytes)})`,
    })))));
  return el("table", { class: "windows" },
    el("thead", {}, el("tr", {}, el("th", { text: "window" }), el("th", { text: "first step" }),
      el("th", { text: "traces (download)" }))),
    el("tbody", {}, ...rows));
}

function showRun(run, panes) {
  const { details, viewer } = panes;
  const report = query("report", { run: run.id });
  details.replaceChildren();
  viewer.replaceChildren();
  details.append(el("h2", { text: run.name }), el("div", { class: "meta", text: run.dir }));
  if (!run.report) {
    viewer.append(el("p", { class: "message", text: `No report in ${run.dir} yet (the profiler writes it when the `
      + `stage ends); make one with: streamprof report ${run.dir} -o ${run.dir}/report.html` }));
  } else {
    const frame = el("iframe", { id: "report", title: `report of ${run.name}`, src: report });
    const links = SECTIONS.filter(([, , shown]) => shown(run)).map(([anchor, label]) => {
      const link = el("a", { href: `${report}#${anchor}`, "data-section": anchor, text: label });
      link.addEventListener("click", (event) => {
        event.preventDefault();
        frame.src = `${report}#${anchor}`;
      });
      return link;
    });
    links.push(el("a", { href: report, target: "_blank", rel: "noopener", text: "Open the report in a new tab" }));
    details.append(el("nav", { class: "sections" }, ...links));
    viewer.append(frame);
  }
  details.append(el("h3", { text: `Windows (${run.windows.length})` }),
    run.windows.length ? windowsTable(run) : el("p", { class: "meta", text: "No window traces in this run." }));
}

function showList(data, root) {
  if (data.message) {
    root.append(el("p", { class: "message", id: "message", text: data.message }));
    return;
  }
  const list = el("ul", { id: "runs" });
  const details = el("div", { id: "details" });
  const viewer = el("div", { id: "viewer" });
  const buttons = data.runs.map((run) => {
    const button = el("button", { type: "button", "data-run": run.id }, ...runLabel(run));
    button.addEventListener("click", () => {
      buttons.forEach((b) => b.classList.toggle("selected", b === button));
      showRun(run, { details, viewer });
    });
    list.append(el("li", {}, button));
    return button;
  });
  root.append(el("aside", {}, el("h2", { text: `Runs under ${data.logdir}` }), list, details), viewer);
  buttons[0].click();
}

export async function render() {
  document.head.append(el("link", { rel: "stylesheet", href: "style.css" }));
  const root = el("div", { class: "streamprof" });
  document.body.append(root);
  try {
    const response = await fetch("runs");
    if (!response.ok) throw new Error(`${response.status} ${await response.text()}`);
    showList(await response.json(), root);
  } catch (err) {
    root.append(el("p", { class: "message", id: "message", text: `Could not read the runs: ${err.message}` }));
  }
}
