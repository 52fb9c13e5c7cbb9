"""A table drawn like rich draws its default one (heavy head, light body), without rich.

``healer scan`` prints its summary with this when the summary goes somewhere other than a
terminal (a file, a pipe, a CI log): importing rich and laying a table out with it costs
~35 ms, more than scanning 50 MB. A terminal still gets rich's table (colours, its width).
Cells are plain text; a cell with newlines keeps them, a long one is wrapped at spaces (a
word longer than its column is cut across lines).
"""

from __future__ import annotations

from collections.abc import Sequence

MIN_WRAPPED = 10  # a wrapped column is never made narrower than this


def box_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[str]], *,
              right: frozenset[int] = frozenset(), wrap: frozenset[int] = frozenset(),
              width: int = 120) -> str:
    """The table as text (lines end with a newline). ``right``: columns aligned right;
    ``wrap``: columns that may be narrowed to fit ``width`` (the widest first)."""
    n = len(headers)
    widths = [max([len(headers[i])] + [max(map(len, str(r[i]).split("\n"))) for r in rows])
              for i in range(n)]
    over = sum(widths) + 3 * n + 1 - width
    while over > 0:
        narrowable = [i for i in wrap if widths[i] > MIN_WRAPPED]
        if not narrowable:
            break
        widest = max(narrowable, key=lambda i: widths[i])
        cut = min(over, widths[widest] - MIN_WRAPPED)
        widths[widest] -= cut
        over -= cut
    out = [title + "\n"] if title else []
    out.append("┏" + "┳".join("━" * (w + 2) for w in widths) + "┓\n")
    out += _row(headers, widths, frozenset(), "┃")
    out.append("┡" + "╇".join("━" * (w + 2) for w in widths) + "┩\n")
    for r in rows:
        out += _row([str(c) for c in r], widths, right, "│")
    out.append("└" + "┴".join("─" * (w + 2) for w in widths) + "┘\n")
    return "".join(out)


def _row(cells: Sequence[str], widths: list[int], right: frozenset[int], bar: str
         ) -> list[str]:
    wrapped = [_wrap(c, w) for c, w in zip(cells, widths, strict=True)]
    height = max(map(len, wrapped))
    lines = []
    for k in range(height):
        parts = []
        for i, (lines_of, w) in enumerate(zip(wrapped, widths, strict=True)):
            text = lines_of[k] if k < len(lines_of) else ""
            parts.append(text.rjust(w) if i in right else text.ljust(w))
        lines.append(bar + " " + f" {bar} ".join(parts) + " " + bar + "\n")
    return lines


def _wrap(text: str, width: int) -> list[str]:
    out: list[str] = []
    for para in text.split("\n"):
        line = ""
        for word in para.split(" "):
            while len(word) > width:  # a word longer than the column: cut across lines
                if line:
                    out.append(line)
                    line = ""
                out.append(word[:width])
                word = word[width:]
            if not line:
                line = word
            elif len(line) + 1 + len(word) <= width:
                line += " " + word
            else:
                out.append(line)
                line = word
        out.append(line)
    return out
