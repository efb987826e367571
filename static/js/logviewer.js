// Live log viewer of a pipeline run (templates/jobs/partials/log_viewer.html).
// The websocket sends the stored backlog, then live lines; on reconnect it resumes after the last id shown and,
// for each task attempt, after the highest seq shown (the server fills what never arrived from the store).
// Filters reconnect from the start; a search result or the first error can be jumped to.
(function () {
  "use strict";

  const FINAL_CLOSE = { 4400: "denied", 4401: "signedOut", 4404: "denied" };
  const JUMP_CONTEXT = 50; // lines before a jumped-to line, by id
  // A line arrives as a row of apps.jobs.logs.ROW_FIELDS (a third of the bytes of an object per line).
  function toLine(r) {
    return { id: r[0], task: r[1], node: r[2], attempt: r[3], replica: r[4], seq: r[5], ts: r[6], stream: r[7], text: r[8] };
  }

  function pad(n, width) {
    return String(n).padStart(width, "0");
  }

  function shortTime(iso) {
    const d = new Date(iso);
    if (isNaN(d.getTime())) return iso;
    return pad(d.getHours(), 2) + ":" + pad(d.getMinutes(), 2) + ":" + pad(d.getSeconds(), 2) + "." + pad(d.getMilliseconds(), 3);
  }

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function LogViewer(root) {
    const data = root.dataset;
    const pane = root.querySelector("[data-log-lines]");
    const nodeSelect = root.querySelector("[data-log-node]");
    const replicaSelect = root.querySelector("[data-log-replica]");
    const followBox = root.querySelector("[data-log-follow]");
    const stateLabel = root.querySelector("[data-log-state]");
    const statusBadge = root.querySelector("[data-log-status]");
    const download = root.querySelector("[data-log-download]");
    const results = root.querySelector("[data-log-results]");
    const resultsList = root.querySelector("[data-log-results-list]");
    const resultsNote = root.querySelector("[data-log-results-note]");
    const maxLines = parseInt(data.maxLines, 10) || 5000;
    let statusLabels = {};
    try { statusLabels = JSON.parse(data.statusLabels || "{}"); } catch (e) { statusLabels = {}; }

    pane.style.height = "70vh";
    pane.style.whiteSpace = "pre-wrap";
    pane.style.wordBreak = "break-all";
    resultsList.style.maxHeight = "12rem";

    let socket = null;
    let lastId = 0; // highest id shown: the resume point
    const lastSeq = new Map(); // task attempt id → highest seq shown (an attempt's lines come in seq order)
    const shown = new Set(); // ids in the DOM (lines of concurrent tasks can arrive out of id order)
    const replicas = new Set();
    let held = false; // after a jump: keep the lines around it instead of dropping the oldest
    let paused = false; // held and full: the socket is closed until Follow is turned back on
    let stopped = false; // closed for good (signed out, no access)
    let delay = 1000;
    let retry = null;
    let jumpTarget = null;

    function setState(key) {
      stateLabel.textContent = data["msg" + key.charAt(0).toUpperCase() + key.slice(1)] || "";
    }

    function follow() {
      return followBox.checked;
    }

    function scrollToEnd() {
      pane.scrollTop = pane.scrollHeight;
    }

    function lineElement(line) {
      const row = el("div", line.stream === "stderr" ? "log-line text-danger-emphasis" : "log-line");
      row.id = "log-line-" + line.id;
      row.dataset.id = line.id;
      const ts = el("span", "text-secondary", shortTime(line.ts) + " ");
      ts.title = line.ts;
      row.appendChild(ts);
      row.appendChild(el("span", "text-info", "[" + line.node + "#" + line.attempt + "/" + line.replica + "] "));
      row.appendChild(el("span", "", line.text));
      return row;
    }

    function addReplica(name) {
      if (replicas.has(name)) return;
      replicas.add(name);
      const option = el("option", "", name);
      option.value = name;
      replicaSelect.appendChild(option);
    }

    function pause() {
      paused = true;
      setState("paused");
      if (socket) {
        const s = socket;
        socket = null;
        s.close();
      }
    }

    function append(lines) {
      const fragment = document.createDocumentFragment();
      for (const line of lines) {
        addReplica(line.replica);
        if (shown.has(line.id)) continue;
        if (held && shown.size >= maxLines) {
          pause();
          break;
        }
        shown.add(line.id);
        if (line.id > lastId) lastId = line.id;
        if (!(lastSeq.get(line.task) >= line.seq)) lastSeq.set(line.task, line.seq);
        fragment.appendChild(lineElement(line));
      }
      pane.appendChild(fragment);
      while (!held && shown.size > maxLines && pane.firstChild) {
        shown.delete(Number(pane.firstChild.dataset.id));
        pane.removeChild(pane.firstChild);
      }
      if (jumpTarget !== null && shown.has(jumpTarget)) {
        const target = jumpTarget;
        jumpTarget = null;
        highlight(target);
      } else if (follow()) {
        scrollToEnd();
      }
    }

    function connect() {
      retry = null;
      if (stopped || paused) return;
      const params = new URLSearchParams();
      if (lastId) params.set("after", String(lastId));
      if (lastSeq.size) {
        params.set("seen", Array.from(lastSeq, function (entry) { return entry[0] + ":" + entry[1]; }).join(","));
      }
      if (nodeSelect.value) params.set("task", nodeSelect.value);
      if (replicaSelect.value) params.set("replica", replicaSelect.value);
      const scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
      const query = params.toString();
      const s = new WebSocket(scheme + window.location.host + data.wsPath + (query ? "?" + query : ""));
      socket = s;
      setState("connecting");
      s.onopen = function () {
        if (s !== socket) return;
        delay = 1000;
        setState("live");
      };
      s.onmessage = function (event) {
        if (s !== socket) return;
        const message = JSON.parse(event.data);
        if (message.type === "lines") {
          append(message.rows.map(toLine));
        } else if (message.type === "status") {
          if (statusBadge && message.status) {
            statusBadge.textContent = statusLabels[message.status] || message.status;
          }
          // The run page (run.js) colours nodes and moves the progress bar from the same events.
          document.dispatchEvent(new CustomEvent("portal:run-status", { detail: message }));
        }
      };
      s.onclose = function (event) {
        if (s !== socket) return;
        socket = null;
        if (FINAL_CLOSE[event.code]) {
          stopped = true;
          setState(FINAL_CLOSE[event.code]);
          return;
        }
        setState("reconnecting");
        retry = setTimeout(connect, delay);
        delay = Math.min(delay * 2, 30000);
      };
    }

    // Start over from `after` (0: the whole log) with the current filters.
    function restart(after) {
      if (retry !== null) clearTimeout(retry);
      if (socket) {
        const s = socket;
        socket = null;
        s.close();
      }
      pane.replaceChildren();
      shown.clear();
      lastSeq.clear();
      lastId = after;
      paused = false;
      connect();
    }

    function highlight(id) {
      const row = document.getElementById("log-line-" + id);
      if (!row) return false;
      followBox.checked = false;
      row.scrollIntoView({ block: "center" });
      row.classList.add("bg-warning-subtle");
      setTimeout(function () { row.classList.remove("bg-warning-subtle"); }, 2500);
      return true;
    }

    function jump(line) {
      if (highlight(line.id)) return;
      // Not in view: show the log from just before the line, with every node and replica.
      nodeSelect.value = "";
      replicaSelect.value = "";
      updateDownload();
      followBox.checked = false;
      held = true;
      jumpTarget = line.id;
      restart(Math.max(0, line.id - JUMP_CONTEXT));
    }

    function showResults(matches, note) {
      resultsList.replaceChildren();
      for (const line of matches) {
        const item = el("li", line.stream === "stderr" ? "text-danger" : "");
        const button = el("button", "btn btn-link btn-sm p-0 me-2 align-baseline", data.msgJump);
        button.type = "button";
        button.addEventListener("click", function () { jump(line); });
        item.appendChild(button);
        item.appendChild(el("span", "text-secondary", shortTime(line.ts) + " [" + line.node + "#" + line.attempt + "/" + line.replica + "] "));
        item.appendChild(el("span", "", line.text));
        resultsList.appendChild(item);
      }
      resultsNote.textContent = note || "";
      results.hidden = false;
    }

    function selectedNode() {
      const option = nodeSelect.selectedOptions[0];
      return option && option.dataset.node ? option.dataset.node : "";
    }

    function updateDownload() {
      const node = selectedNode();
      download.href = data.downloadUrl + (node ? "?node=" + encodeURIComponent(node) : "");
    }

    function fetchJson(params) {
      return fetch(data.searchUrl + "?" + new URLSearchParams(params).toString(), {
        headers: { Accept: "application/json" },
        credentials: "same-origin",
      }).then(function (response) {
        return response.json().then(function (body) {
          if (!response.ok) throw new Error(body.error || data.msgSearchFailed);
          return body;
        });
      });
    }

    root.querySelector("[data-log-search]").addEventListener("submit", function (event) {
      event.preventDefault();
      const params = { q: event.target.elements.q.value };
      const node = selectedNode();
      if (node) params.node = node;
      fetchJson(params).then(function (body) {
        const note = body.matches.length === 0 ? data.msgNoMatch : body.truncated ? data.msgTruncated : "";
        showResults(body.matches, note);
      }).catch(function (error) {
        showResults([], error.message);
      });
    });

    root.querySelector("[data-log-first-error]").addEventListener("click", function () {
      fetchJson({ first_error: "1" }).then(function (body) {
        if (body.line) jump(body.line);
        else showResults([], data.msgNoError);
      }).catch(function (error) {
        showResults([], error.message);
      });
    });

    root.querySelector("[data-log-results-close]").addEventListener("click", function () {
      results.hidden = true;
    });

    function filtersChanged() {
      held = false;
      jumpTarget = null;
      updateDownload();
      restart(0);
    }
    nodeSelect.addEventListener("change", filtersChanged);
    replicaSelect.addEventListener("change", filtersChanged);

    followBox.addEventListener("change", function () {
      if (!follow()) return;
      held = false;
      jumpTarget = null;
      if (paused) {
        paused = false;
        connect();
      }
      scrollToEnd();
    });

    // Scrolling up by hand stops following (scroll events come after append() has scrolled to the end).
    pane.addEventListener("scroll", function () {
      if (pane.scrollHeight - pane.scrollTop - pane.clientHeight > 40) followBox.checked = false;
    });

    updateDownload();
    connect();
  }

  function init(scope) {
    if (!window.WebSocket) return;
    scope = scope || document;
    const roots = Array.from(scope.querySelectorAll("[data-log-viewer]"));
    if (scope.matches && scope.matches("[data-log-viewer]")) roots.push(scope);
    roots.forEach(function (root) {
      if (root.dataset.logViewerReady) return;
      root.dataset.logViewerReady = "1";
      LogViewer(root);
    });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", function () { init(); });
  } else {
    init();
  }
  // The run page may swap the viewer in with htmx.
  document.addEventListener("htmx:load", function (event) { init(event.target); });
})();
