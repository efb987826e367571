// The graph canvas shared by the editor and the run page: AntV X6 (static/vendor/x6) draws the nodes and edges,
// dagre (static/vendor/dagre) lays them out. A node is one pipeline node: an input port on the left, an output
// port on the right; an edge from A's output to B's input means "B depends on A".

const X6 = window.X6;
export const NODE_W = 190;
export const NODE_H = 58;
const SHAPE = "portal-task";
const EDGE = "portal-dep";

// Fill and stroke per run status: the colours of static/css/portal.css (badges and the server-drawn DAG).
export const STATUS_COLOURS = {
  pending: ["#f8f9fa", "#adb5bd"],
  waiting: ["#f8f9fa", "#adb5bd"],
  queued: ["#e7f1ff", "#6ea8fe"],
  running: ["#cfe2ff", "#0d6efd"],
  cancelling: ["#cfe2ff", "#0d6efd"],
  succeeded: ["#d1e7dd", "#198754"],
  cached: ["#e2e3e5", "#6c757d"],
  skipped: ["#e2e3e5", "#6c757d"],
  failed: ["#f8d7da", "#dc3545"],
  upstream_failed: ["#f8d7da", "#dc3545"],
  cancelled: ["#fff3cd", "#ffc107"],
};
const PLAIN = ["#ffffff", "#adb5bd"];
const ERROR_STROKE = "#dc3545";

let registered = false;

function register() {
  if (registered) return;
  registered = true;
  const port = function (position, magnet) {
    return {
      position: position,
      attrs: {
        circle: { r: 6, magnet: magnet, stroke: "#495057", strokeWidth: 1.5, fill: "#fff", cursor: magnet === true ? "crosshair" : "default" },
      },
    };
  };
  X6.Graph.registerNode(SHAPE, {
    inherit: "rect",
    width: NODE_W,
    height: NODE_H,
    markup: [
      { tagName: "rect", selector: "body" },
      { tagName: "text", selector: "name" },
      { tagName: "text", selector: "detail" },
      { tagName: "text", selector: "badge" },
    ],
    attrs: {
      body: { rx: 8, ry: 8, fill: PLAIN[0], stroke: PLAIN[1], strokeWidth: 1.5 },
      name: {
        refX: 12, refY: 20, textAnchor: "start", textVerticalAnchor: "middle",
        fontSize: 13, fontWeight: 600, fill: "#212529", fontFamily: "system-ui, sans-serif",
      },
      detail: {
        refX: 12, refY: 40, textAnchor: "start", textVerticalAnchor: "middle",
        fontSize: 11, fill: "#6c757d", fontFamily: "ui-monospace, monospace",
      },
      badge: {
        refX: "100%", refX2: -14, refY: 20, textAnchor: "middle", textVerticalAnchor: "middle",
        fontSize: 15, fontWeight: 700, fill: ERROR_STROKE, text: "",
      },
    },
    ports: {
      groups: { in: port("left", "passive"), out: port("right", true) },
      items: [{ id: "in", group: "in" }, { id: "out", group: "out" }],
    },
  }, true);
  X6.Graph.registerEdge(EDGE, {
    inherit: "edge",
    attrs: { line: { stroke: "#6c757d", strokeWidth: 1.5, targetMarker: { name: "block", width: 8, height: 6 } } },
    connector: { name: "smooth" },
    zIndex: -1,
  }, true);
}

