"""A self-contained HTML flame graph of a profile tree (inline SVG, a few lines of JS).

The page needs no network and no server: open the file. Boxes are laid out here,
in Python, so the picture is there even with scripts off; the inline script only
adds click-to-zoom (click the root to zoom back out). Roots are at the top (an
icicle), so deep stacks grow down the page. Boxes narrower than ``min_fraction``
of all samples are left out, with everything under them.
"""

from __future__ import annotations

import html
import os
import zlib

from ..core.profile import Tree

_WIDTH = 1200
_ROW = 18
_CHAR = 7  # approximate width of a character of the label font, in pixels

_SCRIPT = """
(function () {
  var svg = document.getElementById("flame");
  var boxes = Array.prototype.slice.call(svg.querySelectorAll("g[data-x]"));
  function show(x0, w0) {
    boxes.forEach(function (g) {
      var x = (parseFloat(g.dataset.x) - x0) / w0, w = parseFloat(g.dataset.w) / w0;
      var visible = x + w > 1e-9 && x < 1 - 1e-9;
      g.style.display = visible ? "" : "none";
      if (!visible) return;
      var px = Math.max(0, x) * WIDTH, pw = Math.min(1, x + w) * WIDTH - px;
      var rect = g.querySelector("rect"), text = g.querySelector("text");
      rect.setAttribute("x", px); rect.setAttribute("width", Math.max(pw - 1, 0.5));
      text.setAttribute("x", px + 3);
      var label = g.dataset.label, fit = Math.floor((pw - 6) / CHAR);
      var shown = label.length > fit ? label.slice(0, fit - 1) + "\\u2026" : label;
      text.textContent = fit >= 3 ? shown : "";
    });
  }
  boxes.forEach(function (g) {
    g.addEventListener("click", function () {
      show(parseFloat(g.dataset.x), parseFloat(g.dataset.w));
    });
  });
})();
"""


def _color(filename: str) -> str:
    hue = zlib.crc32(filename.encode()) % 60  # warm colours, one per file
    return f"hsl({hue + 5}, 75%, {60 + zlib.crc32(filename.encode()[::-1]) % 15}%)"


def _fit(label: str, pixels: float) -> str:
    n = int((pixels - 6) // _CHAR)
    if n < 3:
        return ""
    return label if len(label) <= n else label[: n - 1] + "\u2026"


def flame_graph_html(tree: Tree, title: str = "Profile", min_fraction: float = 0.001) -> str:
    """The page as a string."""
    total = tree["count"]
    parts: list[str] = []
    max_depth = 0
    if total:
        stack: list[tuple[int, float, Tree]] = [(0, 0.0, tree)]
        while stack:
            depth, x, node = stack.pop()
            max_depth = max(max_depth, depth)
            width = node["count"] / total
            d = node["description"]
            if depth == 0:
                label, tip, fill = "all", f"all: {total} samples", "hsl(0, 0%, 80%)"
            else:
                label = d["name"]
                where = f"{d['filename']}:{d['line_number']}"
                tip = f"{d['name']}  {where}\n{d['line']}\n{node['count']} samples ({width:.1%})"
                if node["own"]:
                    tip += f", {node['own']} on this line"
                fill = _color(d["filename"])
            px, pw = x * _WIDTH, width * _WIDTH
            parts.append(
                f'<g data-x="{x:.9f}" data-w="{width:.9f}" data-label="{html.escape(label)}">'
                f"<title>{html.escape(tip)}</title>"
                f'<rect x="{px:.2f}" y="{depth * _ROW}" width="{max(pw - 1, 0.5):.2f}" '
                f'height="{_ROW - 1}" fill="{fill}"/>'
                f'<text x="{px + 3:.2f}" y="{depth * _ROW + _ROW - 5}">'
                f"{html.escape(_fit(label, pw))}</text></g>"
            )
            cx = x
            children = sorted(
                node["children"].values(),
                key=lambda c: (c["description"]["name"], c["description"]["line_number"]),
            )
            for child in children:
                cw = child["count"] / total
                if cw >= min_fraction:
                    stack.append((depth + 1, cx, child))
                cx += cw
    height = (max_depth + 1) * _ROW
    body = "\n".join(parts) if parts else '<text x="4" y="14">No samples in this profile.</text>'
    script = _SCRIPT.replace("WIDTH", str(_WIDTH)).replace("CHAR", str(_CHAR))
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{html.escape(title)}</title>
<style>
body {{ font-family: sans-serif; margin: 16px; }}
svg text {{ font: 12px monospace; pointer-events: none; fill: #222; }}
svg g {{ cursor: pointer; }}
svg rect:hover {{ stroke: #000; stroke-width: 1; }}
</style>
</head>
<body>
<h2>{html.escape(title)}</h2>
<p>{total} samples. Hover a box for its file, line and share; click to zoom in, click
the top box to zoom out.</p>
<svg id="flame" width="{_WIDTH}" height="{height}" role="img" aria-label="flame graph">
{body}
</svg>
<script>{script}</script>
</body>
</html>
"""


def write_flame_graph(tree: Tree, filename: str | os.PathLike, title: str = "Profile") -> str:
    """Write the page to ``filename``; returns its path."""
    path = os.fspath(filename)
    with open(path, "w", encoding="utf-8") as f:
        f.write(flame_graph_html(tree, title))
    return path
