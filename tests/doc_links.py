#!/usr/bin/env python3
"""doc_links.py [ROOT] - every relative link in README.md and docs/ resolves.

For each Markdown file (README.md, docs/**/*.md), every link and image
`[text](target)` whose target is not a URL (http:, https:, mailto:) must
name a file or folder that exists, relative to the file that links it; a
`#fragment` must name a heading of the target (or of the file itself),
spelled as GitHub spells heading anchors (lower case, punctuation dropped,
spaces to hyphens). Links inside fenced code blocks and code spans are not
links. Exit 0 when all resolve, 1 with one line per broken link. Run by
`make test` (and `make docs`).
"""
import pathlib
import re
import sys

LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^()\s]+(?:\([^()]*\))?)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def prose_lines(text):
    """The lines of text outside fenced code blocks, with code spans blanked."""
    fenced = False
    for n, line in enumerate(text.split("\n"), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield n, re.sub(r"`[^`]*`", "``", line)


def slug(heading):
    """GitHub's anchor for a heading's text."""
    s = re.sub(r"`([^`]*)`", r"\1", heading.strip()).lower()
    s = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", s)  # a link's text only
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        seen, out = {}, set()
        for _, line in prose_lines(path.read_text(encoding="utf-8")):
            m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
            if m:
                a = slug(m.group(2))
                k = seen.get(a, 0)
                seen[a] = k + 1
                out.add(a if k == 0 else "%s-%d" % (a, k))
        # explicit anchors: <a name="x"></a> or <a id="x"></a>
        out |= set(re.findall(r"<a (?:name|id)=\"([^\"]+)\"", path.read_text(encoding="utf-8")))
        cache[path] = out
    return cache[path]


def check(root):
    files = [root / "README.md"] + sorted((root / "docs").rglob("*.md"))
    bad = []
    for md in files:
        if not md.exists():
            bad.append("%s: missing" % md.relative_to(root))
            continue
        for n, line in prose_lines(md.read_text(encoding="utf-8")):
            for target in LINK.findall(line):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                    continue  # a URL
                where = "%s:%d: %s" % (md.relative_to(root), n, target)
                path, _, frag = target.partition("#")
                dest = (md.parent / path).resolve() if path else md
                if not dest.exists():
                    bad.append(where + " (no such file)")
                elif frag and dest.suffix == ".md" and frag not in anchors(dest):
                    bad.append(where + " (no heading #%s in %s)" % (frag, dest.name))
    return files, bad


if __name__ == "__main__":
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    files, bad = check(root)
    for b in bad:
        print("doc_links: " + b)
    if bad:
        sys.exit(1)
    print("doc_links: every relative link of %d Markdown files resolves" % len(files))
