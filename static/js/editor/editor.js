// The pipeline editor page (templates/jobs/pipeline_editor.html, docs/pipeline-editor.md).
// The X6 graph is the document: each node's data is {seq, node} where `node` is the spec node as written
// (its depends_on comes from the edges when the spec is built), so a pipeline made elsewhere round-trips.
// X6's History plugin records node and edge changes (form edits included) for undo/redo.
import {
  addDependency, addTaskNode, createDragNode, createGraph, fit, freeOffset, labelView, layeredPositions, paint, zoomBy,
} from "./canvas.js";
import { renderNodePanel } from "./node-panel.js";
import { renderPipelinePanel } from "./pipeline-panel.js";
import { createPalette } from "./palette.js";
import { baseName, cyclePath, fmt, groupErrors, uniqueName } from "./spec.js";
import { bindShortcuts, createCommands } from "./commands.js";
import { createIO } from "./io.js";
import { createMinimap } from "./minimap.js";

const X6 = window.X6;
// Model changes worth undoing; attrs (colours, labels), tools and z-order follow from these.
const TRACKED = new Set(["position", "data", "source", "target", "vertices"]);

function start() {
  const root = document.getElementById("pipeline-editor");
  if (!root || !X6 || !window.dagre) return;
  const data = JSON.parse(document.getElementById("editor-data").textContent);
  const M = JSON.parse(document.getElementById("editor-messages").textContent);
  const canvasEl = root.querySelector("[data-canvas]");
  const panelEl = root.querySelector("[data-panel]");
  const statusEl = root.querySelector("[data-status]");
  const p = data.pipeline;
  const spec = p && p.spec && typeof p.spec === "object" ? p.spec : { nodes: [] };
  const settings = Object.assign({}, spec);
  delete settings.nodes;
  const state = {
    meta: { name: p ? p.name : "", description: p ? p.description : "" },
    settings: settings,
    errors: { pipeline: {}, nodes: {} },
    layouts: data.layouts || {},  // node → its distributed layout, as the server last worked it out
    seq: 0,
    clipboard: null,
    pastes: 0,
    pendingSelect: null,
  };

  const byRef = new Map();
  const bySlug = new Map();
  for (const t of data.templates) {
    byRef.set(t.ref, t);
    if (t.latest) bySlug.set(t.slug, t);
  }
  const templateFor = function (ref) {
    const text = String(ref || "");
    return text.includes("@") ? byRef.get(text) : bySlug.get(text);
  };

  function announce(text, kind) {
    statusEl.textContent = text || "";
    statusEl.classList.toggle("text-danger", kind === "error");
    statusEl.classList.toggle("text-success", kind === "success");
  }

  // --- the graph -------------------------------------------------------------------------------------
  const graph = createGraph(canvasEl, { validateEdge: acceptEdge });
  // The UMD build has the plugins but not the Graph methods that wrap them: talk to the plugins.
  const selection = new X6.Selection({ enabled: true, multiple: true, rubberband: true, modifiers: ["shift"], movable: true, showNodeSelectionBox: true, pointerEvents: "none" });
  const history = new X6.History({
    enabled: true,
    beforeAddCommand: function (event, args) {
      return event !== "cell:change:*" || TRACKED.has(args.key);
    },
  });
  graph.use(selection);
  graph.use(history);
  graph.use(new X6.Snapline({ enabled: true }));
  const dnd = new X6.Dnd({
    target: graph,
    scaled: false,
    getDropNode: function (dragging) {
      const node = dragging.clone();
      node.setData(newNodeData(templateFor(dragging.getData().node.template)), { overwrite: true });
      state.pendingSelect = node.id;
      return node;
    },
    // Dropped onto or beside another node, it moves to the nearest free place (before it is added: one undo step).
    validateNode: function (node) {
      const off = freeOffset(graph, [node.getBBox()]);
      if (off.dx || off.dy) node.translate(off.dx, off.dy);
      return true;
    },
  });

  const nameOf = function (cell) { return cell.getData().node.name; };
  const nodes = function () {
    return graph.getNodes().slice().sort(function (a, b) { return a.getData().seq - b.getData().seq; });
  };
  const names = function () { return nodes().map(nameOf); };
  const nodeByName = function (name) { return graph.getNodes().find(function (n) { return nameOf(n) === name; }); };
  const selectedNodes = function () { return selection.getSelectedCells().filter(function (c) { return c.isNode(); }); };
  const upstreamOf = function (node) {
    return graph.getEdges()
      .filter(function (e) { return e.getTargetCellId() === node.id && e.getSourceCell(); })
      .map(function (e) { return nameOf(e.getSourceCell()); });
  };

  function depsMap(except) {
    const map = new Map(graph.getNodes().map(function (n) { return [nameOf(n), []]; }));
    for (const edge of graph.getEdges()) {
      const source = edge.getSourceCell();
      const target = edge.getTargetCell();
      if (edge !== except && source && target) map.get(nameOf(target)).push(nameOf(source));
    }
    return map;
  }

  // Dropping an edge: refused (with a message) when it repeats one or closes a cycle.
  function acceptEdge(edge) {
    const from = edge.getSourceCell();
    const to = edge.getTargetCell();
    if (!from || !to) return false;
    if (from === to) return refuse(M.selfEdge);
    const twice = graph.getEdges().some(function (e) {
      return e !== edge && e.getSourceCellId() === from.id && e.getTargetCellId() === to.id;
    });
    if (twice) return refuse(M.duplicateEdge);
    const path = cyclePath(depsMap(edge), nameOf(from), nameOf(to));
    if (path) return refuse(fmt(M.cycle, { path: path.join(" → ") }));
    return true;
  }
  function refuse(message) {
    announce(message, "error");
    return false;
  }

  function newNodeData(template) {
    state.seq += 1;
    return { seq: state.seq, node: { name: uniqueName(baseName(template.slug), names()), template: template.slug } };
  }

  function nodeErrors(name) {
    return state.errors.nodes[name] || {};
  }
  function problemCount(name) {
    return Object.values(nodeErrors(name)).reduce(function (n, list) { return n + list.length; }, 0);
  }

  function paintNode(node) {
    const d = node.getData();
    paint(node, { name: d.node.name, detail: String(d.node.template), error: problemCount(d.node.name) > 0 });
    labelNode(node);
  }
  function labelNode(node) {
    const d = node.getData();
    const count = problemCount(d.node.name);
    let label = fmt(M.nodeLabel, { name: d.node.name, template: d.node.template });
    if (count) label += ". " + fmt(M.errorsOnNode, { count: count });
    labelView(graph.findViewByCell(node), label, d.node.name);
  }

  // --- the side panel --------------------------------------------------------------------------------
  let panelQueued = false;
  function schedulePanel() {
    if (panelQueued) return;
    panelQueued = true;
    requestAnimationFrame(function () {
      panelQueued = false;
      refreshPanel();
    });
  }

  function refreshPanel() {
    const active = document.activeElement;
    const focusKey = active && panelEl.contains(active) ? active.dataset.field : null;
    const selected = selectedNodes();
    if (selected.length === 1) showNode(selected[0]);
    else showPipeline();
    if (focusKey) {
      const again = panelEl.querySelector('[data-field="' + CSS.escape(focusKey) + '"]');
      if (again) again.focus();
    }
  }

  function showNode(cell) {
    const d = cell.getData();
    const name = d.node.name;
    renderNodePanel(panelEl, {
      node: d.node,
      current: function () { return cell.getData().node; },
      template: templateFor(d.node.template),
      errors: nodeErrors(name),
      layout: state.layouts[name],
      check: function () { io.validate(); },
      others: names().filter(function (n) { return n !== name; }),
      upstream: upstreamOf(cell),
      choices: data.choices,
      limits: data.limits,
      maxRetries: data.max_retries,
      messages: M,
      commit: function (node) { commitNode(cell, node); },
      connect: function (other, on) { return connect(cell, other, on); },
      remove: function () { removeCells([cell]); canvasEl.focus(); },
      duplicate: function () { copy([cell]); paste(); },
    });
  }

  function showPipeline() {
    renderPipelinePanel(panelEl, {
      meta: function () { return state.meta; },
      settings: function () { return state.settings; },
      errors: state.errors.pipeline,
      nodes: names().map(function (name) { return { name: name, problems: problemCount(name) }; }),
      messages: M,
      commitMeta: function (meta) { state.meta = meta; changed(); },
      commitSettings: function (value) { state.settings = value; changed(); },
      select: function (name) {
        const node = nodeByName(name);
        if (!node) return;
        selection.reset(node);
        const view = graph.findViewByCell(node);
        if (view) view.container.focus();
      },
    });
  }

  // A form edit: one undoable change of the node's data. Server errors of the fields it touched go away.
  function commitNode(cell, node) {
    const before = cell.getData();
    const errors = state.errors.nodes[before.node.name];
    if (errors) {
      for (const key of Object.keys(errors)) {
        if (JSON.stringify(valueAt(before.node, key)) !== JSON.stringify(valueAt(node, key))) delete errors[key];
      }
      delete state.errors.nodes[before.node.name];
      if (Object.keys(errors).length) state.errors.nodes[node.name] = errors;
    }
    cell.setData({ seq: before.seq, node: node }, { overwrite: true, fromPanel: true });
    if (node.name !== before.node.name) {
      const title = panelEl.querySelector("#pe-panel-title");
      if (title) title.textContent = node.name;
    }
  }
  function valueAt(node, key) {
    return key.split(".").reduce(function (value, part) { return value && typeof value === "object" ? value[part] : undefined; }, node);
  }

  function connect(cell, otherName, on) {
    const other = nodeByName(otherName);
    if (!other) return "";
    if (on) {
      const path = cyclePath(depsMap(), otherName, nameOf(cell));
      if (path) return fmt(M.cycle, { path: path.join(" → ") });
      addDependency(graph, other.id, cell.id);
    } else {
      graph.removeCells(graph.getEdges().filter(function (e) {
        return e.getSourceCellId() === other.id && e.getTargetCellId() === cell.id;
      }));
    }
    return "";
  }

  const commands = createCommands({
    graph: graph,
    selection: selection,
    canvasEl: canvasEl,
    state: state,
    messages: M,
    announce: announce,
    names: names,
    nameOf: nameOf,
    selectedNodes: selectedNodes,
    newNodeData: newNodeData,
  });
  const removeCells = commands.removeCells;
  const copy = commands.copy;
  const paste = commands.paste;

  // --- the document --------------------------------------------------------------------------------
  function buildSpec() {
    const out = Object.assign({}, state.settings);
    out.nodes = nodes().map(function (cell) {
      const node = structuredClone(cell.getData().node);
      const deps = upstreamOf(cell);
      if (deps.length) node.depends_on = deps;
      else if (Array.isArray(node.depends_on) && node.depends_on.length) delete node.depends_on;
      return node;
    });
    return out;
  }
  function buildLayout() {
    const positions = {};
    for (const cell of graph.getNodes()) {
      const at = cell.position();
      positions[nameOf(cell)] = { x: Math.round(at.x), y: Math.round(at.y) };
    }
    return { nodes: positions };
  }
  function setErrors(raw) {
    state.errors = groupErrors(raw, buildSpec().nodes.map(function (n) { return n.name; }));
    graph.getNodes().forEach(paintNode);
    const failing = nodes().filter(function (n) { return problemCount(nameOf(n)) > 0; });
    const selected = selectedNodes();
    if (failing.length && !(selected.length === 1 && failing.includes(selected[0]))) selection.reset(failing[0]);
    refreshPanel();
    const parts = Object.entries(state.errors.pipeline).map(function (entry) {
      const key = entry[0] === "non_field_errors" || entry[0] === "__all__" ? "" : entry[0] + ": ";
      return key + entry[1].join(" ");
    });
    const messages = [];
    if (parts.length) messages.push(fmt(M.invalidPipeline, { errors: parts.join("; ") }));
    if (failing.length) messages.push(fmt(M.invalidNodes, { count: failing.length }));
    return messages.join(" ");
  }
  // Whether anything is unsaved, worked out once per frame (a node being dragged moves many times a frame).
  let dirtyQueued = false;
  function changed() {
    if (dirtyQueued) return;
    dirtyQueued = true;
    requestAnimationFrame(function () {
      dirtyQueued = false;
      io.updateDirty();
    });
  }

  const io = createIO({
    data: data,
    messages: M,
    csrf: root.dataset.csrf,
    state: state,
    announce: announce,
    buildSpec: buildSpec,
    buildLayout: buildLayout,
    setErrors: setErrors,
    buttons: root,
  });

  // --- load ------------------------------------------------------------------------------------------
  const positions = (p && p.layout && p.layout.nodes) || {};
  const ids = new Map();
  (Array.isArray(spec.nodes) ? spec.nodes : []).forEach(function (node, index) {
    const at = positions[node.name] || { x: 0, y: 0 };
    const cell = addTaskNode(graph, undefined, at, { seq: index, node: structuredClone(node) });
    ids.set(node.name, cell.id);
    state.seq = index + 1;
  });
  for (const node of Array.isArray(spec.nodes) ? spec.nodes : []) {
    for (const dep of new Set(node.depends_on || [])) {
      if (ids.has(dep) && dep !== node.name) addDependency(graph, ids.get(dep), ids.get(node.name));
    }
  }
  if ((spec.nodes || []).some(function (node) { return !positions[node.name]; })) {
    const laid = layeredPositions(graph);
    for (const node of graph.getNodes()) node.position(laid[node.id].x, laid[node.id].y);
  }
  graph.getNodes().forEach(paintNode);
  history.clean();
  // The minimap: the whole graph small, the visible part framed; dragging the frame or clicking moves the view.
  const minimapEl = root.querySelector("[data-minimap]");
  if (minimapEl) createMinimap(graph, minimapEl);
  const zoomEl = root.querySelector("[data-zoom]");
  graph.on("scale", function (args) { if (zoomEl) zoomEl.textContent = Math.round(args.sx * 100) + " %"; });
  fit(graph);
  if (zoomEl) zoomEl.textContent = Math.round(graph.zoom() * 100) + " %";
  io.markSaved();
  refreshPanel();
  updateHistoryButtons();

  // --- events ----------------------------------------------------------------------------------------
  graph.on("view:mounted", function (args) { if (args.view.cell.isNode()) labelNode(args.view.cell); });
  graph.on("selection:changed", schedulePanel);
  graph.on("node:added", function (args) {
    paintNode(args.node);
    if (state.pendingSelect === args.node.id) {
      state.pendingSelect = null;
      selection.reset(args.node);
      announce(fmt(M.added, { name: nameOf(args.node) }));
    }
    schedulePanel();
    changed();
  });
  graph.on("node:change:data", function (args) {
    paintNode(args.node);
    if (!(args.options && args.options.fromPanel)) schedulePanel();
    changed();
  });
  graph.on("node:change:position", changed);
  graph.on("node:removed", function () { schedulePanel(); changed(); });
  graph.on("edge:connected", function () { schedulePanel(); changed(); });
  graph.on("edge:added", function () { schedulePanel(); changed(); });
  graph.on("edge:removed", function () { schedulePanel(); changed(); });
  graph.on("history:change", updateHistoryButtons);
  // A selected edge (click it) has a remove button; Delete removes it too.
  graph.on("edge:selected", function (args) {
    args.edge.addTools([{ name: "button-remove", args: { distance: "50%" } }]);
  });
  graph.on("edge:unselected", function (args) { args.edge.removeTools(); });

  function updateHistoryButtons() {
    root.querySelector('[data-action="undo"]').disabled = !history.canUndo();
    root.querySelector('[data-action="redo"]').disabled = !history.canRedo();
  }

  // Focusing a node (Tab) selects it; the canvas takes the keyboard shortcuts.
  canvasEl.addEventListener("focusin", function (event) {
    const g = event.target.closest && event.target.closest("[data-cell-id]");
    const cell = g && graph.getCellById(g.getAttribute("data-cell-id"));
    if (cell && cell.isNode() && !selection.isSelected(cell)) selection.reset(cell);
  });

  const actions = {
    undo: function () { history.undo(); },
    redo: function () { history.redo(); },
    copy: function () { copy(); },
    paste: paste,
    delete: function () { removeCells(selection.getSelectedCells()); },
    layout: commands.autoLayout,
    fit: function () { fit(graph); },
    zoomIn: function () { zoomBy(graph, 1.2); },
    zoomOut: function () { zoomBy(graph, 1 / 1.2); },
    zoomReset: function () { graph.zoomTo(1, { center: graph.getGraphArea().getCenter() }); },
    validate: io.validate,
    save: io.save,
    run: io.run,
  };
  root.querySelectorAll("[data-action]").forEach(function (button) {
    button.addEventListener("click", function () { actions[button.dataset.action](); });
  });

  bindShortcuts({
    root: root,
    canvasEl: canvasEl,
    panelEl: panelEl,
    graph: graph,
    selection: selection,
    history: history,
    commands: commands,
    save: io.save,
    selectedNodes: selectedNodes,
  });

  createPalette(root.querySelector("[data-palette]"), {
    templates: data.templates,
    messages: M,
    onAdd: commands.addTemplate,
    startDrag: function (template, event) {
      const node = createDragNode(graph, { seq: 0, node: { name: baseName(template.slug), template: template.slug } });
      paint(node, { name: baseName(template.slug), detail: template.slug });
      dnd.start(node, event);
    },
  });

  window.addEventListener("beforeunload", function (event) {
    if (io.dirty()) {
      event.preventDefault();
      event.returnValue = M.leave;
    }
  });
  root.dataset.ready = "1"; // the end-to-end tests wait for this
}

start();
