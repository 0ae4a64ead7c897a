#!/usr/bin/env python3
"""Checks that every link edge between the project's CMake targets matches an #include.

Usage: check_cmake_edges.py ROOT TARGETS_JSON

TARGETS_JSON is CMake's own view of the targets, written when the build is configured
(tests/docs/cmake_targets.cmake): for each target under common/, proto/, config/, daemon/ and
worker/, its sources and its link edges (LINK_LIBRARIES, INTERFACE_LINK_LIBRARIES).

Which target a header belongs to: the target that lists it among its sources, else the target
that builds the .cc of the same name beside it, else the targets with sources in its folder (a
header-only interface such as daemon/launcher/launcher.h). A target's files are its sources, the
headers only it owns, and the headers of its folder its sources include.

For each target T, with reach(T) the targets T links plus what they link PUBLIC (transitively),
and interface(T) what T links PUBLIC plus what those link PUBLIC:
  1. every project header a source of T includes belongs to T or to a target in reach(T);
  2. every project header a header of T includes belongs to T or to a target in interface(T)
     (T's users compile T's headers: T must link that target PUBLIC);
  3. every project target T links is needed: some file of T includes one of its headers;
  4. a project target T links PUBLIC is needed by T's headers (else the link is PRIVATE).
External targets (Boost, SQLite, CLI11, ...) and includes that are not files of the repository
(<...> and generated headers) are not checked. Files outside ROOT (generated sources) are skipped.

Prints one line per mismatch, naming the target, the file and line, the header and the edge, and
exits 1 if there is any; else prints how many edges and includes were checked and exits 0.
Standard library only.
"""

import json
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
HEADER_EXTS = (".h", ".hpp")
SOURCE_EXTS = (".cc", ".cpp", ".c")
LINK_ONLY = re.compile(r"^\$<LINK_ONLY:([^>]+)>$")


def read_includes(root, rel):
    """[(line number, repo-relative header)] of the project headers `rel` includes."""
    out = []
    with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            name = m.group(1)
            for candidate in (name, os.path.join(os.path.dirname(rel), name)):
                candidate = os.path.normpath(candidate)
                if os.path.isfile(os.path.join(root, candidate)):
                    out.append((number, candidate))
                    break
    return out


def main(argv):
    if len(argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    root = os.path.realpath(argv[1])
    with open(argv[2], encoding="utf-8") as f:
        targets = json.load(f)

    # Sources (repo-relative, inside ROOT) and link edges of each target.
    sources = {}
    links = {}  # target -> {linked target: "PUBLIC" | "PRIVATE"}
    for name, t in targets.items():
        files = []
        for s in t["SOURCES"]:
            path = s if os.path.isabs(s) else os.path.join(t["source_dir"], s)
            path = os.path.realpath(path)
            if path.startswith(root + os.sep):
                files.append(os.path.relpath(path, root))
        sources[name] = files
        edges = {}
        interface = t["INTERFACE_LINK_LIBRARIES"]
        direct = interface if t["type"] == "INTERFACE_LIBRARY" else t["LINK_LIBRARIES"]
        public = {x for x in interface if not LINK_ONLY.match(x)}
        for x in direct:
            edges[x] = "PUBLIC" if x in public else "PRIVATE"
        for x in public:  # INTERFACE-only edges
            edges.setdefault(x, "PUBLIC")
        links[name] = {x: v for x, v in edges.items() if x in targets}

    # Who owns each header.
    by_file = {}
    by_dir = {}
    for name, files in sources.items():
        for f in files:
            by_file.setdefault(f, set()).add(name)
            by_dir.setdefault(os.path.dirname(f), set()).add(name)

    owner_cache = {}

    def owners(header):
        if header not in owner_cache:
            found = by_file.get(header)
            if not found:
                stem = os.path.splitext(header)[0]
                for ext in SOURCE_EXTS:
                    if stem + ext in by_file:
                        found = by_file[stem + ext]
                        break
            if not found:
                found = by_dir.get(os.path.dirname(header), set())
            owner_cache[header] = found
        return owner_cache[header]

    include_cache = {}

    def includes(rel):
        if rel not in include_cache:
            include_cache[rel] = read_includes(root, rel)
        return include_cache[rel]

    def public_closure(name, seen=None):
        seen = set() if seen is None else seen
        for x, visibility in links[name].items():
            if visibility == "PUBLIC" and x not in seen:
                seen.add(x)
                public_closure(x, seen)
        return seen

    errors = []
    checked_edges = 0
    checked_includes = 0
    for name in sorted(targets):
        if not sources[name]:
            continue
        # The target's files: its sources, the headers only it owns, and the headers it owns
        # together with other targets of its folder that its files include.
        files = set(sources[name])
        pending = list(files)
        while pending:
            f = pending.pop()
            for _, h in includes(f):
                if h not in files and name in owners(h):
                    files.add(h)
                    pending.append(h)
        for d in {os.path.dirname(f) for f in sources[name]}:
            for entry in sorted(os.listdir(os.path.join(root, d))):
                h = os.path.join(d, entry)
                if h.endswith(HEADER_EXTS) and owners(h) == {name} and h not in files:
                    files.add(h)
                    pending.append(h)
        while pending:  # includes of the headers added above
            f = pending.pop()
            for _, h in includes(f):
                if h not in files and name in owners(h):
                    files.add(h)
                    pending.append(h)

        reach = {name}
        for x in links[name]:
            reach.add(x)
            reach |= public_closure(x)
        interface = {name} | public_closure(name)

        used = {}  # linked target -> files whose includes need it
        used_by_headers = set()
        for f in sorted(files):
            is_header = f.endswith(HEADER_EXTS)
            for line, h in includes(f):
                who = owners(h)
                checked_includes += 1
                if not who:
                    errors.append(f"{name}: {f}:{line}: includes {h}, which no target owns")
                    continue
                for x in who:
                    if x in links[name]:
                        used.setdefault(x, f)
                        if is_header:
                            used_by_headers.add(x)
                if name in who:
                    continue
                allowed = interface if is_header else reach
                if not who & allowed:
                    owner = " or ".join(sorted(who))
                    if is_header and who & reach:
                        errors.append(
                            f"{name}: {f}:{line}: header includes {h} ({owner}), but {name} "
                            f"reaches {owner} only through a PRIVATE link: its users compile this "
                            "header too (link it PUBLIC)")
                    else:
                        errors.append(f"{name}: {f}:{line}: includes {h} ({owner}), but {name} "
                                      f"does not link {owner}")
        for x, visibility in sorted(links[name].items()):
            checked_edges += 1
            if x not in used:
                errors.append(f"{name}: links {x} ({visibility}), but no file of {name} "
                              f"includes a header of {x}")
            elif visibility == "PUBLIC" and x not in used_by_headers:
                errors.append(f"{name}: links {x} PUBLIC, but only its sources include {x}'s "
                              f"headers (e.g. {used[x]}): link it PRIVATE")

    for e in errors:
        print(e)
    if errors:
        print(f"{len(errors)} CMake edge(s) do not match an #include")
        return 1
    print(f"{checked_edges} link edges and {checked_includes} includes of {len(targets)} targets "
          "match")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
