// The editor's commands on the graph: add a template, delete, copy and paste (copies get free names and keep the
// edges among themselves), auto-layout, move. Each is one undoable step (an X6 batch).
import { addDependency, addTaskNode, fit, freeOffset, layeredPositions, NODE_H, NODE_W } from "./canvas.js";
import { fmt, uniqueName, withField } from "./spec.js";

// ctx: graph, selection, canvasEl, state, messages, announce(text), names(), nameOf(cell), selectedNodes(),
// newNodeData(template).
export function createCommands(ctx) {
  const graph = ctx.graph;
  const selection = ctx.selection;
  const state = ctx.state;
  const M = ctx.messages;
  const announce = ctx.announce;
  const nameOf = ctx.nameOf;
  const names = ctx.names;
  const selectedNodes = ctx.selectedNodes;
  const canvasEl = ctx.canvasEl;
  const newNodeData = ctx.newNodeData;

  function addTemplate(template) {
    const selected = selectedNodes();
    const anchor = selected.length === 1 ? selected[0].position() : null;
    const all = graph.getNodes();
    const x = anchor ? anchor.x + NODE_W + 70 : all.length ? Math.max.apply(null, all.map(function (n) { return n.position().x; })) + NODE_W + 70 : 40;
    const y = anchor ? anchor.y : 40;
    const off = freeOffset(graph, [{ x: x, y: y, width: NODE_W, height: NODE_H }]);
    const node = addTaskNode(graph, undefined, { x: x + off.dx, y: y + off.dy }, newNodeData(template));
    selection.reset(node);
    announce(fmt(M.added, { name: nameOf(node) }));
    graph.centerCell(node);
    return node;
  }

  function removeCells(cells) {
    if (!cells.length) return announce(M.nothingSelected);
    const count = cells.filter(function (c) { return c.isNode(); }).length;
    const hadFocus = canvasEl.contains(document.activeElement);
    graph.startBatch("delete");
    graph.removeCells(cells);
    graph.stopBatch("delete");
    if (hadFocus) canvasEl.focus();
    if (count) announce(fmt(M.deleted, { count: count }));
  }

  function copy(cells) {
    const picked = cells || selectedNodes();
    if (!picked.length) return announce(M.nothingSelected);
    const ids = new Set(picked.map(function (n) { return n.id; }));
    state.clipboard = {
      nodes: picked.map(function (n) { return { id: n.id, node: structuredClone(n.getData().node), position: n.position() }; }),
      edges: graph.getEdges()
        .filter(function (e) { return ids.has(e.getSourceCellId()) && ids.has(e.getTargetCellId()); })
        .map(function (e) { return [e.getSourceCellId(), e.getTargetCellId()]; }),
    };
    state.pastes = 0;
    announce(fmt(M.copied, { count: picked.length }));
  }

  // Copies get free names and keep the edges among themselves; one paste is one undo step.
  function paste() {
    const clip = state.clipboard;
    if (!clip) return announce(M.nothingSelected);
    state.pastes += 1;
    // Beside the originals (or the last paste), never over a node.
    const offset = 30 * state.pastes;
    const off = freeOffset(graph, clip.nodes.map(function (item) {
      return { x: item.position.x + offset, y: item.position.y + offset, width: NODE_W, height: NODE_H };
    }));
    const taken = new Set(names());
    const ids = new Map();
    const added = [];
    graph.startBatch("paste");
    for (const item of clip.nodes) {
      const name = uniqueName(item.node.name, taken);
      taken.add(name);
      const node = withField(item.node, "name", name);
      delete node.depends_on;
      state.seq += 1;
      const cell = addTaskNode(graph, undefined, { x: item.position.x + offset + off.dx, y: item.position.y + offset + off.dy }, { seq: state.seq, node: node });
      ids.set(item.id, cell.id);
      added.push(cell);
    }
    for (const pair of clip.edges) addDependency(graph, ids.get(pair[0]), ids.get(pair[1]));
    graph.stopBatch("paste");
    selection.reset(added);
    announce(fmt(M.pasted, { count: added.length }));
  }

  function autoLayout() {
    const positions = layeredPositions(graph);
    graph.startBatch("layout");
    for (const node of graph.getNodes()) {
      const at = positions[node.id];
      if (at) node.position(at.x, at.y);
    }
    graph.stopBatch("layout");
    fit(graph);
    announce(M.laidOut);
  }

  function moveSelected(dx, dy) {
    const selected = selectedNodes();
    if (!selected.length) return;
    graph.startBatch("move");
    for (const node of selected) node.translate(dx, dy);
    graph.stopBatch("move");
  }

  return { addTemplate: addTemplate, removeCells: removeCells, copy: copy, paste: paste, autoLayout: autoLayout, moveSelected: moveSelected };
}

// Keyboard shortcuts. Listened to on the document: a deleted node takes the focus with it, and the shortcuts
// must still work. In a text field only Ctrl+S is the editor's (Ctrl+Z there is the field's own undo).
// ctx: root, canvasEl, panelEl, graph, selection, history, commands, save(), selectedNodes().
export function bindShortcuts(ctx) {
  const root = ctx.root;
  const canvasEl = ctx.canvasEl;
  const panelEl = ctx.panelEl;
  const graph = ctx.graph;
  const selection = ctx.selection;
  const commands = ctx.commands;
  const selectedNodes = ctx.selectedNodes;
  document.addEventListener("keydown", function (event) {
    if (event.target !== document.body && !root.contains(event.target)) return;
    const typing = event.target.closest && event.target.closest("input, textarea, select, [contenteditable]");
    const mod = event.ctrlKey || event.metaKey;
    const key = event.key.toLowerCase();
    if (mod && key === "s") {
      event.preventDefault();
      if (typing) event.target.blur(); // commits the field being edited
      ctx.save();
      return;
    }
    if (typing) return;
    if (mod && (key === "z" || key === "y")) {
      event.preventDefault();
      if (key === "y" || event.shiftKey) ctx.history.redo();
      else ctx.history.undo();
      return;
    }
    if (!canvasEl.contains(event.target) && event.target !== document.body) return;
    if (mod && key === "c") commands.copy();
    else if (mod && key === "v") commands.paste();
    else if (mod && key === "a") selection.reset(graph.getNodes());
    else if (key === "delete" || key === "backspace") commands.removeCells(selection.getSelectedCells());
    else if (key === "escape") { selection.clean(); canvasEl.focus(); }
    else if (key === "enter" && selectedNodes().length === 1) {
      const first = panelEl.querySelector("input, select, textarea");
      if (first) first.focus();
    } else if (key.startsWith("arrow")) {
      const step = event.shiftKey ? 50 : 10;
      const delta = { arrowleft: [-step, 0], arrowright: [step, 0], arrowup: [0, -step], arrowdown: [0, step] }[key];
      commands.moveSelected(delta[0], delta[1]);
    } else return;
    event.preventDefault();
  });
}
