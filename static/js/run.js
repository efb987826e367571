// Live run page: node colours, badges, waiting reasons and the progress bar follow the status messages
// that arrive on the run's log websocket (logviewer.js re-dispatches them as "portal:run-status").
(function () {
  "use strict";
  const root = document.getElementById("run");
  if (!root) return;
  function badge(status) {
    const span = document.createElement("span");
    span.className = "badge status-" + status;
    span.dataset.status = status;
    span.textContent = status.replace("_", " ");
    return span;
  }
  document.addEventListener("portal:run-status", function (event) {
    const data = event.detail;
    if (String(data.run) !== root.dataset.run) return;
    // A message may carry only the nodes that changed (and no run status or progress when those did not).
    if (data.status) {
      document.getElementById("run-status").replaceChildren(badge(data.status));
      document.getElementById("run-reason").textContent = data.reason || "";
    }
    if (typeof data.done === "number") {
      const bar = document.getElementById("run-progress");
      bar.setAttribute("aria-valuenow", data.done);
      const fill = bar.querySelector(".progress-bar");
      fill.style.width = (data.total ? Math.round((100 * data.done) / data.total) : 100) + "%";
      fill.textContent = data.done + "/" + data.total;
    }
    Object.entries(data.nodes || {}).forEach(function ([name, node]) {
      document.querySelectorAll('.dag-node[data-node="' + CSS.escape(name) + '"] rect').forEach(function (rect) {
        rect.setAttribute("class", "node-box status-" + node.status);
      });
      const row = document.querySelector('#nodes tr[data-node="' + CSS.escape(name) + '"]');
      if (!row) return;
      row.querySelector('[data-field="status"]').replaceChildren(badge(node.status));
      row.querySelector('[data-field="attempt"]').textContent = node.attempt || "—";
      row.querySelector('[data-field="reason"]').textContent = node.waiting_reason || node.reason || "";
    });
    if (["succeeded", "failed", "cancelled"].includes(data.status) && !root.dataset.reloaded) {
      root.dataset.reloaded = "1";
      setTimeout(function () { window.location.reload(); }, 1500); // show final timings and actions
    }
  });
})();
