// The run page's graph: the editor's canvas, read-only, coloured by each node's status as the run's websocket
// reports it (logviewer.js re-dispatches status messages as "portal:run-status"). Clicking a node, or Enter on
// it, shows that node's logs in the log viewer below. Without JavaScript the server-drawn picture stays.
import { addDependency, addTaskNode, createGraph, fit, labelView, layeredPositions, paint } from "./canvas.js";
import { fmt } from "./spec.js";

function read(id, fallback) {
  const el = document.getElementById(id);
  if (!el) return fallback;
  try {
    return JSON.parse(el.textContent) || fallback;
  } catch (e) {
    return fallback;
  }
}

function start() {
  const box = document.querySelector("[data-run-canvas]");
  const root = document.getElementById("run");
  if (!box || !root || !window.X6 || !window.dagre) return;
  const spec = read("run-spec", {});
  const statuses = read("run-statuses", {});
  const layout = read("run-layout", {});
  const labels = {};
  box.querySelectorAll("[data-status-label]").forEach(function (li) { labels[li.dataset.statusLabel] = li.textContent; });
  const data = box.dataset;
  const runId = root.dataset.run;
  const list = Array.isArray(spec.nodes) ? spec.nodes : [];
  if (!list.length) return;

  // Shown before the graph is made: X6 takes its size from the box when it starts.
  document.querySelectorAll("[data-run-dag]").forEach(function (el) { el.hidden = true; });
  box.hidden = false;
  const graph = createGraph(box.querySelector("[data-canvas]"), { readOnly: true });
  const cells = new Map();
  const positions = (layout && layout.nodes) || {};
  list.forEach(function (node, index) {
    const at = positions[node.name] || { x: 0, y: 0 };
    cells.set(node.name, addTaskNode(graph, undefined, at, { seq: index, node: { name: node.name, template: node.template } }));
  });
  for (const node of list) {
    for (const dep of new Set(node.depends_on || [])) {
      if (cells.has(dep)) addDependency(graph, cells.get(dep).id, cells.get(node.name).id);
    }
  }
  if (list.some(function (node) { return !positions[node.name]; })) {
    const laid = layeredPositions(graph);
    for (const cell of graph.getNodes()) cell.position(laid[cell.id].x, laid[cell.id].y);
  }

  function show(name, status) {
    const cell = cells.get(name);
    if (!cell) return;
    const label = labels[status] || status.replace("_", " ");
    const template = String(cell.getData().node.template).replace(/@\d+$/, "");
    paint(cell, { name: name, detail: template + " · " + label, status: status });
    labelView(graph.findViewByCell(cell), fmt(data.msgNode, { name: name, status: label }), name);
  }
  for (const node of list) show(node.name, statuses[node.name] || "pending");
  graph.on("view:mounted", function (args) {
    if (!args.view.cell.isNode()) return;
    const name = args.view.cell.getData().node.name;
    labelView(args.view, fmt(data.msgNode, { name: name, status: labels[statuses[name]] || statuses[name] || "" }), name);
  });

  fit(graph);

  document.addEventListener("portal:run-status", function (event) {
    const message = event.detail || {};
    if (String(message.run) !== String(runId)) return;
    Object.entries(message.nodes || {}).forEach(function (entry) {
      statuses[entry[0]] = entry[1].status;
      show(entry[0], entry[1].status);
    });
  });

  const note = box.querySelector("[data-run-canvas-note]");

  // The log viewer lists the nodes that had started when the page was drawn; a later one is looked up.
  function openLogs(name) {
    const viewer = document.querySelector("[data-log-viewer]");
    if (!viewer) return;
    const select = viewer.querySelector("[data-log-node]");
    const existing = Array.from(select.options).find(function (option) { return option.dataset.node === name; });
    const ready = existing
      ? Promise.resolve(existing)
      : fetch(data.tasksUrl + "?run=" + encodeURIComponent(runId) + "&node=" + encodeURIComponent(name), {
          credentials: "same-origin",
          headers: { Accept: "application/json" },
        }).then(function (response) {
          return response.ok ? response.json() : { results: [] };
        }).then(function (body) {
          const ids = (body.results || []).map(function (task) { return task.id; });
          if (!ids.length) return null;
          const option = document.createElement("option");
          option.value = ids.join(",");
          option.dataset.node = name;
          option.textContent = name;
          select.append(option);
          return option;
        });
    ready.then(function (option) {
      if (!option) {
        note.textContent = fmt(data.msgNoLogs, { name: name });
        return;
      }
      note.textContent = "";
      select.value = option.value;
      select.dispatchEvent(new Event("change", { bubbles: true }));
      viewer.scrollIntoView({ block: "start" });
    });
  }

  graph.on("node:click", function (args) { openLogs(args.node.getData().node.name); });
  box.addEventListener("keydown", function (event) {
    if (event.key !== "Enter" && event.key !== " ") return;
    const g = event.target.closest && event.target.closest("[data-cell-id]");
    const cell = g && graph.getCellById(g.getAttribute("data-cell-id"));
    if (!cell || !cell.isNode()) return;
    event.preventDefault();
    openLogs(cell.getData().node.name);
  });
  box.dataset.ready = "1";
}

start();
