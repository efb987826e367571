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
// <select data-autosubmit> submits its form on change; a form (or its submit button) with data-confirm="…"
// asks first. Delegated from the document, so htmx-swapped content gets them too.
(function () {
  "use strict";
  document.addEventListener("change", function (event) {
    const field = event.target.closest("[data-autosubmit]");
    if (field && field.form) field.form.requestSubmit();
  });
  document.addEventListener("submit", function (event) {
    const form = event.target;
    const source = event.submitter && event.submitter.dataset.confirm !== undefined ? event.submitter : form;
    const question = source.dataset ? source.dataset.confirm : undefined;
    if (question !== undefined && !window.confirm(question)) event.preventDefault();
  });
})();
