"""Screenshot two pages at the same widths and compare them pixel by pixel.

    python benchmarks/same_page.py BEFORE.html AFTER.html [--widths 1400,1024] [--height 2400] [--out DIR]

For each width: both pages are screenshot with headless Chromium (page.screenshot), the PNGs are
decoded (a small PNG reader: 8-bit RGB/RGBA, no interlace, the stdlib only) and compared. Prints,
per width, how many pixels differ and the rows and columns they span; exits 1 if any differ.
Pages of two different runs differ where the page shows a clock or a run id; the same log
rendered by two versions of the code must not differ at all.
"""
from __future__ import annotations

import argparse
import struct
import sys
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kernloop import page  # noqa: E402


def _unfilter(rows: bytes, width: int, height: int, bpp: int) -> list[bytearray]:
    stride, out, prev = width * bpp, [], bytearray(width * bpp)
    for y in range(height):
        kind, line = rows[y * (stride + 1)], bytearray(rows[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + a) & 255
            elif kind == 2:
                line[i] = (line[i] + b) & 255
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        out.append(line)
        prev = line
    return out


def read_png(path: Path) -> tuple[int, int, list[bytearray]]:
    """(width, height, rows of bytes) of an 8-bit RGB or RGBA PNG."""
    data, pos, idat, head = Path(path).read_bytes(), 8, b"", None
    while pos < len(data):
        (n,), kind = struct.unpack(">I", data[pos:pos + 4]), data[pos + 4:pos + 8]
        body, pos = data[pos + 8:pos + 8 + n], pos + 12 + n
        if kind == b"IHDR":
            head = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
    width, height, depth, color, _, _, interlace = head
    if depth != 8 or color not in (2, 6) or interlace:
        raise ValueError(f"{path}: only 8-bit RGB/RGBA, non-interlaced PNGs (got depth {depth}, color {color})")
    return width, height, _unfilter(zlib.decompress(idat), width, height, 3 if color == 2 else 4)


def compare(a: Path, b: Path) -> dict:
    """Pixels that differ between two screenshots, and the box around them."""
    if Path(a).read_bytes() == Path(b).read_bytes():   # the same file: no need to decode it
        w, h = struct.unpack(">II", Path(a).read_bytes()[16:24])   # IHDR's width and height
        return {"size": (w, h), "differ": 0, "box": None, "rows": 0}
    (wa, ha, ra), (wb, hb, rb) = read_png(a), read_png(b)
    if (wa, ha) != (wb, hb):
        return {"size": ((wa, ha), (wb, hb)), "differ": None}
    bpp = len(ra[0]) // wa
    ys, xs, n = [], [], 0
    for y, (la, lb) in enumerate(zip(ra, rb)):
        if la == lb:
            continue
        cols = [x for x in range(wa) if la[x * bpp:(x + 1) * bpp] != lb[x * bpp:(x + 1) * bpp]]
        n, ys, xs = n + len(cols), ys + [y], xs + [cols[0], cols[-1]]
    box = (min(xs), min(ys), max(xs), max(ys)) if n else None
    return {"size": (wa, ha), "differ": n, "box": box, "rows": len(ys)}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--widths", default="1400,1024")
    ap.add_argument("--height", type=int, default=2400)
    ap.add_argument("--out", type=Path, default=Path("/tmp/same_page"))
    a = ap.parse_args(argv)
    same = True
    for w in (int(x) for x in a.widths.split(",")):
        shots = [page.screenshot(html, a.out / f"{tag}-{w}.png", width=w, height=a.height)
                 for tag, html in (("before", a.before), ("after", a.after))]
        r = compare(*shots)
        same = same and r["differ"] == 0
        print(f"{w} px: {r['size']}, {r['differ']} pixels differ"
              + (f" in {r['rows']} rows, box (x0, y0, x1, y1) = {r['box']}" if r.get("box") else "")
              + f" ({shots[0]} vs {shots[1]})")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
