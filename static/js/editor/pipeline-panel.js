// The side panel with no node selected: the pipeline's name, description, parallelism, priority, failure policy
// and env, its own errors, and every node with its problems (a way to reach a node without the canvas).
import { fmt, FAILURE_POLICIES, PIPELINE_NAME_RE, withField } from "./spec.js";
import { envField, field, h, input, section } from "./widgets.js";

// The pipeline's own fields. ctx: meta() {name, description} and settings() (the spec without nodes), both as
// they are now; errors {key: [..]} of the pipeline, nodes [{name, problems}], messages, commitMeta(meta),
// commitSettings(settings), select(name).
export function renderPipelinePanel(root, ctx) {
  const m = ctx.messages;
  const errors = Object.assign({}, ctx.errors || {});
  const take = function (key) { const list = errors[key]; delete errors[key]; return list; };
  const meta = ctx.meta();
  const settings = ctx.settings();
  const parts = [h("h2", { className: "h5", id: "pe-panel-title", text: m.pipeline })];
  const general = h("div", { className: "alert alert-danger py-1 px-2 small", role: "alert", hidden: true, "data-pipeline-errors": "" });
  parts.push(general);

  const name = field(m.pipelineName, input("text", meta.name, { required: true, maxlength: 100, autocomplete: "off", spellcheck: "false" }), { required: true, errors: take("name"), field: "name", help: m.pipelineNameHelp });
  const checkName = function () {
    const value = name.control.value.trim();
    name.show(value === "" ? m.required : PIPELINE_NAME_RE.test(value) ? [] : m.pipelineNameHelp);
    return value;
  };
  name.control.addEventListener("input", checkName);
  name.control.addEventListener("change", function () { ctx.commitMeta(Object.assign({}, ctx.meta(), { name: checkName() })); });
  if (!meta.name && !name.control.classList.contains("is-invalid")) name.show([]);
  parts.push(name.wrap);

  const description = field(m.description, h("textarea", { className: "form-control form-control-sm", rows: 2 }), { errors: take("description"), field: "description" });
  description.control.value = meta.description || "";
  description.control.addEventListener("change", function () { ctx.commitMeta(Object.assign({}, ctx.meta(), { description: description.control.value })); });
  parts.push(description.wrap);

  const numbers = [
    { key: "parallelism", label: m.parallelism, help: m.parallelismHelp, min: 0 },
    { key: "priority", label: m.priority, help: m.priorityHelp },
  ];
  for (const spec of numbers) {
    const attrs = { step: "1", placeholder: "0" };
    if (spec.min !== undefined) attrs.min = String(spec.min);
    const f = field(spec.label, input("number", settings[spec.key], attrs), { errors: take(spec.key), help: spec.help, field: spec.key });
    f.control.addEventListener("change", function () {
      const text = f.control.value.trim();
      const number = Number(text);
      if (f.control.validity.badInput || (text !== "" && !Number.isInteger(number))) return f.show(m.notInteger);
      if (text !== "" && spec.min !== undefined && number < spec.min) return f.show(fmt(m.atLeast, { limit: spec.min }));
      f.show([]);
      ctx.commitSettings(withField(ctx.settings(), spec.key, text === "" ? undefined : number));
    });
    parts.push(f.wrap);
  }
  const policy = h("select", { className: "form-select form-select-sm" }, FAILURE_POLICIES.map(function (value) {
    return h("option", { value: value, text: m["policy_" + value] || value });
  }));
  policy.value = settings.failure_policy || "fail_fast";
  const policyField = field(m.failurePolicy, policy, { errors: take("failure_policy"), field: "failure_policy" });
  policy.addEventListener("change", function () {
    const now = ctx.settings();
    ctx.commitSettings(withField(now, "failure_policy", policy.value === "fail_fast" && now.failure_policy === undefined ? undefined : policy.value));
  });
  parts.push(policyField.wrap);
  const envErrors = [];
  for (const key of Object.keys(errors)) if (key === "env" || key.startsWith("env.")) envErrors.push.apply(envErrors, take(key));
  parts.push(envField(settings.env, m, envErrors, function (env) { ctx.commitSettings(withField(ctx.settings(), "env", env)); }));

  // Every node, with its problems: a way to reach a node (and see which ones are wrong) without the canvas.
  const list = h("ul", { className: "list-unstyled mb-0 pe-node-list" }, ctx.nodes.map(function (item) {
    return h("li", {}, h("button", {
      type: "button",
      className: "btn btn-link btn-sm p-0 " + (item.problems ? "text-danger" : ""),
      onclick: function () { ctx.select(item.name); },
    }, [h("code", { text: item.name }), item.problems ? " — " + fmt(m.errorsOnNode, { count: item.problems }) : ""]));
  }));
  parts.push(section(m.nodes, ctx.nodes.length ? [list] : [h("p", { className: "small text-body-secondary mb-0", text: m.emptyCanvas })]));

  const rest = Object.entries(errors).filter(function (entry) { return entry[1] && entry[1].length; });
  if (rest.length) {
    general.hidden = false;
    general.replaceChildren(h("strong", { text: m.pipelineErrors }), h("ul", { className: "mb-0 ps-3" }, rest.map(function (entry) {
      const key = entry[0] === "non_field_errors" || entry[0] === "__all__" ? "" : entry[0];
      return h("li", { text: (key ? key + ": " : "") + entry[1].join(" ") });
    })));
  }
  root.replaceChildren.apply(root, parts);
}
