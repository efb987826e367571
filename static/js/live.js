// Live project pages (notebooks, services): one websocket per page to the project's events
// (ws/projects/<slug>/events/, apps/projects/consumers.py), and the parts of the page that show what changed are
// fetched again from the server and swapped in by id. Nothing is drawn here from the event itself: the server's
// fragment applies the viewer's permissions (which buttons they get) and its translations.
//
//   <span hidden data-project-events="/ws/projects/<slug>/events/"></span>
//   <div id="notebook-table" data-live="notebook" data-live-url="…">            any notebook of the project
//   <div id="notebook-status" data-live="notebook:12" data-live-url="…">        notebook 12 only
//   <div id="service-revisions" data-live="service:3" data-live-when="settled" data-live-url="…">
//        only once nothing rolls out any more (the page's URL: the part is taken from it by id)
//
// Events arriving together are handled together, one request per URL. Once connected, the parts are fetched once
// (what changed between the page's drawing and the socket's joining has no event on it); a part that says it was
// drawn unsettled (data-live-settled="0") and comes back settled stands for a "settled" event of its object. When
// the socket cannot connect, the parts are fetched every 20 s instead until it can; signed out (4401) or no longer
// a member (4404): nothing more. A page that shows several projects' objects (the home page) names each project's
// events in a span of its own: one socket each.
(function () {
  "use strict";
  const sources = Array.from(document.querySelectorAll("[data-project-events]"));
  if (!sources.length || !window.WebSocket) return;
  const FINAL_CODES = [4401, 4404]; // the consumer's answers that retrying cannot change
  const BATCH_MS = 250;
  const FALLBACK_POLL_MS = 20000;

  let batch = []; // events waiting for the batch's timer
  let batchTimer = null;
  let fallback = null; // the slow poll while a socket is down
  const down = new Set(); // the sources whose socket is not connected now

  function targets(event) {
    // The live parts an event concerns: `kind` or `kind:id`, and when settled only, those that wait for that.
    return Array.from(document.querySelectorAll("[data-live]")).filter(function (el) {
      const [kind, id] = el.dataset.live.split(":");
      if (event && kind !== event.type) return false;
      if (event && id !== undefined && id !== String(event.id)) return false;
      if (event && el.dataset.liveWhen === "settled" && !event.settled) return false;
      return true;
    });
  }

  function refresh(elements) {
    const byUrl = new Map();
    elements.forEach(function (el) {
      if (!el.id || !el.dataset.liveUrl) return;
      if (!byUrl.has(el.dataset.liveUrl)) byUrl.set(el.dataset.liveUrl, []);
      byUrl.get(el.dataset.liveUrl).push(el.id);
    });
    byUrl.forEach(function (ids, url) {
      fetch(url, { credentials: "same-origin", headers: { "HX-Request": "true", Accept: "text/html" } })
        .then(function (response) {
          if (!response.ok) throw new Error(response.status);
          return response.text();
        })
        .then(function (html) {
          const template = document.createElement("template");
          template.innerHTML = html;
          ids.forEach(function (id) {
            const fresh = template.content.getElementById(id);
            const old = document.getElementById(id);
            // Swapped meanwhile (two refreshes of one part crossed) for a version that is not live any more: that
            // one is final and may already hold what the user typed (the test console, once a rollout settled).
            if (!fresh || !old || !old.dataset.live) return;
            const settledNow = old.dataset.liveSettled === "0" && fresh.dataset.liveSettled === "1";
            old.replaceWith(fresh);
            if (window.htmx) window.htmx.process(fresh);
            fresh.dispatchEvent(new CustomEvent("portal:live-swapped", { bubbles: true }));
            if (settledNow) {
              const [kind, objectId] = fresh.dataset.live.split(":");
              const settled = { type: kind, id: objectId, settled: true };
              refresh(targets(settled).filter(function (el) { return el.dataset.liveWhen === "settled"; }));
            }
          });
        })
        .catch(function () {
          // Gone (deleted: 404) or the server is busy: what the page shows stays; the next event tries again.
        });
    });
  }

  function flush() {
    batchTimer = null;
    const events = batch;
    batch = [];
    const elements = new Set();
    events.forEach(function (event) {
      targets(event).forEach(function (el) {
        elements.add(el);
      });
    });
    refresh(Array.from(elements));
  }

  function startFallback() {
    if (fallback === null) fallback = setInterval(function () { refresh(targets(null)); }, FALLBACK_POLL_MS);
  }

  function stopFallback() {
    if (fallback !== null && down.size === 0) {
      clearInterval(fallback);
      fallback = null;
    }
  }

  function connect(source, state) {
    const scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
    const socket = new WebSocket(scheme + window.location.host + source.dataset.projectEvents);
    socket.onmessage = function (message) {
      let event;
      try {
        event = JSON.parse(message.data);
      } catch (e) {
        return;
      }
      if (event.type === "ready") {
        state.delay = 1000;
        down.delete(source);
        stopFallback();
        if (state.opened) refresh(targets(null)); // back after a gap: events may have been missed
        else refresh(targets(null).filter(function (el) { return !el.dataset.liveWhen; })); // since the drawing
        state.opened = true;
        return;
      }
      batch.push(event);
      if (batchTimer === null) batchTimer = setTimeout(flush, BATCH_MS);
    };
    socket.onclose = function (event) {
      if (FINAL_CODES.includes(event.code)) {
        down.delete(source);
        stopFallback();
        return;
      }
      down.add(source);
      startFallback();
      setTimeout(function () { connect(source, state); }, state.delay);
      state.delay = Math.min(state.delay * 2, 30000);
    };
  }

  // opened: the socket connected at least once (a later "ready" is a reconnect)
  sources.forEach(function (source) { connect(source, { opened: false, delay: 1000 }); });
})();
