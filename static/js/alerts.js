// The alert rule form: only the parameters the chosen kind uses are shown (each input names its kinds in
// data-kinds); the others stay in the form, hidden, and the server ignores them.
(function () {
  const kind = document.getElementById("id_kind");
  if (!kind) return;
  const update = () => {
    document.querySelectorAll("[data-kinds]").forEach((input) => {
      const box = input.closest(".mb-3");
      if (box) box.hidden = !input.dataset.kinds.split(" ").includes(kind.value);
    });
  };
  kind.addEventListener("change", update);
  update();
})();
