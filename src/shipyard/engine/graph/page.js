// shipyard graph: lays out, draws and searches the graph in #graph-data (inlined; no network).
// Columns come from shipyard (libraries, projects, binaries, outputs); inside a column the
// nodes sit in one box per folder, collapsible; an arrow runs from what is used to its user.
(function () {
  "use strict";
  var BIG = 30;          // a folder with more nodes starts collapsed; search shows only matches
  var ROWS = 40;         // rows of nodes in a folder's box before it wraps into another column
  var EDGE_BUDGET = 1500; // more edges than this: only those of the selected node are drawn
  var NODE_H = 26, GAP = 6, PAD = 10, HEAD = 22, COL_GAP = 90;
  var data = JSON.parse(document.getElementById("graph-data").textContent);
  var nodes = data.nodes.map(function (n, i) {
    return { i: i, id: n[0], kind: n[1], label: n[2], group: n[3], detail: n[4], state: n[5],
             reasons: n[6], col: n[7], uses: [], users: [], x: 0, y: 0, el: null };
  });
  var edges = data.edges.map(function (e) {
    var edge = { s: nodes[e[0]], t: nodes[e[1]], kind: e[2], label: e[3], hot: !!e[4] };
    edge.s.uses.push(edge); edge.t.users.push(edge);
    return edge;
  });
  var clusters = [], byKey = {};
  nodes.forEach(function (n) {
    var key = n.col + "\u0000" + n.group;
    var c = byKey[key];
    if (!c) { c = byKey[key] = { col: n.col, group: n.group, nodes: [], collapsed: false }; clusters.push(c); }
    c.nodes.push(n); n.cluster = c;
  });
  clusters.forEach(function (c) { c.collapsed = c.nodes.length > BIG; });
  var query = "", selected = null, scale = 1;
  var svg = document.getElementById("graph");
  var NS = svg.namespaceURI;  // the SVG namespace, from the page's own <svg>
  var status = document.getElementById("status");
  var info = document.getElementById("info");

  function el(name, attrs, parent) {
    var e = document.createElementNS(NS, name);
    for (var k in attrs) { e.setAttribute(k, attrs[k]); }
    if (parent) { parent.appendChild(e); }
    return e;
  }
  function matches(n) {
    return query !== "" && (n.label.toLowerCase().indexOf(query) >= 0 || n.id.toLowerCase().indexOf(query) >= 0);
  }
  function shown(c) {  // the nodes of a cluster drawn now
    if (query !== "" && c.nodes.length > BIG) { return c.nodes.filter(matches); }
    return c.nodes;
  }
  function isOpen(c) { return !c.collapsed || (query !== "" && c.nodes.some(matches)); }

  function layout() {
    var widths = {}, cols = [];
    nodes.forEach(function (n) {
      var w = Math.min(280, 24 + 7 * Math.max(n.label.length, Math.min(n.detail.length, 40) * 0.85));
      widths[n.col] = Math.max(widths[n.col] || 150, w);
      if (cols.indexOf(n.col) < 0) { cols.push(n.col); }
    });
    cols.sort(function (a, b) { return a - b; });
    var x = 20, height = 0, colX = {};
    cols.forEach(function (col) {
      var y = 40, w = widths[col], colW = w + 2 * PAD;
      clusters.filter(function (c) { return c.col === col; }).forEach(function (c) {
        var list = isOpen(c) ? shown(c) : [];
        var sub = Math.max(1, Math.ceil(list.length / ROWS));
        var rows = Math.min(list.length, ROWS);
        c.x = x; c.y = y; c.w = sub * (w + GAP) - GAP + 2 * PAD;
        c.h = HEAD + PAD + rows * (NODE_H + GAP);
        c.open = isOpen(c);
        c.visible = list;
        list.forEach(function (n, k) {
          n.x = x + PAD + Math.floor(k / ROWS) * (w + GAP);
          n.y = y + HEAD + (k % ROWS) * (NODE_H + GAP);
          n.w = w;
        });
        colW = Math.max(colW, c.w);
        y += c.h + 14;
      });
      colX[col] = x;
      x += colW + COL_GAP;
      height = Math.max(height, y);
    });
    return { width: x, height: height + 20, colX: colX };
  }

  function anchor(n) {  // where a node's edges end: the node, or its collapsed folder's box
    var c = n.cluster;
    if (c.visible.indexOf(n) >= 0) { return { x: n.x, y: n.y + NODE_H / 2, w: n.w, col: n.col, key: n.id }; }
    if (query !== "" && c.open) { return null; }
    return { x: c.x, y: c.y + HEAD / 2, w: c.w, col: c.col, key: "cluster:" + c.col + c.group };
  }

  function draw() {
    var size = layout();
    svg.textContent = "";
    svg.setAttribute("width", size.width * scale);
    svg.setAttribute("height", size.height * scale);
    svg.setAttribute("viewBox", "0 0 " + size.width + " " + size.height);
    var heads = { 0: "libraries" };
    var names = data.columns;
    Object.keys(size.colX).forEach(function (col) {
      var t = el("text", { x: size.colX[col], y: 22, "class": "colhead" }, svg);
      t.textContent = names[col] || heads[col] || "";
    });
    var clusterLayer = el("g", { id: "clusters" }, svg);
    var edgeLayer = el("g", { id: "edges" }, svg);  // above the boxes, clicks pass through
    var focus = selected ? reach(selected) : null;
    clusters.forEach(function (c) {
      var g = el("g", { "class": "cluster" + (c.open ? "" : " collapsed"), "data-group": c.group }, clusterLayer);
      el("rect", { "class": "box", x: c.x, y: c.y, width: c.w, height: c.h }, g);
      var head = el("text", { "class": "head toggle", x: c.x + 8, y: c.y + 15 }, g);
      head.textContent = (c.open ? "\u25be " : "\u25b8 ") + (c.group === "." ? "(top)" : c.group + "/") + " (" + c.nodes.length + ")";
      var hit = el("rect", { x: c.x, y: c.y, width: c.w, height: HEAD, fill: "transparent", "class": "toggle" }, g);
      hit.addEventListener("click", function (ev) { ev.stopPropagation(); c.collapsed = c.open; draw(); });
      if (c.nodes.some(function (n) { return n.state; }) && !c.open) { g.classList.add("affected"); }
      c.visible.forEach(function (n) { drawNode(n, g, focus); });
    });
    drawEdges(edgeLayer, focus);
    report();
  }

  function drawNode(n, parent, focus) {
    var cls = "node k-" + n.kind + (n.state ? " " + n.state : "");
    if (matches(n)) { cls += " match"; } else if (query !== "") { cls += " dim"; }
    if (focus && !focus[n.id]) { cls += " dim"; }
    if (n === selected) { cls += " selected"; }
    var g = el("g", { "class": cls, "data-id": n.id, "data-kind": n.kind, "data-state": n.state }, parent);
    el("rect", { x: n.x, y: n.y, width: n.w, height: NODE_H }, g);
    var t = el("text", { x: n.x + 8, y: n.y + 12 }, g);
    t.textContent = n.label;
    if (n.detail) {
      var d = el("text", { x: n.x + 8, y: n.y + 23, "class": "detail" }, g);
      d.textContent = n.detail.length > 48 ? n.detail.slice(0, 47) + "\u2026" : n.detail;
    }
    var title = el("title", {}, g);
    title.textContent = n.label + " (" + n.kind + ")" + (n.detail ? "\n" + n.detail : "") +
      (n.reasons.length ? "\n" + n.reasons.join("\n") : "");
    g.addEventListener("click", function (ev) { ev.stopPropagation(); select(n); });
    n.el = g;
  }

  function drawEdges(layer, focus) {
    var seen = {}, list = [];
    edges.forEach(function (e) {
      if (focus && !(focus[e.s.id] && focus[e.t.id])) { return; }
      var a = anchor(e.s), b = anchor(e.t);
      if (!a || !b || a.key === b.key) { return; }
      var key = a.key + "\u0000" + b.key;
      if (seen[key]) { seen[key].hot = seen[key].hot || e.hot; return; }
      seen[key] = { a: a, b: b, kind: e.kind, hot: e.hot };
      list.push(seen[key]);
    });
    if (list.length > EDGE_BUDGET) {
      // Too many to read: the selected node's own edges, else those a change travels along.
      var own = list.filter(function (e) { return focus && (e.a.key === selected.id || e.b.key === selected.id); });
      var hot = list.filter(function (e) { return e.hot; });
      list = focus ? own : (hot.length <= EDGE_BUDGET ? hot : []);
      layer.setAttribute("data-hidden", "1");
    }
    list.forEach(function (e) {
      // From what is used (left) to its user (right); within a column, an arc on the right.
      var used = e.kind === "output" ? e.a : e.b, user = e.kind === "output" ? e.b : e.a, d;
      if (used.col === user.col) {
        var rx = Math.max(used.x + used.w, user.x + user.w), bend = 40 + Math.min(120, Math.abs(user.y - used.y) / 4);
        d = "M" + (used.x + used.w) + "," + used.y + " C" + (rx + bend) + "," + used.y + " " + (rx + bend) + "," + user.y + " " + (user.x + user.w) + "," + user.y;
      } else {
        var x1 = used.x + used.w, x2 = user.x, mid = (x1 + x2) / 2;
        d = "M" + x1 + "," + used.y + " C" + mid + "," + used.y + " " + mid + "," + user.y + " " + x2 + "," + user.y;
      }
      el("path", { d: d, "class": "edge e-" + e.kind + (e.hot ? " hot" : "") + (focus ? " lit" : ""), "marker-end": "url(#arrow)" }, layer);
    });
    var defs = el("defs", {}, svg);
    var marker = el("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 8, markerHeight: 8, markerUnits: "userSpaceOnUse", orient: "auto" }, defs);
    el("path", { d: "M0,0 L10,5 L0,10 z", fill: "#777" }, marker);
    svg.setAttribute("data-edges", String(list.length));
  }

  function reach(start) {  // what the node uses and what uses it, transitively
    var found = {};
    found[start.id] = true;
    [["uses", "t"], ["users", "s"]].forEach(function (way) {
      var todo = [start];
      while (todo.length) {
        var n = todo.pop();
        var next_ = n[way[0]];
        if (way[0] === "users") {  // a user's outputs are downstream too
          next_ = next_.concat(n.uses.filter(function (e) { return e.kind === "output"; }).map(function (e) {
            return { s: e.t };
          }));
        }
        next_.forEach(function (e) {
          var next = e[way[1]];
          if (!found[next.id]) { found[next.id] = true; todo.push(next); }
        });
      }
    });
    return found;
  }

  function select(n) {
    selected = n === selected ? null : n;
    if (selected && !isOpen(selected.cluster)) { selected.cluster.collapsed = false; }
    draw();
    showInfo(selected);
  }

  function li(list, text) { var item = document.createElement("li"); item.textContent = text; list.appendChild(item); }

  function showInfo(n) {
    info.textContent = "";
    if (!n) {
      var hint = document.createElement("p"); hint.className = "muted";
      hint.textContent = "Click a node to see what it uses and what uses it; click it again to clear.";
      info.appendChild(hint);
      if (data.since !== null) { summary(); }
      return;
    }
    var h = document.createElement("h2"); h.textContent = n.label; info.appendChild(h);
    var p = document.createElement("p"); p.className = "muted"; p.textContent = n.kind + (n.detail ? " \u00b7 " + n.detail : ""); info.appendChild(p);
    [["why", n.reasons], ["uses", n.uses.map(function (e) { return e.t.label + (e.label ? " [" + e.label + "]" : ""); })],
     ["used by", n.users.map(function (e) { return e.s.label; })]].forEach(function (part) {
      if (!part[1].length) { return; }
      var b = document.createElement("b"); b.textContent = part[0]; info.appendChild(b);
      var ul = document.createElement("ul"); info.appendChild(ul);
      part[1].forEach(function (text) { li(ul, text); });
    });
  }

  function summary() {  // with --since: what changed, and which binaries it affects
    [["changed since " + data.since, "changed"], ["affected binaries", "affected"]].forEach(function (part) {
      var found = nodes.filter(function (n) { return n.state === part[1] && (part[1] === "changed" || n.kind === "binary"); });
      var b = document.createElement("b"); b.textContent = part[0] + " (" + found.length + ")"; info.appendChild(b);
      var ul = document.createElement("ul"); ul.id = "summary-" + part[1]; info.appendChild(ul);
      found.slice(0, 50).forEach(function (n) { li(ul, n.label + ": " + n.reasons[0]); });
      if (found.length > 50) { li(ul, "and " + (found.length - 50) + " more"); }
    });
  }

  function report() {
    var hidden = svg.querySelector("#edges[data-hidden]") ? " \u00b7 many edges: click a node to see its own" : "";
    if (query === "") { status.textContent = nodes.length + " nodes, " + edges.length + " edges" + hidden; return; }
    var count = nodes.filter(matches).length;
    status.textContent = count + (count === 1 ? " match" : " matches") + " for \u201c" + query + "\u201d" + hidden;
  }

  document.getElementById("search").addEventListener("input", function (ev) {
    query = ev.target.value.trim().toLowerCase();
    draw();
  });
  document.getElementById("expand").addEventListener("click", function () { clusters.forEach(function (c) { c.collapsed = false; }); draw(); });
  document.getElementById("collapse").addEventListener("click", function () { clusters.forEach(function (c) { c.collapsed = true; }); draw(); });
  document.getElementById("zoom-in").addEventListener("click", function () { scale = Math.min(3, scale * 1.25); draw(); });
  document.getElementById("zoom-out").addEventListener("click", function () { scale = Math.max(0.2, scale / 1.25); draw(); });
  svg.addEventListener("click", function () { if (selected) { select(selected); } });
  draw();
  showInfo(null);
  document.body.setAttribute("data-ready", "1");
})();
