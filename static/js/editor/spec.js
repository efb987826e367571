// The pipeline spec as the editor handles it: node names, the graph's cycles, the server's error keys, and
// the node fields the side panel edits. No DOM and no X6 here: the same rules as apps/jobs/dag.py.

export const NODE_NAME_RE = /^[a-z0-9]([a-z0-9_-]{0,62})$/;
export const PIPELINE_NAME_RE = /^[-a-zA-Z0-9_]+$/;
export const ENV_NAME_RE = /^[A-Za-z_][A-Za-z0-9_]*$/;
export const FAILURE_POLICIES = ["fail_fast", "continue"];

// "Saved %(count)s nodes" with {count: 3}: the server's translated strings use Python's named placeholders.
export function fmt(message, params) {
  return String(message).replace(/%\((\w+)\)s/g, function (_m, key) {
    return params && params[key] !== undefined ? String(params[key]) : "";
  });
}

// A node name from a template slug: lowercase, only the characters a node name may hold.
export function baseName(slug) {
  let name = String(slug || "node").toLowerCase().replace(/[^a-z0-9_-]+/g, "-").replace(/^[-_]+/, "");
  name = name.slice(0, 60) || "node";
  return NODE_NAME_RE.test(name) ? name : "node";
}

// `base`, or `base-2`, `base-3`… whichever no other node has.
export function uniqueName(base, taken) {
  const names = taken instanceof Set ? taken : new Set(taken);
  if (!names.has(base)) return base;
  const stem = base.replace(/-\d+$/, "").slice(0, 58);
  for (let i = 2; ; i += 1) {
    const candidate = stem + "-" + i;
    if (!names.has(candidate)) return candidate;
  }
}

// The dependency path that makes `target → source` a cycle if `target` started depending on `source`:
// [target, …, source] when `source` already (transitively) depends on `target`, else null.
// `deps` maps a node name to the names it depends on.
export function cyclePath(deps, source, target) {
  if (source === target) return [source, source];
  // Walk upstream from `source`; reaching `target` means target → … → source already exists.
  const previous = new Map([[source, null]]);
  const queue = [source];
  while (queue.length) {
    const name = queue.shift();
    for (const dep of deps.get(name) || []) {
      if (previous.has(dep)) continue;
      previous.set(dep, name);
      if (dep === target) {
        const path = [target];
        let step = name;
        while (step !== null) {
          path.push(step);
          step = previous.get(step);
        }
        return [...path, target];
      }
      queue.push(dep);
    }
  }
  return null;
}

// The server's errors ({"nodes.train.args.c": ["…"], "name": ["…"]}) split into the pipeline's own and each
// node's, the node's keyed by field ("args.c", "resources.cpu", "" for the node as a whole). Nodes without a
// usable name are reported by position ("nodes.2.name"): `names` is the spec's node names in order.
export function groupErrors(errors, names) {
  const result = { pipeline: {}, nodes: {} };
  const byLength = [...names].filter(Boolean).sort((a, b) => b.length - a.length);
  for (const [key, value] of Object.entries(errors || {})) {
    const messages = Array.isArray(value) ? value.map(String) : [String(value)];
    let node = null;
    let field = "";
    if (key.startsWith("nodes.")) {
      const rest = key.slice(6);
      node = byLength.find((name) => rest === name || rest.startsWith(name + ".")) || null;
      if (node !== null) {
        field = rest.slice(node.length + 1);
      } else {
        const match = /^(\d+)(?:\.(.*))?$/.exec(rest);
        if (match && names[Number(match[1])] !== undefined) {
          node = names[Number(match[1])];
          field = match[2] || "";
        }
      }
    }
    if (node === null) {
      result.pipeline[key] = (result.pipeline[key] || []).concat(messages);
    } else {
      const fields = (result.nodes[node] = result.nodes[node] || {});
      fields[field] = (fields[field] || []).concat(messages);
    }
  }
  return result;
}

// "A=1\nB=two" ⇄ {A: "1", B: "two"}: how env mappings are typed in the panel.
export function envToText(env) {
  return Object.entries(env || {}).map(([k, v]) => k + "=" + v).join("\n");
}

