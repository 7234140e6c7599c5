#!/usr/bin/env python3
"""fix_html.py HTML_DIR - makes the guides' links work in doxygen's HTML.

The guides link to each other as GitHub reads them: `sessions.md#placement`,
`../README.md#python`. Doxygen 1.9.4 turns the pages into md_docs_*.html
(README.md into index.html), names their headings autotoc_mdN, and leaves
links with a #fragment as they were. So, in every generated page:
  - each heading of a guide also gets the anchor GitHub gives it
    (tests/doc_links.py's slug), beside doxygen's own;
  - each link to a Markdown file of the repository points at that file's
    page, with its fragment;
  - docs/plots (the images the guides show) is copied beside the pages.
Then no link to a .md file is left, and every link into a guide's page
names an anchor it has; this script fails (exit 1) naming any that does not.
"""
import html
import pathlib
import re
import shutil
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from doc_links import slug  # noqa: E402  (one slug rule for the check and the pages)

HEADING = re.compile(r'(<h([1-6])>)(<a class="anchor" id="autotoc_md\d+"></a>)(.*?)(</h\2>)', re.S)
MD_LINK = re.compile(r'href="([^":#]*\.md)(#[^"]*)?"')


def page_of(md):
    """Doxygen's page file for a Markdown file given relative to the root."""
    md = md.as_posix()
    if md == "README.md":
        return "index.html"
    return "md_" + re.sub(r"[/\-.]", "_", md[:-len(".md")]) + ".html"


def fix(out):
    bad = []
    pages = {page_of(p.relative_to(ROOT)): p for p in
             [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md"))}
    for f in sorted(out.glob("*.html")):
        text = f.read_text(encoding="utf-8")
        src = pages.get(f.name)

        def add_anchor(m):
            name = slug(html.unescape(re.sub(r"<[^>]*>", "", m.group(4))))
            return m.group(1) + m.group(3) + '<a class="anchor" id="%s"></a>' % name + \
                m.group(4) + m.group(5)

        def relink(m):
            base = src.parent if src else ROOT
            target = (base / m.group(1)).resolve()
            try:
                rel = target.relative_to(ROOT)
            except ValueError:
                return m.group(0)
            if page_of(rel) not in pages:
                return m.group(0)
            return 'href="%s%s"' % (page_of(rel), m.group(2) or "")

        new = HEADING.sub(add_anchor, text) if src else text
        new = MD_LINK.sub(relink, new)
        if new != text:
            f.write_text(new, encoding="utf-8")
        bad += ["%s: %s" % (f.name, m.group(0)) for m in MD_LINK.finditer(new)]
    # every link into a guide's page names an anchor that page has
    ids = {name: set(re.findall(r'id="([^"]+)"', (out / name).read_text(encoding="utf-8")))
           for name in pages if (out / name).exists()}
    for f in sorted(out.glob("*.html")):
        for page, frag in re.findall(r'href="([^"#/]+\.html)#([^"]+)"', f.read_text(encoding="utf-8")):
            if page in ids and frag not in ids[page]:
                bad.append("%s: %s#%s (no such anchor)" % (f.name, page, frag))
    shutil.copytree(ROOT / "docs" / "plots", out / "plots", dirs_exist_ok=True)
    return bad


if __name__ == "__main__":
    out = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "build/docs/html")
    bad = fix(out)
    for b in bad:
        print("fix_html: a broken link in the HTML: " + b)
    sys.exit(1 if bad else 0)
