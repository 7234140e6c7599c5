#!/usr/bin/env python3
"""doxy_filter.py FILE - doxygen's INPUT_FILTER for disco's public headers.

The headers keep the house style of plain C comments (hwloc's and libuv's
headers read the same way): a comment above a declaration documents it, a
comment after a member on its line documents that member, and the first
comment of a file describes the file. Doxygen only reads `/**` and `/**<`
comments, so this filter rewrites, as doxygen reads each header (the file
itself is never changed):

  - the file's first comment            /*  ->  /** @file
  - a comment that starts its line      /*  ->  /**
  - a comment after code on its line    /*  ->  /**<
    (after a member that declares several names, `double a, b; /* x */`,
    the line becomes one member group, so that x documents each name)
  - `//` comments are left alone (never documentation);

outside function bodies only (a static inline function's own comments stay
plain, so they do not join its documentation). Line numbers are kept, so
doxygen's warnings point at the header's own lines. A new public function
written in the house style is documented without anything else to do, and
one without a comment fails `make docs` (WARN_IF_UNDOCUMENTED, WARN_AS_ERROR).
"""
import re
import sys


def several_names(code):
    """Whether a member declaration declares several names (a comma outside
    parentheses and brackets), as in `size_t nslices, ncmds;`."""
    level = 0
    for ch in code:
        if ch in "([":
            level += 1
        elif ch in ")]":
            level -= 1
        elif ch == "," and level == 0:
            return True
    return False


def filter_text(text):
    out = []
    i, n = 0, len(text)
    depth = []  # one entry per open brace: True when it opens a function body
    first = True
    line_has_code = False  # code before this point on the current line
    last_code = ""  # last non-space code character, to tell a body from a struct
    line_start = 0  # where the current line begins in out
    in_pp = False  # inside a preprocessor line (its comments stay as they are,
    pp_define = False  # but a one-line #define's trailing comment documents it)
    while i < n:
        c = text[i]
        if c == "\n":
            # a continued preprocessor line stays a preprocessor line
            in_pp = in_pp and i > 0 and text[i - 1] == "\\"
            pp_define = pp_define and in_pp
            line_has_code = False
            out.append(c)
            line_start = len(out)
            i += 1
            continue
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(text[i:j])
            i = j
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            body = text[i:j]
            in_function = any(depth)
            plain = not body.startswith("/**") and not body.startswith("/*!")
            if first and not in_function:
                body = "/** @file" + (body[2:] if plain else body[3:])
                first = False
            elif plain and not in_function and (not in_pp or (pp_define and line_has_code)):
                body = ("/**<" if line_has_code else "/**") + body[2:]
                code = "".join(out[line_start:])
                if line_has_code and depth and several_names(code):
                    # `double a, b; /* doc */`: one member group, so that
                    # the comment documents every name it declares
                    # (DISTRIBUTE_GROUP_DOC), not the last one only
                    lead = len(code) - len(code.lstrip())
                    out[line_start:] = [code[:lead] + "/**@{*/ " + code[lead:]]
                    body += " /**@}*/"
            out.append(body)
            i = j
            continue
        if c in "\"'":
            m = re.compile(r"%s(\\.|[^\\%s\n])*%s" % (c, c, c)).match(text, i)
            j = m.end() if m else i + 1
            out.append(text[i:j])
            i = j
            line_has_code = True
            last_code = c
            continue
        if c == "#" and not line_has_code:
            in_pp = True
            line_end = text.find("\n", i)
            line = text[i:n if line_end < 0 else line_end]
            pp_define = bool(re.match(r"#\s*define\b", line)) and not line.rstrip().endswith("\\")
        if c == "{":
            depth.append(last_code == ")" or any(depth))
        elif c == "}" and depth:
            depth.pop()
        if not c.isspace():
            line_has_code = True
            last_code = c
        out.append(c)
        i += 1
    return "".join(out)


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as f:
        sys.stdout.write(filter_text(f.read()))
