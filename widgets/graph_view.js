// fusionlab GraphView: a Graphviz SVG of the program; a click on a node or a fusion group selects it.
// The SVG comes from Python (Graphviz escapes every label); it is parsed as SVG and stripped of anything
// active (scripts, foreignObject, on* handlers, javascript: links) before it enters the page.

const SVG_NS = "http://www.w3.org/2000/svg";

function cleanSvg(text) {
  const doc = new DOMParser().parseFromString(text, "image/svg+xml");
  const svg = doc.documentElement;
  if (!svg || svg.nodeName.toLowerCase() !== "svg" || doc.getElementsByTagName("parsererror").length) {
    return null;
  }
  for (const bad of Array.from(svg.querySelectorAll("script, foreignObject"))) bad.remove();
  for (const element of [svg, ...svg.querySelectorAll("*")]) {
    for (const attribute of Array.from(element.attributes)) {
      const name = attribute.name.toLowerCase();
      const value = attribute.value.trim().toLowerCase();
      if (name.startsWith("on") || ((name === "href" || name === "xlink:href") && value.startsWith("javascript:"))) {
        element.removeAttribute(attribute.name);
      }
    }
  }
  return document.importNode(svg, true);
}

function titleOf(group) {
  const title = group.querySelector(":scope > title");
  return title ? title.textContent : "";
}

function render({ model, el }) {
  const root = document.createElement("div");
  root.className = "fusionlab-graph-view";
  const status = document.createElement("div");
  status.className = "fusionlab-graph-status";
  const canvas = document.createElement("div");
  canvas.className = "fusionlab-graph-canvas";
  root.append(status, canvas);
  el.appendChild(root);

  function markSelection() {
    const names = model.get("names") || {};
    const selected = model.get("selected");
    let marked = false;
    for (const kind of ["node", "cluster"]) {
      for (const group of canvas.querySelectorAll(`g.${kind}`)) {
        const hit = !marked && selected !== "" && names[titleOf(group)] === selected;
        group.classList.toggle("fl-selected", hit);
        if (hit && kind === "node") marked = true;
      }
    }
    status.textContent = selected ? `selected: ${selected}` : "click a node or a fusion group";
  }

  function select(event, group) {
    event.stopPropagation();
    event.preventDefault();
    const name = (model.get("names") || {})[titleOf(group)];
    if (name === undefined) return;
    model.set("selected", name);
    model.save_changes();
    markSelection();
  }

  function draw() {
    canvas.replaceChildren();
    const message = model.get("message");
    const svgText = model.get("svg");
    if (!svgText) {
      const note = document.createElement("div");
      note.className = "fusionlab-graph-message";
      note.textContent = message || "no graph";
      const dot = document.createElement("pre");
      dot.className = "fusionlab-graph-dot";
      dot.textContent = model.get("dot") || "";
      canvas.append(note, dot);
      status.textContent = "";
      return;
    }
    const svg = cleanSvg(svgText);
    if (svg === null) {
      canvas.textContent = "the graph could not be read";
      return;
    }
    canvas.appendChild(svg);
    for (const group of svg.querySelectorAll("g.node, g.cluster")) {
      group.addEventListener("click", (event) => select(event, group));
    }
    markSelection();
  }

  model.on("change:svg", draw);
  model.on("change:message", draw);
  model.on("change:selected", markSelection);
  draw();
  return () => {
    model.off("change:svg", draw);
    model.off("change:message", draw);
    model.off("change:selected", markSelection);
  };
}

export default { render };
