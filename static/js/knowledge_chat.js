// The knowledge base chat page (apps/knowledge/views.py kb_chat): asks the stream endpoint with an EventSource and
// shows the answer token by token; citations [n] become links to the passage they name once the answer is complete.
(function () {
  "use strict";
  const form = document.getElementById("kb-chat-form");
  if (!form) return;
  const answer = document.getElementById("kb-chat-answer");
  const list = document.getElementById("kb-chat-passages");
  const error = document.getElementById("kb-chat-error");
  let source = null;

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

  form.addEventListener("submit", function (event) {
    event.preventDefault();
    const question = form.elements.q.value.trim();
    if (!question) return;
    if (source) source.close();
    answer.textContent = "";
    list.textContent = "";
    error.classList.add("d-none");
    answer.dataset.state = "streaming";
    let text = "";
    const passages = {};
    source = new EventSource(form.dataset.streamUrl + "?q=" + encodeURIComponent(question));
    source.addEventListener("passages", function (e) {
      const data = JSON.parse(e.data);
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
    });
    source.addEventListener("token", function (e) {
      text += JSON.parse(e.data);
      answer.textContent = text;
    });
    source.addEventListener("done", function () {
      source.close();
      link(text, passages);
      answer.dataset.state = "done";
    });
    source.addEventListener("error", function (e) {
      source.close();
      if (e.data) {
        error.textContent = JSON.parse(e.data);
        error.classList.remove("d-none");
      }
      answer.dataset.state = "error";
    });
  });
})();
