// fusionlab: shared helpers for the widgets that show a Graphviz SVG. Prepended to a widget's own ES module by
// its Python side (no build step, nothing fetched at run time); it exports nothing itself.

function cleanSvg(text) {
  // Parsed as SVG and stripped of anything active (scripts, foreignObject, on* handlers, javascript: links).
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

// Zoom with the mouse wheel (about the pointer) and pan with a drag, by moving the SVG's viewBox. A drag longer
// than a few pixels swallows the click that ends it, so panning never opens a module by accident.
function panZoom(svg) {
  const base = svg.viewBox && svg.viewBox.baseVal;
  if (!base || !base.width) return { zoom() {}, reset() {} };
  const home = { x: base.x, y: base.y, w: base.width, h: base.height };
  let box = { ...home };
  svg.removeAttribute("width");
  svg.removeAttribute("height");
  svg.style.width = "100%";
  svg.style.height = "100%";
  svg.style.maxWidth = "none";
  svg.setAttribute("preserveAspectRatio", "xMidYMin meet");
  const apply = () => svg.setAttribute("viewBox", `${box.x} ${box.y} ${box.w} ${box.h}`);
  const toSvg = (x, y) => {
    const matrix = svg.getScreenCTM();
    return matrix ? new DOMPoint(x, y).matrixTransform(matrix.inverse()) : { x: box.x + box.w / 2, y: box.y };
  };
  function zoom(factor, clientX, clientY) {
    const rect = svg.getBoundingClientRect();
    const p = toSvg(clientX ?? rect.left + rect.width / 2, clientY ?? rect.top + rect.height / 2);
    const w = Math.min(Math.max(box.w * factor, home.w / 40), home.w * 4);
    const scale = w / box.w;
    box = { x: p.x - (p.x - box.x) * scale, y: p.y - (p.y - box.y) * scale, w, h: box.h * scale };
    apply();
  }
  svg.addEventListener("wheel", (event) => {
    event.preventDefault();
    zoom(Math.exp(event.deltaY * 0.0015), event.clientX, event.clientY);
  }, { passive: false });
  let start = null;
  let dragged = false;
  svg.addEventListener("pointerdown", (event) => {
    if (event.button !== 0) return;
    start = { x: event.clientX, y: event.clientY, box: { ...box }, scale: (svg.getScreenCTM() || { a: 1 }).a || 1 };
    dragged = false;
  });
  svg.addEventListener("pointermove", (event) => {
    if (start === null) return;
    const dx = event.clientX - start.x;
    const dy = event.clientY - start.y;
    if (!dragged && Math.hypot(dx, dy) < 4) return;
    dragged = true;
    svg.classList.add("fl-panning");
    box = { ...start.box, x: start.box.x - dx / start.scale, y: start.box.y - dy / start.scale };
    apply();
  });
  const end = () => { start = null; svg.classList.remove("fl-panning"); };
  svg.addEventListener("pointerup", end);
  svg.addEventListener("pointerleave", end);
  svg.addEventListener("click", (event) => {
    if (dragged) { event.stopPropagation(); event.preventDefault(); dragged = false; }
  }, true);
  apply();
  return { zoom: (factor) => zoom(factor), reset() { box = { ...home }; apply(); } };
}
