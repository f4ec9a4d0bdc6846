// The report's "colour frames by phase" box: the flame graph carries both colourings (svg.py).
(function () {
  var box = document.getElementById("fp-color-phase"), f = document.getElementById("f");
  var kinds = document.getElementById("legend"), phases = document.getElementById("plegend");
  if (!box || !f || !phases) return;
  function show() {
    if (box.checked) f.classList.add("byphase"); else f.classList.remove("byphase");
    kinds.style.display = box.checked ? "none" : "";
    phases.style.display = box.checked ? "" : "none";
  }
  box.addEventListener("change", show);
  show();
})();
