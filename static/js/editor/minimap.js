// The editor's minimap: the whole graph small, the part the canvas shows framed; a click in it centres the view
// there, a drag (of the frame or from the click) pans the canvas.
//
// Not X6's MiniMap plugin: it expects the Scroller plugin, and on a plain graph (ours: panning by translation, fit
// and zoom buttons in canvas.js) it fits its picture to the nodes alone while sizing its frame to the canvas, so a
// graph that fits in the canvas got a frame larger than the picture, cut off and out of place. Here the picture
// shows what Fit would show (the nodes with the canvas's proportions around them), extended to whatever is in
// view beyond it: the frame always lies inside the picture and is exactly what the canvas shows; fitted, it holds
// the whole picture; zoomed in, it shrinks over a picture that holds still. The small graph is a second X6 graph
// on the same model (as the plugin's was): nodes and edges look the same and follow every change without copying.
import { FIT_PADDING } from "./canvas.js";

const X6 = window.X6;
const PADDING = 8; // between the minimap's border and the picture

export function createMinimap(graph, el) {
  const stage = document.createElement("div");
  stage.className = "pe-minimap-graph";
  const frame = document.createElement("div");
  frame.className = "pe-minimap-frame";
  frame.setAttribute("data-minimap-frame", "");
  el.append(stage, frame);

  const small = new X6.Graph({
    container: stage,
    model: graph.model,
    width: el.clientWidth,
    height: el.clientHeight,
    interacting: false,
    grid: false,
    background: false,
    panning: false,
    mousewheel: false,
    embedding: false,
  });

  // The picture's mapping: a point (x, y) of the graph is at (left + (x - world.x) * ratio, top + …) in the minimap.
  let view = null;
  let dragging = null;

  function visibleArea() {
    return graph.getGraphArea(); // the canvas's box in graph coordinates
  }

  function layout() {
    const width = el.clientWidth;
    const height = el.clientHeight;
    if (width <= 2 * PADDING || height <= 2 * PADDING) {
      view = null; // hidden (display: none): nothing to draw until it shows
      return;
    }
    const visible = visibleArea();
    const fitted = fittedArea();
    const world = fitted ? visible.union(fitted) : visible;
    const ratio = Math.min((width - 2 * PADDING) / world.width, (height - 2 * PADDING) / world.height);
    view = {
      world: world,
      ratio: ratio,
      left: (width - world.width * ratio) / 2,
      top: (height - world.height * ratio) / 2,
    };
    small.resize(width, height);
    small.scale(ratio, ratio);
    small.translate(view.left - world.x * ratio, view.top - world.y * ratio);
  }

  // What canvas.js's fit shows (before its clamp): the nodes, centred, at the largest zoom up to 100 % that leaves
  // FIT_PADDING pixels around them.
  function fittedArea() {
    if (!graph.getNodes().length) return null;
    const content = graph.getContentArea({ useCellGeometry: true });
    const width = graph.container.clientWidth;
    const height = graph.container.clientHeight;
    const scale = Math.min(1, (width - 2 * FIT_PADDING) / content.width, (height - 2 * FIT_PADDING) / content.height);
    const centre = content.getCenter();
    return new X6.Rectangle(centre.x - width / scale / 2, centre.y - height / scale / 2, width / scale, height / scale);
  }

  function placeFrame() {
    if (!view) return;
    const visible = visibleArea();
    frame.style.left = view.left + (visible.x - view.world.x) * view.ratio + "px";
    frame.style.top = view.top + (visible.y - view.world.y) * view.ratio + "px";
    frame.style.width = visible.width * view.ratio + "px";
    frame.style.height = visible.height * view.ratio + "px";
  }

  // Redrawn once a frame at most (a node being dragged moves many times a frame). While the minimap itself is being
  // dragged its picture holds still, so that the frame follows the pointer; it is fitted again on release.
  let queued = false;
  function update() {
    if (queued) return;
    queued = true;
    requestAnimationFrame(function () {
      queued = false;
      if (!dragging) layout();
      placeFrame();
    });
  }

  // Where a pointer event is, in graph coordinates.
  function graphPoint(event) {
    const box = el.getBoundingClientRect();
    return {
      x: view.world.x + (event.clientX - box.left - el.clientLeft - view.left) / view.ratio,
      y: view.world.y + (event.clientY - box.top - el.clientTop - view.top) / view.ratio,
    };
  }

  // Pressing outside the frame centres the view there at once; then, as pressing on the frame, dragging pans. A
  // click on the frame (no drag) centres the view there too.
  el.addEventListener("pointerdown", function (event) {
    if (event.button !== 0 || !view) return;
    event.preventDefault();
    const onFrame = event.target === frame;
    if (!onFrame) centreAt(event);
    const at = graph.translate();
    dragging = { x: event.clientX, y: event.clientY, tx: at.tx, ty: at.ty, pointer: event.pointerId, onFrame: onFrame, moved: false };
    el.setPointerCapture(event.pointerId);
    placeFrame();
  });
  el.addEventListener("pointermove", function (event) {
    if (!dragging || event.pointerId !== dragging.pointer) return;
    const dx = event.clientX - dragging.x;
    const dy = event.clientY - dragging.y;
    if (Math.abs(dx) + Math.abs(dy) > 2) dragging.moved = true;
    if (!dragging.moved) return;
    // A pixel of the minimap is 1 / ratio graph units, zoom / ratio canvas pixels.
    const factor = graph.zoom() / view.ratio;
    graph.translate(dragging.tx - dx * factor, dragging.ty - dy * factor);
  });
  const release = function (event) {
    if (!dragging || event.pointerId !== dragging.pointer) return;
    const click = dragging.onFrame && !dragging.moved && event.type === "pointerup";
    if (click) centreAt(event);
    dragging = null;
    update();
  };
  function centreAt(event) {
    const at = graphPoint(event);
    graph.centerPoint(at.x, at.y);
  }
  el.addEventListener("pointerup", release);
  el.addEventListener("pointercancel", release);

  graph.on("translate", update);
  graph.on("scale", update);
  graph.on("resize", update);
  graph.on("cell:added", update);
  graph.on("cell:removed", update);
  graph.on("node:change:position", update);
  graph.on("model:reseted", update);
  layout();
  placeFrame();
  return { update: update };
}
