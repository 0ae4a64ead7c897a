#!/usr/bin/python3
"""Prints what a PNG screenshot holds, for tests/integration/report_test.cc.

usage: png_stats.py FILE.png
prints: WIDTH HEIGHT DISTINCT_COLOURS NON_WHITE_FRACTION

Standard library only: the file is decoded here (zlib plus PNG's scanline filters), for 8-bit
RGB and RGBA images, the kinds Chromium writes.
"""

import struct
import sys
import zlib


def paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def main():
    data = open(sys.argv[1], "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        sys.exit("png_stats: %s is not a PNG file" % sys.argv[1])
    pos, idat = 8, b""
    width = height = None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            if depth != 8 or colour not in (2, 6):
                sys.exit("png_stats: unsupported PNG (depth %d, colour type %d)" % (depth, colour))
            bpp = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * bpp
    prev = bytearray(stride)
    colours, non_white = set(), 0
    for y in range(height):
        start = y * (stride + 1)
        ftype, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        if ftype == 2:  # Up, the commonest: no dependency along the row
            line = bytearray((x + b) & 255 for x, b in zip(line, prev))
        for i in range(stride if ftype in (1, 3, 4) else 0):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if ftype == 1:
                line[i] = (line[i] + a) & 255
            elif ftype == 2:
                line[i] = (line[i] + b) & 255
            elif ftype == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif ftype == 4:
                line[i] = (line[i] + paeth(a, b, c)) & 255
        for x in range(0, stride, bpp):
            rgb = bytes(line[x:x + 3])
            colours.add(rgb)
            if rgb != b"\xff\xff\xff":
                non_white += 1
        prev = line
    print(width, height, len(colours), "%.4f" % (non_white / float(width * height)))


if __name__ == "__main__":
    main()
