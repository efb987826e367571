// Live unread-notification count over a websocket, reconnecting with backoff.
(function () {
  "use strict";
  const badge = document.getElementById("unread-count");
  if (!badge || !window.WebSocket) return;
  let delay = 1000;
  function connect() {
    const scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
    const socket = new WebSocket(scheme + window.location.host + badge.dataset.ws);
    socket.onopen = function () { delay = 1000; };
    socket.onmessage = function (event) {
      const data = JSON.parse(event.data);
      if (typeof data.unread === "number") {
        badge.textContent = String(data.unread);
        badge.classList.toggle("d-none", data.unread === 0);
      }
    };
    socket.onclose = function (event) {
      if (event.code === 4401) return; // logged out: do not retry
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 30000);
    };
  }
  connect();
})();

// Behaviours that would otherwise be inline event handlers, which the Content-Security-Policy forbids:
// <select data-autosubmit> submits its form on change. An action that hurts asks first, in the page's one dialog
// (templates/includes/confirm_dialog.html): a form or its submit button with data-confirm="<the consequence>"
// (and optionally data-confirm-title="<the question>", data-confirm-button="<the verb>"), or an htmx element with
// hx-confirm. Delegated from the document, so htmx-swapped content gets them too.
(function () {
  "use strict";
  document.addEventListener("change", function (event) {
    const field = event.target.closest("[data-autosubmit]");
    if (field && field.form) field.form.requestSubmit();
  });

  const dialog = document.getElementById("confirm-dialog");
  let pending = null; // what to do when the person confirms

  function ask(source, text, proceed, cancelled) {
    if (!dialog || !window.bootstrap) {
      if (window.confirm(text)) proceed(); else if (cancelled) cancelled();
      return;
    }
    const title = dialog.querySelector("#confirm-title");
    const accept = dialog.querySelector("#confirm-accept");
    title.textContent = (source && source.dataset.confirmTitle) || title.dataset.default;
    dialog.querySelector("#confirm-body").textContent = text;
    accept.textContent = (source && source.dataset.confirmButton) || accept.dataset.default;
    pending = { proceed: proceed, cancelled: cancelled };
    window.bootstrap.Modal.getOrCreateInstance(dialog).show();
  }

  if (dialog) {
    dialog.querySelector("#confirm-accept").addEventListener("click", function () {
      const action = pending;
      pending = null;
      window.bootstrap.Modal.getOrCreateInstance(dialog).hide();
      if (action) action.proceed();
    });
    dialog.addEventListener("shown.bs.modal", function () { dialog.querySelector("#confirm-cancel").focus(); });
    dialog.addEventListener("hidden.bs.modal", function () {
      const action = pending;
      pending = null;
      if (action && action.cancelled) action.cancelled();
    });
  }

  document.addEventListener("submit", function (event) {
    const form = event.target;
    if (form.dataset.confirmed === "yes") { delete form.dataset.confirmed; return; }
    const submitter = event.submitter;
    const source = submitter && submitter.dataset.confirm !== undefined ? submitter : form;
    const text = source.dataset ? source.dataset.confirm : undefined;
    if (text === undefined || form.hasAttribute("hx-confirm")) return;
    event.preventDefault();
    ask(source, text, function () {
      form.dataset.confirmed = "yes";
      form.requestSubmit(submitter || undefined);
    });
  });

  // htmx asks through the same dialog; a cancelled change of a <select> goes back to the value it had.
  document.addEventListener("htmx:confirm", function (event) {
    const text = event.detail.question;
    if (!text) return;
    event.preventDefault();
    const source = event.detail.elt;
    ask(source, text, function () { event.detail.issueRequest(true); }, function () {
      const form = source.closest("form");
      if (form) form.reset();
    });
  });
})();

// Durations that are still running tick: an element with data-elapsed="<seconds when the server drew it>" counts up
// from there, in the words of the `seconds` template filter (apps/jobs/templatetags/jobs_tags.py). Measured from when
// the page first saw the element, never from the browser's clock against the server's. Elements swapped in later
// (htmx, run.js) tick too; one that loses the attribute (the run ended, its final value drawn) stops.
(function () {
  "use strict";
  const seen = new WeakMap();
  function words(value) {
    if (value < 60) return interpolate(gettext("%(s)s s"), { s: value.toFixed(1) }, true);
    let minutes = Math.floor(value / 60);
    const rest = Math.floor(value % 60);
    if (minutes < 60) return interpolate(gettext("%(m)s min %(s)s s"), { m: minutes, s: rest }, true);
    const hours = Math.floor(minutes / 60);
    minutes %= 60;
    return interpolate(gettext("%(h)s h %(m)s min"), { h: hours, m: minutes }, true);
  }
  window.portalDuration = words;

  // An axis name on lines of at most ~14 characters, broken after "_", "." or "-" (or anywhere in a longer run):
  // ECharts' parallel axes neither wrap nor fit their names, so "learning_rate_of_the_optimiser" ran off the chart.
  window.portalWrapName = function (name) {
    const parts = String(name).match(/[^_.\-]+[_.\-]?|[_.\-]/g) || [String(name)];
    const lines = [];
    let line = "";
    parts.forEach(function (part) {
      while (part.length > 14) {
        if (line) lines.push(line);
        lines.push(part.slice(0, 14));
        part = part.slice(14);
        line = "";
      }
      if (line && (line + part).length > 14) {
        lines.push(line);
        line = "";
      }
      line += part;
    });
    if (line) lines.push(line);
    return lines.join("\n");
  };

  function tick() {
    const now = performance.now();
    document.querySelectorAll("[data-elapsed]").forEach(function (el) {
      const base = parseFloat(el.dataset.elapsed);
      if (Number.isNaN(base)) return;
      if (!seen.has(el)) seen.set(el, now);
      el.textContent = words(base + (now - seen.get(el)) / 1000);
    });
  }
  if (typeof window.gettext === "function") setInterval(tick, 1000);
})();
