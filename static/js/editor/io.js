// The editor's conversation with the server: save (the pipelines API, like any API client), validate without
// saving, start a run; and whether there is anything unsaved.
import { fmt } from "./spec.js";

export function createIO(ctx) {
  const data = ctx.data;
  const M = ctx.messages;
  const state = ctx.state;
  let saved = null;
  let busy = false;
  const dirtyMark = ctx.buttons.querySelector("[data-dirty]");
  const pageLink = ctx.buttons.querySelector("[data-pipeline-link]");

  // The page's URLs are reversed with pk 0: the last "/0/" is the id's place.
  function withId(url, id) {
    const at = url.lastIndexOf("/0/");
    return url.slice(0, at) + "/" + id + "/" + url.slice(at + 3);
  }

  function snapshot() {
    return JSON.stringify({ meta: state.meta, spec: ctx.buildSpec(), layout: ctx.buildLayout() });
  }

  function dirty() {
    return saved !== snapshot();
  }

  function updateDirty() {
    if (dirtyMark) dirtyMark.hidden = !dirty();
  }

  const titleEl = ctx.buttons.querySelector("[data-editor-title]");

  function markSaved() {
    saved = snapshot();
    updateDirty();
    // The heading and the window's title follow the name saved (a new pipeline gets its name; a rename shows).
    if (state.id && state.meta.name) {
      if (titleEl) titleEl.textContent = fmt(M.editing, { name: state.meta.name });
      document.title = document.title.replace(/^[^·]*·/, fmt(M.pageTitle, { name: state.meta.name }) + " ·");
    }
    if (pageLink && state.id) {
      pageLink.href = withId(data.urls.detail, state.id);
      pageLink.hidden = false;
    }
  }

  function request(url, method, body) {
    return fetch(url, {
      method: method,
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", Accept: "application/json", "X-CSRFToken": ctx.csrf },
      body: body === undefined ? undefined : JSON.stringify(body),
    }).then(function (response) {
      return response.json().catch(function () { return {}; }).then(function (json) {
        return { status: response.status, ok: response.ok, body: json };
      });
    });
  }

  function detail(body) {
    if (body && typeof body.detail === "string") return body.detail;
    return Object.values(body || {}).flat().join(" ");
  }

  function guarded(work) {
    if (busy) return Promise.resolve(false);
    busy = true;
    ctx.buttons.setAttribute("aria-busy", "true");
    return work().catch(function () {
      ctx.announce(M.networkError, "error");
      return false;
    }).finally(function () {
      busy = false;
      ctx.buttons.removeAttribute("aria-busy");
    });
  }

  function doSave() {
    const payload = {
      name: state.meta.name,
      description: state.meta.description || "",
      spec: ctx.buildSpec(),
      layout: ctx.buildLayout(),
    };
    let url = data.urls.api;
    let method = "POST";
    if (state.id) {
      url += state.id + "/";
      method = "PUT";
    } else {
      payload.project = data.project;
    }
    ctx.announce(M.saving);
    // Checked first (the same rules as saving; an invalid pipeline is a 200 answer there), then saved.
    const check = { name: payload.name, pipeline: state.id, spec: payload.spec };
    return request(data.urls.validate, "POST", check).then(function (checked) {
      if (checked.ok) state.layouts = checked.body.layouts || {};
      if (checked.ok && !checked.body.valid) {
        ctx.announce(ctx.setErrors(checked.body.errors), "error");
        return false;
      }
      return request(url, method, payload).then(saved);
    });

    function saved(answer) {
      if (answer.ok) {
        const created = !state.id;
        state.id = answer.body.id;
        ctx.setErrors({});
        markSaved();
        ctx.announce(M.saved, "success");
        if (created) window.history.replaceState(null, "", withId(data.urls.editor, state.id));
        return true;
      }
      if (answer.status === 400) {
        ctx.announce(ctx.setErrors(answer.body), "error");
      } else {
        ctx.announce(fmt(M.saveFailed, { error: detail(answer.body) || answer.status }), "error");
      }
      return false;
    }
  }

  function save() {
    if (document.activeElement && document.activeElement.blur) document.activeElement.blur();
    return guarded(doSave);
  }

  function validate() {
    return guarded(function () {
      const check = { name: state.meta.name, pipeline: state.id, spec: ctx.buildSpec() };
      return request(data.urls.validate, "POST", check).then(function (answer) {
        if (answer.ok) state.layouts = answer.body.layouts || {};
        const summary = ctx.setErrors(answer.body.errors || {});
        const valid = answer.ok && answer.body.valid;
        ctx.announce(valid ? M.valid : summary, valid ? "success" : "error");
        return valid;
      });
    });
  }

  // Saves what is unsaved first, then starts a run and opens its page (live node colours and logs).
  function run() {
    return guarded(function () {
      const ready = state.id && !dirty() ? Promise.resolve(true) : doSave();
      return ready.then(function (ok) {
        if (!ok) return false;
        ctx.announce(M.starting);
        return request(data.urls.api + state.id + "/run/", "POST").then(function (answer) {
          if (answer.status === 201) {
            window.location.assign(withId(data.urls.run, answer.body.id));
            return true;
          }
          const summary = answer.status === 400 ? ctx.setErrors(answer.body) : "";
          ctx.announce(fmt(M.runFailed, { error: summary || detail(answer.body) || answer.status }), "error");
          return false;
        });
      });
    });
  }

  state.id = data.pipeline ? data.pipeline.id : null;
  return { save: save, validate: validate, run: run, dirty: dirty, updateDirty: updateDirty, markSaved: markSaved };
}
