"""The benchmarks' one output format: aligned columns of ours beside the baseline."""

from __future__ import annotations

Line = tuple[str, str, str, str, str]
"""One row: label, ours, raw, ratio, goal."""


def table(title: str, lines: list[Line], note: str = "") -> None:
    """Print ``lines`` as aligned columns under a section header (and a note)."""
    rows = [("", "ours", "raw", "ratio", "goal"), *lines]
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    print(f"\n== {title}" + (f"\n   {note}" if note else ""))
    for row in rows:
        cells = [row[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)
        ]
        print("  " + " | ".join(cells).rstrip())
