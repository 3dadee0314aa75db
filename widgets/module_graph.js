// fusionlab ModuleGraph: a model's graph folded by module. A click on a folded module (a box) opens it, a click on
// an open module's frame folds it, a click on a node selects it: each click goes to Python as a message, which
// redraws. Wheel zooms, drag pans, the search box outlines matches and opens the modules they sit in.
// cleanSvg, titleOf and panZoom come from svg_tools.js, which the Python side puts in front of this file.

function render({ model, el }) {
  const root = document.createElement("div");
  root.className = "fusionlab-module-graph";
  const bar = document.createElement("div");
  bar.className = "fl-mg-bar";
  const search = document.createElement("input");
  search.type = "search";
  search.placeholder = "search nodes, ops, modules";
  search.className = "fl-mg-search";
  search.value = model.get("search") || "";
  const plumbingLabel = document.createElement("label");
  const plumbing = document.createElement("input");
  plumbing.type = "checkbox";
  plumbing.className = "fl-mg-plumbing";
  plumbingLabel.append(plumbing, " hide plumbing");
  const buttons = {};
  for (const [name, text, tip] of [["in", "+", "zoom in (or the mouse wheel)"], ["out", "\u2212", "zoom out"],
    ["fit", "fit", "whole graph"], ["reset", "fold all", "back to the first view"]]) {
    buttons[name] = document.createElement("button");
    buttons[name].type = "button";
    buttons[name].textContent = text;
    buttons[name].title = tip;
    buttons[name].className = `fl-mg-${name}`;
  }
  bar.append(search, plumbingLabel, buttons.in, buttons.out, buttons.fit, buttons.reset);
  const status = document.createElement("div");
  status.className = "fl-mg-status";
  const canvas = document.createElement("div");
  canvas.className = "fl-mg-canvas";
  root.append(bar, status, canvas);
  el.appendChild(root);
  let view = { zoom() {}, reset() {} };

  function draw() {
    canvas.replaceChildren();
    plumbing.checked = Boolean(model.get("hide_plumbing"));
    status.textContent = model.get("status") || "";
    const svgText = model.get("svg");
    if (!svgText) {
      const note = document.createElement("div");
      note.className = "fl-mg-message";
      note.textContent = model.get("message") || "no graph";
      const dot = document.createElement("pre");
      dot.textContent = model.get("dot") || "";
      canvas.append(note, dot);
      return;
    }
    const svg = cleanSvg(svgText);
    if (svg === null) {
      canvas.textContent = "the graph could not be read";
      return;
    }
    canvas.appendChild(svg);
    const kinds = model.get("kinds") || {};
    for (const group of svg.querySelectorAll("g.node, g.cluster")) {
      const id = titleOf(group);
      if (kinds[id] === undefined) continue;
      group.classList.add(`fl-mg-${kinds[id]}`);
      group.addEventListener("click", (event) => {
        event.stopPropagation();
        event.preventDefault();
        model.send({ event: "click", id });
      });
    }
    view = panZoom(svg);
  }

  search.addEventListener("keydown", (event) => {
    if (event.key === "Enter") {
      model.set("search", search.value);
      model.save_changes();
    }
  });
  plumbing.addEventListener("change", () => {
    model.set("hide_plumbing", plumbing.checked);
    model.save_changes();
  });
  buttons.in.addEventListener("click", () => view.zoom(0.8));
  buttons.out.addEventListener("click", () => view.zoom(1.25));
  buttons.fit.addEventListener("click", () => view.reset());
  buttons.reset.addEventListener("click", () => { search.value = ""; model.send({ event: "reset" }); });
  const onStatus = () => { status.textContent = model.get("status") || ""; };
  model.on("change:svg", draw);
  model.on("change:message", draw);
  model.on("change:status", onStatus);
  draw();
  return () => {
    model.off("change:svg", draw);
    model.off("change:message", draw);
    model.off("change:status", onStatus);
  };
}

export default { render };
