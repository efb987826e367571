// The side panel of the selected node: a form, generated from its template's argument schema
// (x-portal-type str/text/int/float/bool/enum/json/dataset/model/secret; required, defaults, choices,
// descriptions), plus its dependencies, resources, retries, timeout, skip, cache and env. Fields commit on "change";
// problems show inline as one types.
import { argProblem, fmt, memoryBytes, NODE_NAME_RE, withEntry, withField } from "./spec.js";
import { envField, field, h, input, nextId, section, shown } from "./widgets.js";

// The control of one argument and how to read a value back from it ({value} or {error}).
function argControl(arg, value, ctx) {
  const m = ctx.messages;
  const hasDefault = arg.default !== undefined && arg.default !== null;
  const placeholder = hasDefault && arg.default !== "" ? fmt(m.default, { value: shown(arg.default) }) : "";
  let control;
  let read;
  switch (arg.type) {
    case "bool": {
      control = h("input", { type: "checkbox", className: "form-check-input" });
      control.checked = value === undefined ? Boolean(arg.default) : Boolean(value);
      read = function () { return { value: control.checked }; };
      break;
    }
    case "enum": {
      control = h("select", { className: "form-select form-select-sm" });
      const choices = arg.enum || [];
      if (!arg.required || hasDefault) {
        control.append(h("option", { value: "", text: hasDefault ? placeholder : m.useDefault }));
      }
      choices.forEach(function (choice, index) { control.append(h("option", { value: String(index), text: shown(choice) })); });
      const at = choices.findIndex(function (choice) { return JSON.stringify(choice) === JSON.stringify(value); });
      control.value = at >= 0 ? String(at) : "";
      read = function () { return { value: control.value === "" ? undefined : choices[Number(control.value)] }; };
      break;
    }
    case "int":
    case "float": {
      const attrs = { step: arg.type === "int" ? "1" : "any", placeholder: placeholder, inputmode: "decimal" };
      if (arg.minimum !== undefined) attrs.min = arg.minimum;
      if (arg.maximum !== undefined) attrs.max = arg.maximum;
      control = input("number", value, attrs);
      read = function () {
        if (control.validity.badInput) return { error: arg.type === "int" ? m.notInteger : m.notNumber };
        if (control.value.trim() === "") return { value: undefined };
        const number = Number(control.value);
        if (arg.type === "int" && !Number.isInteger(number)) return { error: m.notInteger };
        return { value: number };
      };
      break;
    }
    case "json":
    case "text": {
      const json = arg.type === "json";
      control = h("textarea", { className: "form-control form-control-sm font-monospace", rows: json ? 3 : 4, placeholder: placeholder, spellcheck: "false" });
      if (value !== undefined) control.value = json ? JSON.stringify(value, null, 2) : String(value);
      read = function () {
        if (control.value.trim() === "") return { value: undefined };
        if (!json) return { value: control.value };
        try {
          return { value: JSON.parse(control.value) };
        } catch (e) {
          return { error: m.notJson };
        }
      };
      break;
    }
    default: { // str, dataset, model, secret: text, with the project's names to pick from where there are some
      control = input("text", value, { placeholder: placeholder, autocomplete: "off", spellcheck: "false" });
      const names = (ctx.choices && ctx.choices[arg.type]) || [];
      if (names.length) {
        const list = h("datalist", { id: nextId("pe-list-") }, names.map(function (name) { return h("option", { value: name }); }));
        control.setAttribute("list", list.id);
        control._datalist = list;
      }
      read = function () { return { value: control.value === "" ? undefined : control.value }; };
    }
  }
  return { control: control, read: read };
}

