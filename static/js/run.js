// Live run page: node colours, badges, waiting reasons and the progress bar follow the status messages
// that arrive on the run's log websocket (logviewer.js re-dispatches them as "portal:run-status"). What the messages
// do not carry (timings, actions such as cancel/retry/re-run, attempts) is redrawn by the server: the header and the
// node table are fetched from the run's summary fragment and swapped in by id as nodes finish and once the run
// ends. The page never reloads itself.
(function () {
  "use strict";
  const FINAL = ["succeeded", "failed", "cancelled"];
  const SWAPPED = ["run", "run-tasks"]; // ids of jobs/partials/run_summary.html's parts
  const first = document.getElementById("run");
  if (!first) return;
  const runId = first.dataset.run;
  const summaryUrl = first.dataset.summaryUrl;
  const drawn = document.querySelector("#run-status [data-status]");
  let finalShown = Boolean(drawn && FINAL.includes(drawn.dataset.status)); // drawn finished: nothing to redraw
  let lastDone = null; // null until the socket's snapshot: that one matches what the page was drawn with
  let pending = null; // a summary fetch waiting to start (several messages in a burst: one fetch)
  let inFlight = false;
  let again = false;

  function fetchSummary() {
    pending = null;
    if (inFlight) {
      again = true; // one more once this one is in: the run changed meanwhile
      return;
    }
    inFlight = true;
    fetch(summaryUrl, { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (response) {
        if (!response.ok) throw new Error(response.status + " " + response.statusText);
        return response.text();
      })
      .then(function (html) {
        const template = document.createElement("template");
        template.innerHTML = html;
        SWAPPED.forEach(function (id) {
          const fresh = template.content.getElementById(id);
          const old = document.getElementById(id);
          if (fresh && old) old.replaceWith(fresh);
        });
        document.dispatchEvent(new CustomEvent("portal:run-summary", { detail: { run: runId } }));
      })
      .catch(function () {
        // The badges and the progress bar are live already; the timings stay as they were drawn.
      })
      .finally(function () {
        inFlight = false;
        if (again) {
          again = false;
          refreshSummary(0);
        }
      });
  }

  function refreshSummary(delay) {
    if (!summaryUrl) return;
    if (pending !== null) clearTimeout(pending);
    pending = setTimeout(fetchSummary, delay);
  }

  // The words of apps.jobs' TaskRun/PipelineRun statuses, from the page's catalogue (/jsi18n/).
  const LABELS = {
    pending: gettext("Pending"),
    waiting: gettext("Waiting"),
    queued: gettext("Queued"),
    running: gettext("Running"),
    succeeded: gettext("Succeeded"),
    cached: gettext("Cached"),
    failed: gettext("Failed"),
    cancelled: gettext("Cancelled"),
    cancelling: gettext("Cancelling"),
    skipped: gettext("Skipped"),
    upstream_failed: gettext("Upstream failed"),
  };
  function badge(status) {
    const span = document.createElement("span");
    span.className = "badge status-" + status;
    span.dataset.status = status;
    span.textContent = LABELS[status] || status.replace("_", " ");
    return span;
  }
  const FINAL_BAR = { succeeded: "bg-success", failed: "bg-danger", cancelled: "bg-secondary" };
  const progressBar = document.getElementById("run-progress");
  const progress = {
    done: Number(progressBar.getAttribute("aria-valuenow")),
    total: Number(progressBar.getAttribute("aria-valuemax")),
  };
  // "2/5 nodes done · 1 running", as the page draws it, from the node table's badges.
  function drawProgressText() {
    const running = document.querySelectorAll('#nodes [data-field="status"] [data-status="running"]').length;
    let text = interpolate(gettext("%(done)s/%(total)s nodes done"), progress, true);
    if (running) text += " · " + interpolate(ngettext("%(n)s running", "%(n)s running", running), { n: running }, true);
    document.getElementById("run-progress-text").textContent = text;
  }
  document.addEventListener("portal:run-summary", drawProgressText);
  document.addEventListener("portal:run-status", function (event) {
    const data = event.detail;
    if (String(data.run) !== runId) return;
    // A message may carry only the nodes that changed (and no run status or progress when those did not).
    if (data.status) {
      document.getElementById("run-status").replaceChildren(badge(data.status));
      document.getElementById("run-reason").textContent = data.reason || "";
    }
    const bar = document.getElementById("run-progress");
    const fill = bar.querySelector(".progress-bar");
    if (typeof data.done === "number") {
      bar.setAttribute("aria-valuenow", data.done);
      bar.setAttribute("aria-valuemax", data.total);
      fill.style.width = (data.total ? Math.round((100 * data.done) / data.total) : 100) + "%";
      progress.done = data.done;
      progress.total = data.total;
    }
    if (FINAL_BAR[data.status]) {
      fill.classList.remove("progress-bar-striped", "progress-bar-animated");
      fill.classList.add(FINAL_BAR[data.status]);
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
      if (node.status !== "running") delete row.querySelector('[data-field="duration"]').dataset.elapsed;
    });
    drawProgressText();
    if (FINAL.includes(data.status)) {
      const elapsed = document.getElementById("run-elapsed");
      if (elapsed) delete elapsed.dataset.elapsed; // the summary brings the final duration
      if (!finalShown) {
        finalShown = true; // final timings and actions (retry, re-run from a node) once, in place
        refreshSummary(0);
      }
    } else if (lastDone !== null) {
      // A node started (its start time) or finished (its duration, the next attempt).
      const started = Object.values(data.nodes || {}).some(function (node) { return node.status === "running"; });
      if (started || (typeof data.done === "number" && data.done !== lastDone)) refreshSummary(500);
    }
    if (typeof data.done === "number") lastDone = data.done;
  });
})();
