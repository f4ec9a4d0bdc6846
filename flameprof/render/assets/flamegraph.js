
(function () {
  var NS = "http://www.w3.org/2000/svg", doc = document;
  var F = doc.getElementById("f"), L = doc.getElementById("l"), tip = doc.getElementById("tip");
  var resetBtn = doc.getElementById("reset"), searchBtn = doc.getElementById("search");
  var matched = doc.getElementById("matched"), root = F.ownerSVGElement;  // also when inlined in HTML
  var KINDS = {u: "your code", l: "library", t: "PyTorch", s: "standard library", n: "native", c: "scope",
               y: "layer", p: "process/thread", m: "marker", r: "all samples"};
  var R = F.getElementsByTagName("rect"), n = R.length;
  function levelY(g) {  // the y of a stack level's group (its translate), read once per group
    if (g.levelY === undefined) {
      var t = g.transform ? g.transform.baseVal : null;
      g.levelY = t && t.numberOfItems ? t.getItem(0).matrix.f : 0;
    }
    return g.levelY;
  }
  var X = new Float64Array(n), W = new Float64Array(n), Y = new Float64Array(n), D = new Int32Array(n), N = [];
  for (var i = 0; i < n; i++) {
    var r = R[i];
    r.idx = i;
    X[i] = +r.getAttribute("x"); W[i] = +r.getAttribute("width"); Y[i] = levelY(r.parentNode);
    D[i] = ICICLE ? Y[i] / DH : (FH - DH - Y[i]) / DH;
    N.push(r.getAttribute("n"));
  }
  var X0 = 0, XW = UNITS, term = "";

  function labels() {
    var frag = doc.createDocumentFragment(), k = FW / XW;
    for (var i = 0; i < n; i++) {
      var lo = Math.max(X[i], X0), hi = Math.min(X[i] + W[i], X0 + XW), px = (hi - lo) * k;
      if (px < 3 * CW + 6) continue;
      var fit = Math.floor((px - 6) / CW), name = N[i];
      if (name.length > fit) name = name.slice(0, fit - 2) + "..";
      var t = doc.createElementNS(NS, "text");
      t.setAttribute("x", (FX + (lo - X0) * k + 3).toFixed(1));
      t.setAttribute("y", FY + Y[i] + 11.5);
      t.textContent = name;
      frag.appendChild(t);
    }
    while (L.firstChild) L.removeChild(L.firstChild);
    L.appendChild(frag);
  }

  function zoom(i) {
    X0 = X[i]; XW = W[i];
    F.setAttribute("viewBox", X0 + " 0 " + XW + " " + FH);
    for (var j = 0; j < n; j++) {
      var above = D[j] < D[i] && X[j] <= X0 && X[j] + W[j] >= X0 + XW;
      if (above) R[j].classList.add("an"); else R[j].classList.remove("an");
    }
    resetBtn.style.display = "";
    labels();
  }

  function reset() {
    X0 = 0; XW = UNITS;
    F.setAttribute("viewBox", "0 0 " + UNITS + " " + FH);
    for (var j = 0; j < n; j++) R[j].classList.remove("an");
    resetBtn.style.display = "none";
    labels();
  }

  function clearSearch() {
    for (var j = 0; j < n; j++) R[j].classList.remove("hl");
    term = "";
    matched.textContent = " ";
    searchBtn.textContent = "Search (Ctrl-F)";
  }

  function search(text) {
    var re;
    try { re = new RegExp(text); } catch (e) { matched.textContent = "Invalid regular expression"; return -1; }
    var hits = [];
    for (var j = 0; j < n; j++) {
      var hit = D[j] > 0 && re.test(N[j]);
      if (hit) { R[j].classList.add("hl"); hits.push(j); } else R[j].classList.remove("hl");
    }
    // A match inside a matched frame is already counted: sum only the outermost matches.
    hits.sort(function (a, b) { return X[a] - X[b] || W[b] - W[a]; });
    var sum = 0, end = -1;
    for (var h = 0; h < hits.length; h++) {
      var j2 = hits[h];
      if (X[j2] >= end) { sum += W[j2]; end = X[j2] + W[j2]; }
    }
    var pct = 100 * sum / UNITS;
    term = text;
    matched.textContent = "Matched: " + (pct === 100 ? "100" : pct.toFixed(1)) + "%";
    searchBtn.textContent = "Reset search";
    return pct;
  }

  function askSearch() {
    var text = prompt("Search frames (regular expression)", term);
    if (text === null) return;
    if (text === "") clearSearch(); else search(text);
  }

  function seconds(v) {
    if (v >= 100) return v.toFixed(0) + " s";
    if (v >= 1) return v.toPrecision(3) + " s";
    if (v >= 1e-3) return (v * 1e3).toPrecision(3) + " ms";
    return (v * 1e6).toPrecision(3) + " \u00b5s";
  }

  function count(v) {
    return Number.isInteger(v) ? v.toLocaleString("en-US") : v.toPrecision(4);
  }

  function describe(i) {
    var share = W[i] / UNITS, pct = (100 * share).toFixed(2) + "%", s = +R[i].getAttribute("s");
    var value = COUNT ? count(s) + " samples (" + pct + ")"
                      : seconds(share * TOTAL) + " (" + pct + "), " + count(s) + " samples";
    var kind = R[i].getAttribute("class").charAt(0);
    return [N[i], value, R[i].getAttribute("d") || KINDS[kind] || ""];
  }

  function showTip(i, evt) {
    var lines = describe(i);
    doc.getElementById("t1").textContent = lines[0].length > 120 ? lines[0].slice(0, 118) + ".." : lines[0];
    doc.getElementById("t2").textContent = lines[1];
    doc.getElementById("t3").textContent = lines[2];
    var p = root.createSVGPoint();
    p.x = evt.clientX; p.y = evt.clientY;
    p = p.matrixTransform(root.getScreenCTM().inverse());
    var text = tip.lastChild, box = text.getBBox(), w = box.width + 12, h = box.height + 8;
    var x = p.x + 14 + w > WIDTH ? p.x - w - 8 : p.x + 14, y = p.y + 18 + h > HEIGHT ? p.y - h - 8 : p.y + 18;
    var rect = tip.firstChild;
    rect.setAttribute("width", w); rect.setAttribute("height", h);
    rect.setAttribute("x", -6); rect.setAttribute("y", box.y - 4);
    tip.setAttribute("transform", "translate(" + Math.max(0, x + 6) + "," + Math.max(12, y - box.y) + ")");
    tip.setAttribute("visibility", "visible");
  }

  F.addEventListener("mousemove", function (e) {
    if (e.target.idx !== undefined) showTip(e.target.idx, e);
  });
  F.addEventListener("mouseleave", function () { tip.setAttribute("visibility", "hidden"); });
  F.addEventListener("click", function (e) {
    var i = e.target.idx;
    if (i === undefined) return;
    if (D[i] === 0) reset(); else zoom(i);
  });
  resetBtn.addEventListener("click", reset);
  searchBtn.addEventListener("click", function () { if (term) clearSearch(); else askSearch(); });
  doc.addEventListener("keydown", function (e) {
    if (((e.ctrlKey || e.metaKey) && (e.key === "f" || e.key === "F")) || e.key === "F3") {
      e.preventDefault();
      askSearch();
    } else if (e.key === "Escape") {
      reset();
      clearSearch();
    }
  });
  window.flamegraph = {zoom: zoom, reset: reset, search: search, clearSearch: clearSearch, describe: describe,
                       frames: R};
})();