// Every field of one node. ctx: node (the spec node as rendered), current() (the node now: handlers build on it,
// since other fields may have committed since the panel was drawn), template, errors {field: [..]}, layout (the
// server's "world 8 = dp 2 × tp 2 × pp 2, …" of a distributed node, or undefined), check() (asks the server again),
// others (other node names), upstream (names it depends on), choices, limits, maxRetries, messages,
// commit(node), connect(name, on) → "" or a refusal, remove(), duplicate().
export function renderNodePanel(root, ctx) {
  const m = ctx.messages;
  const node = ctx.node;
  const errors = Object.assign({}, ctx.errors || {});
  const take = function (key) { const list = errors[key]; delete errors[key]; return list; };
  const template = ctx.template;
  const parts = [];

  const title = h("div", { className: "d-flex justify-content-between align-items-start mb-2" }, [
    h("div", {}, [
      h("h2", { className: "h5 mb-0", id: "pe-panel-title", text: node.name }),
      h("div", { className: "small text-body-secondary" }, [template ? template.name + " · " : "", h("code", { text: String(node.template) })]),
    ]),
    h("div", { className: "btn-group btn-group-sm" }, [
      h("button", { type: "button", className: "btn btn-outline-secondary", text: m.duplicate, onclick: ctx.duplicate }),
      h("button", { type: "button", className: "btn btn-outline-danger", text: m.deleteNode, onclick: ctx.remove }),
    ]),
  ]);
  parts.push(title);
  if (template && template.description) parts.push(h("p", { className: "small text-body-secondary", text: template.description }));
  const general = h("div", { className: "alert alert-danger py-1 px-2 small", role: "alert", hidden: true, "data-node-errors": "" });
  parts.push(general);

  // Name
  const nameField = field(m.name, input("text", node.name, { required: true, maxlength: 63, autocomplete: "off", spellcheck: "false" }), { required: true, errors: take("name"), field: "name" });
  nameField.control.addEventListener("change", function () {
    const name = nameField.control.value.trim();
    if (!NODE_NAME_RE.test(name)) return nameField.show(m.nodeName);
    const now = ctx.current();
    if (name !== now.name && ctx.others.includes(name)) return nameField.show(m.nameTaken);
    nameField.show([]);
    if (name !== now.name) ctx.commit(withField(now, "name", name));
  });
  parts.push(nameField.wrap);
  const templateErrors = take("template");
  if (!template) parts.push(h("div", { className: "text-danger small mb-2", text: fmt(m.unknownTemplate, { ref: node.template }) }));
  else if (templateErrors) parts.push(h("div", { className: "text-danger small mb-2", text: templateErrors.join(" ") }));

  // Arguments
  const args = node.args && typeof node.args === "object" ? node.args : {};
  const argFields = [];
  for (const arg of template ? template.args : []) {
    const made = argControl(arg, args[arg.name], ctx);
    const serverErrors = take("args." + arg.name);
    const f = field(arg.name, made.control, {
      label: arg.title || arg.name,
      help: arg.description,
      required: arg.required,
      errors: serverErrors,
      field: "args." + arg.name,
    });
    if (made.control._datalist) f.wrap.append(made.control._datalist);
    const check = function () {
      const got = made.read();
      f.show(got.error || argProblem(arg, got.value, m));
      return got;
    };
    made.control.addEventListener("input", check);
    made.control.addEventListener("change", function () {
      const got = check();
      if (got.error) return;
      ctx.commit(withEntry(ctx.current(), "args", arg.name, got.value));
    });
    if (!serverErrors) f.show(argProblem(arg, args[arg.name], m));
    argFields.push(f.wrap);
  }
  for (const key of Object.keys(errors)) {
    if (key.startsWith("args.")) argFields.push(h("div", { className: "text-danger small", text: key.slice(5) + ": " + take(key).join(" ") }));
  }
  if (!template) {
    const raw = field(m.argsJson, h("textarea", { className: "form-control form-control-sm font-monospace", rows: 4 }), { field: "args" });
    raw.control.value = JSON.stringify(args, null, 2);
    raw.control.addEventListener("change", function () {
      try {
        ctx.commit(withField(ctx.current(), "args", JSON.parse(raw.control.value || "{}")));
        raw.show([]);
      } catch (e) {
        raw.show(m.notJson);
      }
    });
    argFields.push(raw.wrap);
  }
  parts.push(section(m.arguments, argFields.length ? argFields : [h("p", { className: "small text-body-secondary", text: m.noArguments })]));

  // Dependencies: the keyboard's way to connect nodes (the canvas's is dragging output → input).
  const depErrors = take("depends_on");
  const deps = ctx.others.map(function (other) {
    const box = h("input", { type: "checkbox", className: "form-check-input", id: nextId("pe-dep-"), value: other });
    box.checked = ctx.upstream.includes(other);
    box.addEventListener("change", function () {
      const refusal = ctx.connect(other, box.checked);
      if (refusal) {
        box.checked = !box.checked;
        depError.textContent = refusal;
      } else {
        depError.textContent = "";
      }
    });
    return h("div", { className: "form-check form-check-inline" }, [box, h("label", { className: "form-check-label", for: box.id }, h("code", { text: other }))]);
  });
  const depError = h("div", { className: "text-danger small", "aria-live": "polite", text: depErrors ? depErrors.join(" ") : "" });
  parts.push(section(m.dependsOn, (deps.length ? deps : [h("p", { className: "small text-body-secondary mb-1", text: m.noOtherNodes })]).concat([depError])));

  // Resources, the distributed strategy, retries, timeout, skip, cache, env
  parts.push(section(m.resources, resourceFields(node, template, ctx, take)));
  if ((template && template.kind === "distributed") || node.strategy) parts.push(section(m.strategy, strategyFields(node, template, ctx, errors, take)));
  const envErrors = [];
  for (const key of Object.keys(errors)) if (key === "env" || key.startsWith("env.")) envErrors.push.apply(envErrors, take(key));
  parts.push(section(m.execution, executionFields(node, template, ctx, take, envErrors)));

  // Whatever the server said that no field above shows
  const rest = Object.entries(errors).filter(function (entry) { return entry[1] && entry[1].length; });
  if (rest.length) {
    general.hidden = false;
    general.replaceChildren(h("ul", { className: "mb-0 ps-3" }, rest.map(function (entry) {
      return h("li", { text: (entry[0] ? entry[0] + ": " : "") + entry[1].join(" ") });
    })));
  }
  root.replaceChildren.apply(root, parts);
}

