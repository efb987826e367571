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
const ROUTER = { name: "portal-route" };
const CONNECTOR = { name: "rounded", args: { radius: 6 } };
// Edges keep this far from every node; the grid's size is the router's step, so that its turns fall on the grid.
const CLEARANCE = 10;
const PORT_R = 6; // the ports' radius (register)
const GRID = 10;
// A new node keeps this much room around it (freeOffset), so that an edge can pass between it and its neighbours.
const GAP = 30;
export const MIN_READABLE_SCALE = 0.6; // below this, node names are too small to read: fit stops here
export const MIN_SCALE = 0.2;
export const MAX_SCALE = 2;
export const FIT_PADDING = 24; // screen pixels around the graph when fitted
const ERROR_STROKE = "#dc3545";

let registered = false;

function register() {
  if (registered) return;
  registered = true;
  const port = function (position, magnet) {
    return {
      position: position,
      attrs: {
        circle: { r: PORT_R, magnet: magnet, stroke: "#495057", strokeWidth: 1.5, fill: "#fff", cursor: magnet === true ? "crosshair" : "default" },
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
  // Edges leave to the right and enter from the left, routed around the nodes in between (orthogonal, rounded
  // corners): a smooth curve from A to C ran straight behind B when B sat between them.
  X6.Graph.registerRouter("portal-route", route, true);
  X6.Graph.registerEdge(EDGE, {
    inherit: "edge",
    attrs: { line: { stroke: "#6c757d", strokeWidth: 1.5, targetMarker: { name: "block", width: 8, height: 6 } } },
    router: ROUTER,
    connector: CONNECTOR,
    zIndex: -1,
  }, true);
}

// The route of an edge: X6's manhattan router (orthogonal, around every node at CLEARANCE). It finds no way when an
// end sits in another node's margin (nodes dropped close together) or the only way is narrower than the margins;
// X6 then draws its "orth" fallback straight through the nodes. Instead: manhattan again with a thin margin, and
// failing that a detour around the edge's own two nodes.
const MANHATTAN_ARGS = {
  step: GRID,
  padding: CLEARANCE,
  startDirections: ["right"],
  endDirections: ["left"],
  excludeTerminals: [], // the edge's own nodes are obstacles too: it never runs back behind them
  snapToGrid: false, // the route is on a grid from the port, which is not on the canvas's grid (NODE_H / 2)
};
const TIGHT_ARGS = Object.assign({}, MANHATTAN_ARGS, { step: GRID / 2, padding: 3 });

function manhattan(ctx, vertices, args, view) {
  let failed = false;
  const options = Object.assign({}, args, {
    // Called where manhattan finds no way (instead of warning and drawing "orth" through the nodes).
    fallbackRoute: function () {
      failed = true;
      return [];
    },
  });
  const points = X6.routerPresets.manhattan.call(ctx, vertices, options, view);
  return failed ? null : points;
}

function route(vertices, args, view) {
  const points = manhattan(this, vertices, MANHATTAN_ARGS, view) || manhattan(this, vertices, TIGHT_ARGS, view);
  if (points) return turnEarly(points, view);
  return detour(view) || [];
}

// Manhattan turns as late as it may: an edge from A that climbs over its neighbour B ran along A → B's line up to
// B's input and turned there, on top of that edge's arrow. Its first turn moves back to just past the source's
// port when the way from there is clear.
function turnEarly(points, view) {
  const s = view.sourceAnchor;
  if (!s || points.length < 2 || view.cell.getVertices().length) return points;
  const p = points[0];
  const q = points[1];
  const x = s.x + PORT_R + CLEARANCE;
  if (p.y !== s.y || q.x !== p.x || x >= p.x) return points; // not "right, then up or down"
  const clear = [[x, s.y, x, q.y], [x, q.y, p.x, q.y]].every(function (segment) {
    return segmentClear(view.graph, segment);
  });
  if (!clear) return points;
  return [{ x: x, y: p.y }, { x: x, y: q.y }].concat(points.slice(2));
}

// Whether an axis-parallel segment [x1, y1, x2, y2] stays CLEARANCE - 1 away from every node.
function segmentClear(graph, segment) {
  const m = CLEARANCE - 1;
  const left = Math.min(segment[0], segment[2]);
  const right = Math.max(segment[0], segment[2]);
  const top = Math.min(segment[1], segment[3]);
  const bottom = Math.max(segment[1], segment[3]);
  return graph.getNodes().every(function (node) {
    const b = node.getBBox();
    return right <= b.x - m || left >= b.x + b.width + m || bottom <= b.y - m || top >= b.y + b.height + m;
  });
}

// Around the edge's two nodes only: through the gap between them when there is one, else around both.
function detour(view) {
  const edge = view.cell;
  const source = edge.getSourceCell();
  const target = edge.getTargetCell();
  if (!source || !target || !view.sourceAnchor || !view.targetAnchor) return null;
  const S = source.getBBox();
  const T = target.getBBox();
  const s = view.sourceAnchor;
  const t = view.targetAnchor;
  const d = 2 * CLEARANCE;
  if (T.x >= S.x + S.width) {
    const x = (S.x + S.width + T.x) / 2; // the target is to the right: turn in the gap
    return [{ x: x, y: s.y }, { x: x, y: t.y }];
  }
  const out = s.x + d;
  const into = t.x - d;
  if (T.y >= S.y + S.height || S.y >= T.y + T.height) {
    const y = T.y >= S.y + S.height ? (S.y + S.height + T.y) / 2 : (T.y + T.height + S.y) / 2; // a lane between them
    return [{ x: out, y: s.y }, { x: out, y: y }, { x: into, y: y }, { x: into, y: t.y }];
  }
  const right = Math.max(S.x + S.width, T.x + T.width) + d;
  const left = Math.min(S.x, T.x) - d;
  const above = Math.min(S.y, T.y) - d;
  const below = Math.max(S.y + S.height, T.y + T.height) + d;
  const y = s.y + t.y - 2 * above <= 2 * below - s.y - t.y ? above : below;
  return [{ x: right, y: s.y }, { x: right, y: y }, { x: left, y: y }, { x: left, y: t.y }];
}

// A graph in `container`. Options: readOnly, validateEdge(edge) → boolean (editor: refuse cycles).
export function createGraph(container, options) {
  register();
  const readOnly = Boolean(options && options.readOnly);
  const graph = new X6.Graph({
    container: container,
    autoResize: true,
    background: { color: "#f8f9fa" },
    grid: { visible: true, size: GRID, type: "dot", args: { color: "#ced4da" } },
    panning: { enabled: true, eventTypes: ["leftMouseDown"] },
    mousewheel: { enabled: true, modifiers: ["ctrl", "meta"], minScale: MIN_SCALE, maxScale: MAX_SCALE },
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
      router: ROUTER,
      connector: CONNECTOR,
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

// How far to move the boxes ({x, y, width, height}, graph coordinates) so that none comes within GAP of a node
// outside `moving` (ids): {dx: 0, dy: 0} when they are clear, else the nearest free offset on the grid, searched
// ring by ring around where they are. A node dropped onto another, or pasted over its original, moves aside.
export function freeOffset(graph, boxes, moving) {
  const others = graph.getNodes().filter(function (n) { return !moving || !moving.has(n.id); }).map(function (n) { return n.getBBox(); });
  const clear = function (dx, dy) {
    return boxes.every(function (b) {
      return others.every(function (o) {
        return b.x + dx >= o.x + o.width + GAP || o.x >= b.x + dx + b.width + GAP
          || b.y + dy >= o.y + o.height + GAP || o.y >= b.y + dy + b.height + GAP;
      });
    });
  };
  const free = nearOffsets().find(function (o) { return clear(o[0] * GRID, o[1] * GRID); });
  return free ? { dx: free[0] * GRID, dy: free[1] * GRID } : { dx: 0, dy: 0 };
}

// Grid offsets up to 80 steps away, nearest first.
let offsets = null;
function nearOffsets() {
  if (offsets) return offsets;
  const R = 80;
  offsets = [];
  for (let i = -R; i <= R; i += 1) {
    for (let j = -R; j <= R; j += 1) if (i * i + j * j <= R * R) offsets.push([i, j]);
  }
  offsets.sort(function (a, b) { return a[0] * a[0] + a[1] * a[1] - b[0] * b[0] - b[1] * b[1]; });
  return offsets;
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

// Fit the graph, then clamp: never above 100 %, never below a readable scale. A graph too big to fit readably is
// shown from its start (top left), where a reader begins, rather than shrunk to unreadable boxes.
export function fit(graph) {
  if (!graph.getNodes().length) return;
  graph.zoomToFit({ padding: FIT_PADDING, maxScale: 1, minScale: MIN_READABLE_SCALE });
  if (graph.zoom() <= MIN_READABLE_SCALE + 1e-6) {
    const area = graph.getContentArea(); // the nodes' box in graph coordinates
    const scale = graph.zoom();
    graph.translate(FIT_PADDING - area.x * scale, FIT_PADDING - area.y * scale);
  }
}

export function zoomBy(graph, factor) {
  const scale = Math.min(MAX_SCALE, Math.max(MIN_SCALE, graph.zoom() * factor));
  graph.zoomTo(scale, { center: graph.getGraphArea().getCenter() });
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