// Parsed env lines, or {error} naming the first bad line.
export function textToEnv(text) {
  const env = {};
  const lines = String(text || "").split("\n");
  for (let i = 0; i < lines.length; i += 1) {
    const line = lines[i].trim();
    if (!line) continue;
    const at = line.indexOf("=");
    const name = at < 0 ? line : line.slice(0, at).trim();
    if (at < 0 || !ENV_NAME_RE.test(name)) return { error: i + 1 };
    env[name] = line.slice(at + 1);
  }
  return { env: env };
}

// A copy of `node` with `key` set, or removed when `value` is undefined (the template's default applies).
export function withField(node, key, value) {
  const copy = structuredClone(node);
  if (value === undefined) delete copy[key];
  else copy[key] = value;
  return copy;
}

// A copy of `node` with one entry of a mapping field (args, resources) set or removed. An emptied mapping
// disappears unless the node was written with it.
export function withEntry(node, field, key, value) {
  const copy = structuredClone(node);
  const had = Object.prototype.hasOwnProperty.call(copy, field);
  const mapping = had && copy[field] && typeof copy[field] === "object" ? copy[field] : {};
  if (value === undefined) delete mapping[key];
  else mapping[key] = value;
  if (Object.keys(mapping).length || had) copy[field] = mapping;
  return copy;
}

// Equal as JSON values (key order ignored).
export function sameValue(a, b) {
  return JSON.stringify(canonical(a)) === JSON.stringify(canonical(b));
}

function canonical(value) {
  if (Array.isArray(value)) return value.map(canonical);
  if (value && typeof value === "object") {
    const out = {};
    for (const key of Object.keys(value).sort()) out[key] = canonical(value[key]);
    return out;
  }
  return value;
}

// Client-side check of one argument value against its schema property (the server has the last word):
// a message, or "" when it looks fine. `value` undefined means "not given".
export function argProblem(arg, value, messages) {
  if (value === undefined || value === null || value === "") {
    const hasDefault = arg.default !== undefined && arg.default !== null;
    return arg.required && !hasDefault ? messages.required : "";
  }
  if (arg.type === "int" && !Number.isInteger(value)) return messages.notInteger;
  if ((arg.type === "float" || arg.type === "int") && typeof value === "number") {
    if (arg.minimum !== undefined && value < arg.minimum) return fmt(messages.atLeast, { limit: arg.minimum });
    if (arg.maximum !== undefined && value > arg.maximum) return fmt(messages.atMost, { limit: arg.maximum });
    if (arg.exclusiveMinimum !== undefined && value <= arg.exclusiveMinimum) {
      return fmt(messages.above, { limit: arg.exclusiveMinimum });
    }
    if (arg.exclusiveMaximum !== undefined && value >= arg.exclusiveMaximum) {
      return fmt(messages.below, { limit: arg.exclusiveMaximum });
    }
  }
  if (typeof value === "string") {
    if (arg.minLength !== undefined && value.length < arg.minLength) {
      return fmt(messages.minLength, { limit: arg.minLength });
    }
    if (arg.maxLength !== undefined && value.length > arg.maxLength) {
      return fmt(messages.maxLength, { limit: arg.maxLength });
    }
    if (arg.pattern) {
      try {
        if (!new RegExp(arg.pattern, "u").test(value)) return fmt(messages.pattern, { pattern: arg.pattern });
      } catch (e) {
        return ""; // a pattern JavaScript cannot read: the server checks it
      }
    }
  }
  return "";
}

// "2Gi" → bytes, as apps.runtime.workload.parse_memory reads it (case-insensitive units, an optional "b");
// null when unreadable.
export function memoryBytes(text) {
  const match = /^\s*(\d+(?:\.\d+)?)\s*([kmgt]i?)?b?\s*$/i.exec(String(text));
  if (!match) return null;
  const units = { "": 1, k: 1e3, m: 1e6, g: 1e9, t: 1e12, ki: 2 ** 10, mi: 2 ** 20, gi: 2 ** 30, ti: 2 ** 40 };
  return Math.floor(Number(match[1]) * units[(match[2] || "").toLowerCase()]);
}
