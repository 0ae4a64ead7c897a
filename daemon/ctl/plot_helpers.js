  // Drawing helpers shared by the HTML report (ctl/report_template.html) and the dashboard page
  // of triald's web server; each page includes this file inside its own function scope at build
  // time (ctl/embed_template.cmake, "@include" lines). Plain JS and SVG, no library: both pages
  // work offline and under a strict Content-Security-Policy. (The report counts every "h-t-t-p"
  // in its text as a URL: none may appear here but the SVG namespace.)
  var SVGNS = "http://www.w3.org/2000/svg";

  // Values as triald's JSON writes them: numbers, or "nan", "inf", "-inf" for the others.
  function num(v) {
    if (typeof v === "number") return v;
    if (v === "nan") return NaN;
    if (v === "inf") return Infinity;
    if (v === "-inf") return -Infinity;
    return null;
  }
  function finite(v) { return typeof v === "number" && isFinite(v); }
  function fmt(v) {
    if (v === null || v === undefined) return "";
    if (typeof v === "number") {
      if (!isFinite(v)) return String(v);
      if (v !== 0 && (Math.abs(v) >= 1e6 || Math.abs(v) < 1e-4)) return v.toExponential(3);
      return String(Number(v.toPrecision(6)));
    }
    if (typeof v === "string") return v;
    return JSON.stringify(v);
  }
  function svg(tag, attrs, parent) {
    var e = document.createElementNS(SVGNS, tag);
    for (var k in attrs) if (attrs[k] !== undefined) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function html(tag, text, parent, cls) {
    var e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = text;
    if (cls) e.className = cls;
    if (parent) parent.appendChild(e);
    return e;
  }
  function tip(el, text) { svg("title", {}, el).textContent = text; }
  function mix(c0, c1, f) {  // two "#rrggbb" colours, f in [0, 1]
    var a = parseInt(c0.slice(1), 16), b = parseInt(c1.slice(1), 16), out = "#";
    for (var s = 16; s >= 0; s -= 8) {
      var x = Math.round(((a >> s) & 255) * (1 - f) + ((b >> s) & 255) * f);
      out += (x < 16 ? "0" : "") + x.toString(16);
    }
    return out;
  }

  // A scale from a domain to a pixel range, linear or log10.
  function scale(d0, d1, r0, r1, log) {
    if (log) { d0 = Math.log10(d0); d1 = Math.log10(d1); }
    if (!(d1 > d0)) { d0 -= 0.5; d1 += 0.5; }
    var f = function (v) {
      var x = log ? Math.log10(v) : v;
      return r0 + (x - d0) / (d1 - d0) * (r1 - r0);
    };
    f.ticks = function () {
      if (log) {  // powers of ten, with 2x and 5x in between when they are few
        var decades = [], fine = [];
        for (var p = Math.floor(d0); p <= Math.ceil(d1); p++) {
          [1, 2, 5].forEach(function (k) {
            var v = k * Math.pow(10, p), lv = Math.log10(v);
            if (lv < d0 - 1e-9 || lv > d1 + 1e-9) return;
            fine.push(v);
            if (k === 1) decades.push(v);
          });
        }
        return decades.length >= 3 ? decades : fine;
      }
      var span = d1 - d0, step = Math.pow(10, Math.floor(Math.log10(span / 5)));
      if (span / step > 25) step *= 5; else if (span / step > 10) step *= 2;
      var ticks = [];
      for (var v = Math.ceil(d0 / step) * step; v <= d1 + step * 1e-9; v += step) {
        ticks.push(Math.abs(v) < step * 1e-9 ? 0 : v);
      }
      return ticks;
    };
    return f;
  }
  function extent(values) {
    var lo = Infinity, hi = -Infinity;
    values.forEach(function (v) { if (finite(v)) { lo = Math.min(lo, v); hi = Math.max(hi, v); } });
    if (lo === Infinity) return [0, 1];
    if (lo === hi) return [lo - (Math.abs(lo) || 1) * 0.1, hi + (Math.abs(hi) || 1) * 0.1];
    var pad = (hi - lo) * 0.05;
    return [lo - pad, hi + pad];
  }

  // A plot frame: axes with ticks and labels inside a width x height viewBox. o: x, y (domains),
  // xlog, ylog, xcats (categories on x), xfmt, yfmt (tick labels), band (a "no value" strip
  // under the axis), xlabel, ylabel, label (aria), width, height.
  function frame(parent, o) {
    var W = o.width || 1180, H = o.height || 360;
    var m = { l: 64, r: 16, t: 12, b: 44 + (o.band ? 28 : 0) };
    var root = svg("svg", { viewBox: "0 0 " + W + " " + H, role: "img",
                            "aria-label": o.label || "" }, parent);
    var x = o.xcats ? null : scale(o.x[0], o.x[1], m.l, W - m.r, o.xlog);
    var y = scale(o.y[0], o.y[1], H - m.b, m.t, o.ylog);
    var axis = svg("g", { "class": "axis" }, root);
    y.ticks().forEach(function (v) {
      var py = y(v);
      svg("line", { x1: m.l, x2: W - m.r, y1: py, y2: py, "class": "gridline" }, axis);
      svg("text", { x: m.l - 6, y: py + 4, "text-anchor": "end" }, axis).textContent = (o.yfmt || fmt)(v);
    });
    var bottom = H - m.b;
    if (o.xcats) {
      var n = o.xcats.length;
      x = function (i) { return m.l + (i + 0.5) / n * (W - m.l - m.r); };
      o.xcats.forEach(function (c, i) {
        svg("text", { x: x(i), y: H - m.b + 16 + (o.band ? 28 : 0), "text-anchor": "middle" },
            axis).textContent = fmt(c);
      });
    } else {
      x.ticks().forEach(function (v) {
        var px = x(v);
        svg("line", { x1: px, x2: px, y1: bottom, y2: bottom + 4 }, axis);
        svg("text", { x: px, y: H - m.b + 16 + (o.band ? 28 : 0), "text-anchor": "middle" },
            axis).textContent = (o.xfmt || fmt)(v);
      });
    }
    svg("line", { x1: m.l, x2: W - m.r, y1: bottom, y2: bottom }, axis);
    svg("line", { x1: m.l, x2: m.l, y1: m.t, y2: bottom }, axis);
    if (o.band) {
      svg("rect", { x: m.l, y: bottom + 6, width: W - m.l - m.r, height: 20, fill: "#fbeeee" }, axis);
      svg("text", { x: m.l - 6, y: bottom + 20, "text-anchor": "end" }, axis).textContent = "no value";
    }
    svg("text", { x: (m.l + W - m.r) / 2, y: H - 6, "text-anchor": "middle" }, axis).textContent = o.xlabel || "";
    svg("text", { x: 14, y: (m.t + bottom) / 2, "text-anchor": "middle",
                  transform: "rotate(-90 14 " + (m.t + bottom) / 2 + ")" }, axis).textContent = o.ylabel || "";
    return { root: root, x: x, y: y, bandY: bottom + 16, m: m, W: W, H: H };
  }
  function empty(parent, text) { html("p", text, parent, "empty"); }
  // An x mark centred at (cx, cy): a trial without a value, in a frame's band.
  function cross(parent, cx, cy, r, color, attrs) {
    var d = "M" + (cx - r) + " " + (cy - r) + "L" + (cx + r) + " " + (cy + r) +
            "M" + (cx - r) + " " + (cy + r) + "L" + (cx + r) + " " + (cy - r);
    attrs = attrs || {};
    attrs.d = d; attrs.stroke = color; attrs["stroke-width"] = 2; attrs.fill = "none";
    return svg("path", attrs, parent);
  }
  // Bytes in powers of 1024 as trialctl writes them: "512 B", "212.4 MiB" (FormatBytes).
  function bytesText(b) {
    if (b === null || b === undefined) return "";
    if (b < 1024) return Math.round(b) + " B";
    var units = "KMGTPE", x = b / 1024, u = 0;
    while (x >= 1023.95 && u < units.length - 1) { x /= 1024; u++; }
    return x.toFixed(1) + " " + units[u] + "iB";
  }
