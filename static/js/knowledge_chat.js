// The knowledge base chat page (apps/knowledge/views.py kb_chat): reads the stream endpoint's server-sent events and
// shows the answer token by token; citations [n] become links to the passage they name once the answer is complete.
(function () {
  "use strict";
  const form = document.getElementById("kb-chat-form");
  if (!form) return;
  const answer = document.getElementById("kb-chat-answer");
  const list = document.getElementById("kb-chat-passages");
  const error = document.getElementById("kb-chat-error");

  function link(text, passages) {
    // Text nodes and anchors only: the model's words are never parsed as HTML.
    answer.textContent = "";
    const parts = text.split(/(\[\d+\])/);
    parts.forEach(function (part) {
      const m = /^\[(\d+)\]$/.exec(part);
      const p = m && passages[Number(m[1])];
      if (p) {
        const a = document.createElement("a");
        a.href = p.url;
        a.textContent = part;
        a.dataset.citation = m[1];
        answer.appendChild(a);
      } else {
        answer.appendChild(document.createTextNode(part));
      }
    });
  }

  function show(message) {
    error.textContent = message;
    error.classList.remove("d-none");
    answer.dataset.state = "error";
  }

  let current = null; // the request in flight, aborted when a new question is asked

  form.addEventListener("submit", function (event) {
    event.preventDefault();
    const question = form.elements.q.value.trim();
    if (!question) return;
    if (current) current.abort();
    current = new AbortController();
    answer.textContent = "";
    list.textContent = "";
    error.classList.add("d-none");
    answer.dataset.state = "streaming";
    let text = "";
    const passages = {};
    const handlers = {
      passages: function (data) {
        data.passages.forEach(function (p) {
          passages[p.number] = p;
          const li = document.createElement("li");
          li.value = p.number;
          const a = document.createElement("a");
          a.href = p.url;
          a.textContent = p.document + (p.heading ? " › " + p.heading : "") + (p.page ? " (p. " + p.page + ")" : "");
          li.appendChild(a);
          list.appendChild(li);
        });
      },
      token: function (data) {
        text += data;
        answer.textContent = text;
      },
      done: function () {
        link(text, passages);
        answer.dataset.state = "done";
      },
      error: show,
    };
    // fetch, not EventSource: the stream is read to its end (an EventSource reconnects when the server closes).
    fetch(form.dataset.streamUrl + "?q=" + encodeURIComponent(question), {
      credentials: "same-origin",
      headers: { Accept: "text/event-stream" },
      signal: current.signal,
    })
      .then(function (response) {
        if (!response.ok) throw new Error(response.status);
        const reader = response.body.getReader();
        const decoder = new TextDecoder();
        let buffer = "";
        function pump() {
          return reader.read().then(function (chunk) {
            buffer += decoder.decode(chunk.value || new Uint8Array(), { stream: !chunk.done });
            let cut;
            while ((cut = buffer.indexOf("\n\n")) >= 0) {
              const block = buffer.slice(0, cut);
              buffer = buffer.slice(cut + 2);
              let name = "message";
              let data = "";
              block.split("\n").forEach(function (line) {
                if (line.startsWith("event: ")) name = line.slice(7);
                else if (line.startsWith("data: ")) data += line.slice(6);
              });
              if (handlers[name]) handlers[name](JSON.parse(data));
            }
            if (!chunk.done) return pump();
          });
        }
        return pump();
      })
      .catch(function (err) {
        if (err.name !== "AbortError") show(String(err));
      });
  });
})();
