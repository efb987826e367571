// The annotate page (templates/labeling/labeling_annotate.html): Label Studio's own front end
// (static/vendor/label-studio, window.LabelStudio) shows one task at a time; the portal's API gives the next task
// ("uncertain first") and takes each submit, update and skip (apps/labeling/annotate.py), which it writes to Label
// Studio as the signed-in member. Nothing here talks to Label Studio: the portal is the only door.
(function () {
  "use strict";
  const dataNode = document.getElementById("annotate-data");
  const editor = document.querySelector("[data-annotate-editor]");
  if (!dataNode || !editor) return;
  const data = JSON.parse(dataNode.textContent);
  const messages = JSON.parse(document.getElementById("annotate-messages").textContent);
  const statusLine = document.querySelector("[data-annotate-status]");
  const taskLine = document.querySelector("[data-annotate-task]");
  const errorBox = document.querySelector("[data-annotate-error]");
  const doneBox = document.querySelector("[data-annotate-done]");
  let current = null; // the LabelStudio instance
  let task = null; // the task it shows (the portal's payload)
  let shownAt = 0;
  let asked = data.task; // a task named in the URL (?task=<id>): shown first

  function csrfToken() {
    const match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
    return match ? decodeURIComponent(match[1]) : "";
  }

  function format(template, values) {
    return template.replace(/%\((\w+)\)s/g, function (_, key) { return String(values[key]); });
  }

  function say(text) {
    statusLine.textContent = text;
  }

  function fail(text) {
    errorBox.textContent = text;
    errorBox.classList.remove("d-none");
  }

  function reasonOf(response, body) {
    if (body && typeof body === "object") {
      if (body.detail) return String(body.detail);
      const first = Object.keys(body)[0];
      if (first) return first + ": " + [].concat(body[first]).join(" ");
    }
    return String(response.status);
  }

  function call(url, options) {
    const init = Object.assign({ credentials: "same-origin", headers: { Accept: "application/json" } }, options || {});
    if (init.body) {
      init.headers["Content-Type"] = "application/json";
      init.headers["X-CSRFToken"] = csrfToken();
    }
    return fetch(url, init).then(function (response) {
      return response.text().then(function (text) {
        let body = null;
        try { body = text ? JSON.parse(text) : null; } catch (e) { body = null; }
        if (!response.ok) throw new Error(reasonOf(response, body));
        return body;
      });
    });
  }

  function teardown() {
    if (current && typeof current.destroy === "function") {
      try { current.destroy(); } catch (e) { /* a half-drawn editor: the container is emptied below */ }
    }
    current = null;
    editor.replaceChildren();
  }

  function show(payload) {
    teardown();
    task = payload;
    shownAt = Date.now();
    taskLine.textContent = format(messages.task, { id: payload.id, path: payload.path });
    const mount = document.createElement("div");
    mount.id = "label-studio-editor";
    editor.appendChild(mount);
    current = new window.LabelStudio(mount, {
      config: data.config,
      interfaces: ["panel", "update", "submit", "skip", "controls", "side-column", "annotations:current",
        "predictions:tabs", "topbar"],
      user: data.user,
      task: {
        id: payload.ls_task_id,
        data: payload.data,
        annotations: payload.annotations.map(function (a) { return { id: a.id, pk: a.id, result: a.result }; }),
        predictions: payload.predictions,
      },
      onLabelStudioLoad: function (ls) {
        const store = ls.annotationStore;
        if (store.annotations.length) {
          store.selectAnnotation(store.annotations[0].id);
          return;
        }
        let made = null;
        if (store.predictions && store.predictions.length && store.addAnnotationFromPrediction) {
          made = store.addAnnotationFromPrediction(store.predictions[0]); // start from the model's guess
        } else {
          made = store.addAnnotation({ userGenerate: true });
        }
        store.selectAnnotation(made.id);
      },
      onSubmitAnnotation: function (ls, annotation) { save(annotation.serializeAnnotation(), false); },
      onUpdateAnnotation: function (ls, annotation) { save(annotation.serializeAnnotation(), false); },
      onSkipTask: function () { save([], true); },
    });
    editor.dataset.task = String(payload.id);
  }

  function next() {
    errorBox.classList.add("d-none");
    say(messages.loading);
    const url = data.next + (asked ? "?task=" + encodeURIComponent(asked) : "");
    asked = "";
    return call(url).then(function (body) {
      say(format(messages.remaining, { n: body.remaining }));
      if (!body.task) {
        teardown();
        taskLine.textContent = "";
        doneBox.classList.remove("d-none");
        return;
      }
      show(body.task);
    }).catch(function (error) { fail(error.message); say(""); });
  }

  function save(result, skip) {
    say(messages.saving);
    const body = { task: task.id, result: result, was_cancelled: skip, lead_time: (Date.now() - shownAt) / 1000 };
    call(data.save, { method: "POST", body: JSON.stringify(body) })
      .then(function () {
        say(skip ? messages.skipped : messages.saved);
        return next();
      })
      .catch(function (error) {
        fail(format(messages.failed, { reason: error.message }));
        say("");
      });
  }

  // The vendored editor is a deferred script before this one: it has run once this one runs.
  if (typeof window.LabelStudio !== "function") {
    fail(messages.no_editor);
    return;
  }
  next();
})();
