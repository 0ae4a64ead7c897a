#!/usr/bin/env python3
"""Checks every relative link in the project's Markdown files (README.md and the guides).

Usage: check_links.py ROOT [FILE.md ...]

Without FILE arguments, every *.md file under ROOT is checked, except in hidden folders, build
trees (build*/, or any folder holding a CMakeCache.txt), node_modules/ and __pycache__/.

A link is relative when it has no scheme (http:, mailto:, ...). For each one:
  - the file or folder it names must exist (relative to the linking file's folder; a path that
    starts with '/' is relative to ROOT, as GitHub reads it);
  - with a #fragment into a Markdown file (or an anchor-only link, into the linking file), a
    heading of that file must have that anchor as GitHub makes it: the text lowercased, anything
    but letters, digits, spaces, '-' and '_' removed, spaces turned into '-', and "-1", "-2", ...
    added to repeats; <a name="..."> and id="..." anchors count too.
Links inside fenced code blocks and inline code are not links and are ignored.

Prints one line per broken link (FILE:LINE: link TARGET: what is wrong) and exits 1 if there is
any, else prints how many links were checked and exits 0. Standard library only.
"""

import os
import re
import sys
import urllib.parse

SKIP_DIRS = {"node_modules", "__pycache__"}

# [text](target) or [text](target "title"); the text may hold one level of nested brackets
# (an image inside a link). Reference definitions: [label]: target.
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)"
                         r"(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^)]*\)))?\s*\)")
REFERENCE_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
HTML_ANCHOR = re.compile(r"<a\s[^>]*\b(?:name|id)\s*=\s*[\"']([^\"']+)[\"']", re.IGNORECASE)
HTML_ID = re.compile(r"\bid\s*=\s*[\"']([^\"']+)[\"']", re.IGNORECASE)
FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
ATX_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def markdown_files(root):
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(
            d for d in dirs
            if not d.startswith(".") and not d.startswith("build") and d not in SKIP_DIRS
            and not os.path.exists(os.path.join(folder, d, "CMakeCache.txt")))
        for name in sorted(files):
            if name.endswith(".md"):
                yield os.path.join(folder, name)


def strip_inline_code(line):
    """The line with every `code span` blanked out (same length, so columns stay)."""
    out = []
    i = 0
    while i < len(line):
        if line[i] == "`":
            run = len(line[i:]) - len(line[i:].lstrip("`"))
            ticks = line[i:i + run]
            end = line.find(ticks, i + run)
            while end != -1 and end + run < len(line) and line[end + run] == "`":
                end = line.find(ticks, end + run + 1)
            if end == -1:
                out.append(ticks)
                i += run
                continue
            out.append(" " * (end + run - i))
            i = end + run
        else:
            out.append(line[i])
            i += 1
    return "".join(out)


def prose_lines(text):
    """(line number, line) for every line outside fenced code blocks."""
    fence = None
    for number, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if fence is None:
            if m:
                fence = m.group(1)
                continue
            yield number, line
        elif m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) \
                and not line.strip()[len(m.group(1)):].strip():
            fence = None


def slug(heading):
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML tags
    text = text.replace("`", "").lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors(path, cache):
    if path in cache:
        return cache[path]
    with open(path, encoding="utf-8") as f:
        text = f.read()
    found = set()
    seen = {}
    previous = None
    for _, line in prose_lines(text):
        heading = None
        m = ATX_HEADING.match(line)
        if m:
            heading = m.group(2) or ""
        elif previous is not None and previous.strip() and re.match(r"^ {0,3}(=+|-+)\s*$", line) \
                and not previous.lstrip().startswith(("-", "*", "+", "|", ">")):
            heading = previous.strip()  # setext heading: the line above, underlined
        if heading is not None:
            base = slug(heading.strip())
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else "{}-{}".format(base, n))
        for pattern in (HTML_ANCHOR, HTML_ID):
            found.update(a for a in pattern.findall(line))
        previous = line
    cache[path] = found
    return found


def links(text):
    """(line number, target) for every link in prose."""
    for number, line in prose_lines(text):
        prose = strip_inline_code(line)
        for m in INLINE_LINK.finditer(prose):
            yield number, m.group(1)
        m = REFERENCE_DEF.match(prose)
        if m:
            yield number, m.group(1)


def check_file(root, path, cache):
    """Returns (links checked, list of problems)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    problems = []
    count = 0
    rel = os.path.relpath(path, root)
    for number, target in links(text):
        target = target.strip()
        if target.startswith("<") and target.endswith(">"):
            target = target[1:-1]
        if not target or SCHEME.match(target) or target.startswith("//"):
            continue
        count += 1
        where = "{}:{}: link {}".format(rel, number, target)
        file_part, _, fragment = target.partition("#")
        file_part = urllib.parse.unquote(file_part.split("?", 1)[0])
        if not file_part:
            dest = path
        elif file_part.startswith("/"):
            dest = os.path.join(root, file_part.lstrip("/"))
        else:
            dest = os.path.join(os.path.dirname(path), file_part)
        dest = os.path.normpath(dest)
        if not os.path.exists(dest):
            problems.append("{}: {} does not exist".format(where, os.path.relpath(dest, root)))
            continue
        if not fragment:
            continue
        if os.path.isdir(dest) or not dest.endswith(".md"):
            problems.append("{}: an anchor into {}, which is not a Markdown file".format(
                where, os.path.relpath(dest, root)))
            continue
        fragment = urllib.parse.unquote(fragment)
        if fragment not in anchors(dest, cache):
            problems.append("{}: no heading with the anchor #{} in {}".format(
                where, fragment, os.path.relpath(dest, root)))
    return count, problems


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    root = os.path.abspath(argv[1])
    files = [os.path.abspath(p) for p in argv[2:]] or list(markdown_files(root))
    if not files:
        print("check_links: no Markdown file under {}".format(root), file=sys.stderr)
        return 1
    cache = {}
    total = 0
    problems = []
    for path in files:
        count, found = check_file(root, path, cache)
        total += count
        problems += found
    for p in problems:
        print(p)
    if problems:
        print("check_links: {} broken link(s) of {} in {} file(s)".format(
            len(problems), total, len(files)))
        return 1
    print("check_links: {} relative links in {} file(s), all resolve".format(total, len(files)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
