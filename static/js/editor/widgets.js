// Small DOM helpers of the editor's side panel: elements, labelled fields with help and error lines, sections.
import { envToText, fmt, textToEnv } from "./spec.js";

let uid = 0;

// A fresh id for an element (labels and aria-describedby need them).
export function nextId(prefix) {
  uid += 1;
  return prefix + uid;
}

export function h(tag, attrs, children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "text") el.textContent = value;
    else if (key === "className") el.className = value;
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else el.setAttribute(key, value === true ? "" : value);
  }
  for (const child of [].concat(children || [])) {
    if (child !== null && child !== undefined && child !== false) el.append(child);
  }
  return el;
}

// A labelled control with its help text and an error line (aria-describedby ties them together).
// A labelled control with its help text and an error line (aria-describedby ties them together).
export function field(label, control, opts) {
  const options = opts || {};
  const id = nextId("pe-field-");
  control.id = id;
  const error = h("div", { className: "invalid-feedback d-block", id: id + "-error", "aria-live": "polite" });
  const help = options.help ? h("div", { className: "form-text", id: id + "-help", text: options.help }) : null;
  control.setAttribute("aria-describedby", [help ? id + "-help" : "", id + "-error"].join(" ").trim());
  if (options.field) control.dataset.field = options.field;
  const check = control.type === "checkbox";
  const labelEl = h("label", { for: id, className: check ? "form-check-label" : "form-label mb-0 small fw-semibold" }, [
    options.label || label,
    options.required ? h("span", { className: "text-danger", "aria-hidden": "true", text: " *" }) : null,
  ]);
  const wrap = check
    ? h("div", { className: "form-check mb-2" }, [control, labelEl, help, error])
    : h("div", { className: "mb-2" }, [labelEl, control, help, error]);
  const show = function (messages) {
    const list = [].concat(messages || []).filter(Boolean);
    error.textContent = list.join(" ");
    control.classList.toggle("is-invalid", list.length > 0);
    control.setAttribute("aria-invalid", list.length ? "true" : "false");
  };
  show(options.errors);
  return { wrap: wrap, control: control, show: show };
}

export function input(type, value, extra) {
  const attrs = Object.assign({ type: type, className: "form-control form-control-sm" }, extra || {});
  const el = h("input", attrs);
  if (value !== undefined && value !== null) el.value = String(value);
  return el;
}

export function shown(value) {
  return typeof value === "string" ? value : JSON.stringify(value);
}

export function section(title, children) {
  return h("fieldset", { className: "pe-section" }, [h("legend", { className: "h6", text: title })].concat(children));
}

// NAME=value lines; an emptied env is removed.
export function envField(env, m, errors, commit) {
  const area = h("textarea", { className: "form-control form-control-sm font-monospace", rows: 2, spellcheck: "false", placeholder: "NAME=value" });
  area.value = envToText(env);
  const f = field(m.env, area, { errors: errors, help: m.envHelp, field: "env" });
  area.addEventListener("change", function () {
    const parsed = textToEnv(area.value);
    if (parsed.error) return f.show(fmt(m.envLine, { line: parsed.error }));
    f.show([]);
    commit(Object.keys(parsed.env).length ? parsed.env : undefined);
  });
  return f.wrap;
}