// A graph in `container`. Options: readOnly, validateEdge(edge) → boolean (editor: refuse cycles).
export function createGraph(container, options) {
  register();
  const readOnly = Boolean(options && options.readOnly);
  const graph = new X6.Graph({
    container: container,
    autoResize: true,
    background: { color: "#f8f9fa" },
    grid: { visible: true, size: 10, type: "dot", args: { color: "#ced4da" } },
    panning: { enabled: true, eventTypes: ["leftMouseDown"] },
    mousewheel: { enabled: true, modifiers: ["ctrl", "meta"], minScale: 0.3, maxScale: 2 },
    interacting: readOnly
      ? { nodeMovable: false, edgeMovable: false, magnetConnectable: false, vertexMovable: false, vertexAddable: false }
      : { edgeLabelMovable: false, vertexAddable: false },
    connecting: {
      snap: { radius: 30 },
      allowBlank: false,
      allowLoop: false,
      allowNode: false,
      allowEdge: false,
      allowMulti: false,
      highlight: true,
      anchor: "center",
      connectionPoint: "anchor",
      connector: { name: "smooth" },
      createEdge: function () {
        return this.createEdge({ shape: EDGE });
      },
      validateMagnet: function (args) {
        return !readOnly && args.magnet.getAttribute("port-group") === "out";
      },
      validateConnection: function (args) {
        return args.sourcePort === "out" && args.targetPort === "in" && args.sourceCell !== args.targetCell;
      },
      validateEdge: function (args) {
        return options && options.validateEdge ? options.validateEdge(args.edge) : true;
      },
    },
    highlighting: {
      magnetAvailable: { name: "stroke", args: { padding: 3, attrs: { stroke: "#0d6efd", strokeWidth: 2 } } },
      magnetAdsorbed: { name: "stroke", args: { padding: 3, attrs: { stroke: "#198754", strokeWidth: 3 } } },
    },
  });
  return graph;
}

function clip(text, length) {
  const value = String(text || "");
  return value.length > length ? value.slice(0, length - 1) + "…" : value;
}

// The node's two text lines (clipped to the box: X6's textWrap measures fonts, which is slow and fragile) and,
// in the editor, its error badge and outline.
export function paint(node, state) {
  const colours = (state.status && STATUS_COLOURS[state.status]) || PLAIN;
  const failing = Boolean(state.error);
  node.attr({
    body: { fill: colours[0], stroke: failing ? ERROR_STROKE : colours[1], strokeWidth: failing ? 3 : state.status ? 2 : 1.5 },
    name: { text: clip(state.name, 22) },
    detail: { text: clip(state.detail, 27) },
    badge: { text: failing ? "!" : "" },
  }, { silent: false, history: false });
}

export function addTaskNode(graph, id, position, data) {
  return graph.addNode({ id: id, shape: SHAPE, x: position.x, y: position.y, data: data });
}

export function addDependency(graph, sourceId, targetId) {
  return graph.addEdge({ shape: EDGE, source: { cell: sourceId, port: "out" }, target: { cell: targetId, port: "in" } });
}

export function createDragNode(graph, data) {
  return graph.createNode({ shape: SHAPE, data: data });
}

// Left-to-right layered positions by dagre: {id: {x, y}} (top-left corners).
export function layeredPositions(graph) {
  const g = new window.dagre.graphlib.Graph();
  g.setGraph({ rankdir: "LR", nodesep: 28, ranksep: 70, marginx: 20, marginy: 20 });
  g.setDefaultEdgeLabel(function () { return {}; });
  for (const node of graph.getNodes()) g.setNode(node.id, { width: NODE_W, height: NODE_H });
  for (const edge of graph.getEdges()) {
    const source = edge.getSourceCellId();
    const target = edge.getTargetCellId();
    if (source && target) g.setEdge(source, target);
  }
  window.dagre.layout(g);
  const positions = {};
  for (const id of g.nodes()) {
    const box = g.node(id);
    positions[id] = { x: Math.round(box.x - NODE_W / 2), y: Math.round(box.y - NODE_H / 2) };
  }
  return positions;
}

export function fit(graph) {
  if (!graph.getNodes().length) return;
  graph.zoomToFit({ padding: 24, maxScale: 1 });
}

// Keyboard access: each node's SVG group is focusable and named. Called when X6 mounts a node's view.
export function labelView(view, label, name) {
  const el = view && view.container;
  if (!el) return;
  el.setAttribute("data-node", name);
  el.setAttribute("tabindex", "0");
  el.setAttribute("role", "button");
  el.setAttribute("aria-label", label);
}