// The node's strategy as JSON (its keys override the template's), its errors, and the layout the server worked out.
function strategyFields(node, template, ctx, errors, take) {
  const m = ctx.messages;
  const own = node.strategy && typeof node.strategy === "object" ? node.strategy : null;
  const inherited = template && template.strategy && Object.keys(template.strategy).length ? JSON.stringify(template.strategy) : "";
  const problems = [];
  for (const key of Object.keys(errors)) if (key === "strategy" || key.startsWith("strategy.")) problems.push((key === "strategy" ? "" : key.slice(9) + ": ") + take(key).join(" "));
  const control = h("textarea", { className: "form-control form-control-sm font-monospace", rows: 3, spellcheck: "false", placeholder: inherited });
  if (own) control.value = JSON.stringify(own, null, 2);
  const f = field(m.strategy, control, { errors: problems.length ? problems : undefined, help: m.strategyHelp, field: "strategy" });
  control.addEventListener("change", function () {
    const text = control.value.trim();
    let value;
    try {
      value = text === "" ? undefined : JSON.parse(text);
    } catch (e) {
      return f.show(m.notJson);
    }
    f.show([]);
    ctx.commit(withField(ctx.current(), "strategy", value));
    if (ctx.check) ctx.check();
  });
  const out = [f.wrap];
  if (inherited) out.push(h("p", { className: "small text-body-secondary mb-1", text: fmt(m.strategyTemplate, { strategy: inherited }) }));
  out.push(h("p", { className: "small mb-0", "data-strategy-layout": "", text: ctx.layout ? fmt(m.layout, { layout: ctx.layout }) : m.layoutUnknown }));
  return out;
}

