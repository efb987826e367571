// The palette: the project's job templates by category, filtered as one types. A template is dragged onto the
// canvas (pointer) or added with Enter/Space or a click (keyboard). Up/Down move between templates.
import { h } from "./widgets.js";

export function createPalette(root, options) {
  const search = root.querySelector("[data-palette-search]");
  const list = root.querySelector("[data-palette-list]");
  const empty = root.querySelector("[data-palette-empty]");
  const m = options.messages;
  const templates = options.templates.filter(function (t) { return t.latest; });
  const categories = new Map();
  templates
    .slice()
    .sort(function (a, b) { return a.category.localeCompare(b.category) || a.name.localeCompare(b.name); })
    .forEach(function (t) {
      if (!categories.has(t.category)) categories.set(t.category, []);
      categories.get(t.category).push(t);
    });

  const buttons = [];
  const groups = [];
  let index = 0;
  for (const [category, items] of categories) {
    index += 1;
    const headingId = "pe-cat-" + index;
    const ul = h("ul", { className: "list-unstyled mb-2", "aria-labelledby": headingId });
    for (const t of items) {
      const button = h("button", {
        type: "button",
        className: "pe-template btn btn-sm btn-light border w-100 text-start mb-1",
        "data-template": t.slug,
        title: t.description || t.name,
        "aria-describedby": "pe-palette-help",
      }, [
        h("span", { className: "d-block text-truncate fw-semibold", text: t.name }),
        h("span", { className: "d-block text-truncate small font-monospace text-body-secondary", text: t.slug + (t.own ? " · " + m.ownTemplate : "") }),
      ]);
      button._template = t;
      button._haystack = (t.search || [t.name, t.slug, t.category, t.description].join(" ")).toLowerCase();
      // A click (or Enter/Space, which buttons turn into clicks) adds the node; dragging places it. The drag
      // starts after a few pixels of movement, so that a click stays a click.
      button.addEventListener("click", function () {
        if (button._dragged) button._dragged = false;
        else options.onAdd(t);
      });
      button.addEventListener("mousedown", function (event) {
        if (event.button !== 0) return;
        button._dragged = false;
        const x = event.clientX;
        const y = event.clientY;
        const stop = function () {
          document.removeEventListener("mousemove", move);
          document.removeEventListener("mouseup", stop);
        };
        const move = function (moved) {
          if (Math.abs(moved.clientX - x) + Math.abs(moved.clientY - y) < 5) return;
          stop();
          button._dragged = true;
          options.startDrag(t, moved);
        };
        document.addEventListener("mousemove", move);
        document.addEventListener("mouseup", stop);
      });
      ul.append(h("li", {}, button));
      buttons.push(button);
    }
    const group = h("div", { className: "pe-category" }, [
      h("h3", { className: "h6 text-uppercase small text-body-secondary mb-1", id: headingId, text: category }),
      ul,
    ]);
    group._buttons = Array.from(ul.querySelectorAll("button"));
    groups.push(group);
    list.append(group);
  }

  function filter() {
    const words = search.value.toLowerCase().split(/\s+/).filter(Boolean);
    let visible = 0;
    for (const button of buttons) {
      const match = words.every(function (word) { return button._haystack.includes(word); });
      button.parentElement.hidden = !match;
      if (match) visible += 1;
    }
    for (const group of groups) group.hidden = group._buttons.every(function (b) { return b.parentElement.hidden; });
    empty.hidden = visible > 0;
    empty.textContent = m.noTemplates;
  }
  search.addEventListener("input", filter);
  search.addEventListener("keydown", function (event) {
    if (event.key === "ArrowDown") {
      const first = buttons.find(function (b) { return !b.parentElement.hidden; });
      if (first) {
        event.preventDefault();
        first.focus();
      }
    }
  });
  list.addEventListener("keydown", function (event) {
    if (event.key !== "ArrowDown" && event.key !== "ArrowUp") return;
    const shown = buttons.filter(function (b) { return !b.parentElement.hidden; });
    const at = shown.indexOf(document.activeElement);
    if (at < 0) return;
    event.preventDefault();
    const next = event.key === "ArrowDown" ? shown[at + 1] : shown[at - 1];
    if (next) next.focus();
    else if (event.key === "ArrowUp") search.focus();
  });
  filter();
}