function resourceFields(node, template, ctx, take) {
  const m = ctx.messages;
  const resources = node.resources && typeof node.resources === "object" ? node.resources : {};
  const defaults = (template && template.resources) || {};
  const limits = ctx.limits || {};
  const sources = limits.sources || {};  // what sets each limit: the project's quota, or where its tasks run
  // A distributed template's node holds its resources once per replica: the limits apply to the total.
  const replicas = (template && template.replica_count) || 1;
  const over = function (each, limit, show, source) {
    if (replicas <= 1) return fmt(m.overLimit, { limit: show(limit), source: source || "" });
    return fmt(m.overLimitReplicas, { replicas: replicas, total: show(each * replicas), limit: show(limit), source: source || "" });
  };
  const specs = [
    { key: "cpu", label: m.cpu, type: "number", attrs: { step: "0.1", min: "0" }, limit: limits.cpu, source: sources.cpu },
    { key: "memory", label: m.memoryLabel, type: "text", attrs: {}, limit: limits.memory_bytes, source: sources.memory_bytes, help: m.memoryHelp },
    { key: "gpu", label: m.gpu, type: "number", attrs: { step: "1", min: "0" }, limit: limits.gpu, source: sources.gpu },
    { key: "gpu_type", label: m.gpuType, type: "text", attrs: {} },
  ];
  return specs.map(function (spec) {
    const placeholder = defaults[spec.key] !== undefined ? fmt(m.default, { value: defaults[spec.key] }) : "";
    const attrs = Object.assign({ placeholder: placeholder, autocomplete: "off" }, spec.attrs);
    const f = field(spec.label, input(spec.type, resources[spec.key], attrs), { errors: take("resources." + spec.key), help: spec.help, field: "resources." + spec.key });
    const read = function () {
      const text = f.control.value.trim();
      if (f.control.validity.badInput) return { error: m.notNumber };
      if (text === "") return { value: undefined };
      if (spec.key === "memory") {
        const bytes = memoryBytes(text);
        if (bytes === null) return { error: m.memory };
        if (spec.limit && bytes * replicas > spec.limit) return { value: text, warn: over(bytes, spec.limit, humanBytes, spec.source) };
        return { value: /^\d+$/.test(text) ? Number(text) : text };
      }
      if (spec.type === "number") {
        const number = Number(text);
        if (number < 0) return { error: fmt(m.atLeast, { limit: 0 }) };
        if (spec.limit !== null && spec.limit !== undefined && number * replicas > spec.limit) return { value: number, warn: over(number, spec.limit, String, spec.source) };
        return { value: number };
      }
      return { value: text };
    };
    f.control.addEventListener("input", function () { const got = read(); f.show(got.error || got.warn || []); });
    f.control.addEventListener("change", function () {
      const got = read();
      f.show(got.error || got.warn || []);
      if (!got.error) ctx.commit(withEntry(ctx.current(), "resources", spec.key, got.value));
    });
    return f.wrap;
  });
}

function executionFields(node, template, ctx, take, envErrors) {
  const m = ctx.messages;
  const out = [];
  const numbers = [
    { key: "retries", label: m.retries, min: 0, max: ctx.maxRetries, placeholder: "0" },
    { key: "retry_backoff", label: m.retryBackoff, min: 0, placeholder: "10" },
    { key: "timeout", label: m.timeout, min: 1, placeholder: template && template.timeout ? String(template.timeout) : m.none },
  ];
  for (const spec of numbers) {
    const attrs = { step: "1", min: String(spec.min), placeholder: spec.placeholder };
    if (spec.max !== undefined) attrs.max = String(spec.max);
    const f = field(spec.label, input("number", node[spec.key], attrs), { errors: take(spec.key), field: spec.key });
    const read = function () {
      const text = f.control.value.trim();
      if (f.control.validity.badInput) return { error: m.notInteger };
      if (text === "") return { value: undefined };
      const number = Number(text);
      if (!Number.isInteger(number)) return { error: m.notInteger };
      if (number < spec.min) return { error: fmt(m.atLeast, { limit: spec.min }) };
      if (spec.max !== undefined && number > spec.max) return { error: fmt(m.atMost, { limit: spec.max }) };
      return { value: number };
    };
    f.control.addEventListener("input", function () { f.show(read().error || []); });
    f.control.addEventListener("change", function () {
      const got = read();
      f.show(got.error || []);
      if (!got.error) ctx.commit(withField(ctx.current(), spec.key, got.value));
    });
    out.push(f.wrap);
  }
  for (const spec of [{ key: "skip", label: m.skip, dflt: false }, { key: "cache", label: m.cache, dflt: true }]) {
    const box = h("input", { type: "checkbox", className: "form-check-input" });
    box.checked = node[spec.key] === undefined ? spec.dflt : Boolean(node[spec.key]);
    const f = field(spec.label, box, { errors: take(spec.key), field: spec.key });
    box.addEventListener("change", function () {
      ctx.commit(withField(ctx.current(), spec.key, box.checked === spec.dflt ? undefined : box.checked));
    });
    out.push(f.wrap);
  }
  out.push(envField(node.env, m, envErrors, function (env) { ctx.commit(withField(ctx.current(), "env", env)); }));
  return out;
}

function humanBytes(bytes) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return (Math.round(value * 10) / 10) + " " + units[unit];
}
