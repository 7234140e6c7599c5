#!/usr/bin/env python3
"""doc_examples.py [--build DIR] [--list] [FILE.md...] - every example in
README.md and docs/*.md is built or run, so that a guide's example cannot rot.

Every fenced code block must be tagged by an HTML comment on the line just
before it (invisible on GitHub and in the doxygen pages), and an untagged
block fails the test:

  <!-- test: KIND [key=value | key="value with spaces" | flag]... -->

KIND says how the block is checked:
  c-program     a whole C program: compiled with -std=c11 -Wall -Wextra
                -Werror against build/libdisco.so and run in a temporary
                folder (env="K=V ..." sets variables); it must exit 0.
                expect="..." : its stdout, exactly (\\n for a newline);
                stderr-has="..." : its stderr contains it;
                same-as=PATH : the block is PATH's text, PATH's leading
                comment left out (tests/readme_example.c);
                mpirun=N : run under `mpirun -np N --oversubscribe` (built
                only, saying so, where there is no mpirun);
                compile-only why="..." : built, not run (the why is printed).
  c-session     statements run with `disco_session_t *s` open (workers=N,
                default 2); after them every worker is synced and must
                report no error. Options as c-program.
  python-run    run by /usr/bin/python3 with PYTHONPATH=python from the
                repository root ("build/lib/libdisco_testlib.so" made
                absolute); expect="..." : the first lines of its stdout.
  sh-run        the lines run by bash -e from the repository root; each
                line must succeed. expect-has="..." : stdout contains it.
  sh-check      commands too long-running or needing another machine
                (`make bench`, mpirun, servers): each line is checked, not
                run: `make T...` -> each target T is a target of the
                Makefile; `sh SCRIPT` -> the script exists; a disco tool (build/bin/X, or after mpirun) ->
                it exists and every --option on the line is one that its
                --help (or `disco SUB --help`) names.
  covered-by    file=PATH : another test runs these lines; PATH must be
                named in the Makefile (run by `make test`) and hold every
                $(...) of the block verbatim.
  output-of     cmd="...": the block is (part of) what cmd prints. cmd is
                run; each line of the block, numbers masked, must appear in
                its output in order ("..." lines skip).
  text          not code: a listing, a layout, a sample of output that
                cannot be produced here (a live `disco top`). Not run; each
                is counted and named by --list.
Exit 0 when every block passes, 1 otherwise. Run by `make test`.
"""
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
TAG = re.compile(r"^<!--\s*test:\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^(```|~~~)\s*([\w+-]*)")
KINDS = {"c-program", "c-session", "python-run", "sh-run", "sh-check", "covered-by",
         "output-of", "text"}

HARNESS = r"""#include <disco/disco.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int doc_body(disco_session_t *s)
{
#line 1 "%(name)s"
%(body)s
    return 0;
}

int main(void)
{
    disco_session_config_t cfg = disco_session_config_default(%(workers)d);
    cfg.call_timeout_ms = 30000;
    disco_session_t *s;
    if (disco_session_open(&cfg, &s) != DISCO_OK) {
        fprintf(stderr, "open: %%s\n", disco_last_error());
        return 1;
    }
    int rc = doc_body(s);
    disco_status_t st = disco_session_sync_all(s);
    if (st != DISCO_OK) {
        fprintf(stderr, "after the example: %%s: %%s\n", disco_err_name(st), disco_last_error());
        rc = 1;
    }
    disco_session_close(s);
    return rc;
}
"""


def blocks(md):
    """(line, kind, options, lang, code) of each fenced block of md."""
    lines = md.read_text(encoding="utf-8").split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, fence, lang = i, m.group(1), m.group(2)
        j = i + 1
        while j < len(lines) and not lines[j].startswith(fence):
            j += 1
        code = "\n".join(lines[i + 1:j]) + "\n"
        tag = TAG.match(lines[i - 1]) if i > 0 else None
        if tag:
            words = shlex.split(tag.group(1))
            kind, opts = words[0], {}
            for w in words[1:]:
                k, eq, v = w.partition("=")
                opts[k] = v if eq else True
        else:
            kind, opts = None, {}
        yield start + 1, kind, opts, lang, code
        i = j + 1


class Checker:
    def __init__(self, build):
        self.build = pathlib.Path(build).resolve()
        self.tmp = pathlib.Path(tempfile.mkdtemp(prefix="disco-doc-"))
        self.n = 0
        self.text_blocks = []
        self.env = dict(os.environ, DISCO_QUIET="1", PYTHONPATH=str(ROOT / "python"))

    def run(self, argv, timeout=120, env=None, **kw):
        return subprocess.run(argv, cwd=str(ROOT), env=env or self.env, capture_output=True,
                              text=True, timeout=timeout, **kw)

    def env_with(self, opts):
        env = dict(self.env)
        for pair in str(opts.get("env", "")).split():
            k, _, v = pair.partition("=")
            env[k] = v
        return env

    def compile_run(self, where, source, opts):
        self.n += 1
        src = self.tmp / ("ex%d.c" % self.n)
        exe = self.tmp / ("ex%d" % self.n)
        src.write_text(source)
        cc = os.environ.get("CC", "cc")
        argv = [cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-D_GNU_SOURCE",
                "-I" + str(ROOT / "include"), "-o", str(exe), str(src),
                "-L" + str(self.build), "-l:libdisco.so", "-Wl,-rpath," + str(self.build)]
        p = self.run(argv)
        if p.returncode != 0:
            return "does not compile:\n" + p.stderr
        if opts.get("compile-only"):
            if not opts.get("why"):
                return "compile-only needs why=\"...\""
            return None
        argv = [str(exe)]
        if "mpirun" in opts:  # under mpirun, its ranks on this machine (as tests/test_node.c)
            if not shutil.which("mpirun"):
                print("doc_examples: %s built, not run: no mpirun here" % where)
                return None
            argv = ["mpirun", "--oversubscribe", "--mca", "orte_enable_recovery", "1",
                    "-np", str(opts["mpirun"])] + argv
            if os.geteuid() == 0:
                argv.insert(1, "--allow-run-as-root")
        # run in a folder of its own: files it writes land there
        p = subprocess.run(argv, cwd=str(self.tmp), env=self.env_with(opts),
                           capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            return "exit %d\nstdout:\n%s\nstderr:\n%s" % (p.returncode, p.stdout, p.stderr)
        if "stderr-has" in opts and opts["stderr-has"] not in p.stderr:
            return "stderr lacks %r:\n%s" % (opts["stderr-has"], p.stderr)
        if "expect" in opts:
            want = opts["expect"].replace("\\n", "\n")
            if p.stdout.rstrip("\n") != want:
                return "printed %r, the guide says %r" % (p.stdout, want)
        return None

    def c_program(self, where, code, opts):
        if "same-as" in opts:
            text = (ROOT / opts["same-as"]).read_text()
            body = re.sub(r"\A/\*.*?\*/\n", "", text, flags=re.S)
            if body != code:
                return "differs from %s (keep the two the same)" % opts["same-as"]
        return self.compile_run(where, code, opts)

    def c_session(self, where, code, opts):
        body = "\n".join("    " + l if l else l for l in code.rstrip("\n").split("\n"))
        src = HARNESS % {"name": where, "body": body, "workers": int(opts.get("workers", 2))}
        return self.compile_run(where, src, opts)

    def python_run(self, where, code, opts):
        code = code.replace("build/lib/libdisco_testlib.so",
                            str(self.build / "lib" / "libdisco_testlib.so"))
        py = os.environ.get("PYTHON", "/usr/bin/python3")
        p = self.run([py, "-c", code], env=self.env_with(opts))
        if p.returncode != 0:
            return "exit %d\nstderr:\n%s" % (p.returncode, p.stderr)
        if "expect" in opts:
            want = opts["expect"].replace("\\n", "\n").split("\n")
            got = p.stdout.split("\n")[:len(want)]
            if got != want:
                return "printed %r, the guide says %r" % (got, want)
        return None

    def sh_run(self, where, code, opts):
        p = self.run(["bash", "-e", "-o", "pipefail", "-c", code], env=self.env_with(opts),
                     timeout=int(opts.get("timeout", 120)))
        if p.returncode != 0:
            return "exit %d\nstdout:\n%s\nstderr:\n%s" % (p.returncode, p.stdout[-2000:],
                                                          p.stderr[-2000:])
        if "expect-has" in opts and opts["expect-has"] not in p.stdout:
            return "output lacks %r:\n%s" % (opts["expect-has"], p.stdout[-2000:])
        return None

    def make_targets(self):
        if not hasattr(self, "_targets"):
            names = set()
            for mk in [ROOT / "Makefile"] + sorted(ROOT.glob("mk/*.mk")):
                for line in mk.read_text().split("\n"):
                    m = re.match(r"^([A-Za-z0-9_. /$()-]+?)\s*::?(?!=)", line)
                    if m and not line.startswith("\t"):
                        names.update(m.group(1).split())
                    if line.startswith(".PHONY:"):
                        names.update(line.split(":", 1)[1].split())
            self._targets = names
        return self._targets

    def help_of(self, argv):
        p = self.run(argv + ["--help"], timeout=30)
        return p.stdout + p.stderr if p.returncode == 0 else None

    def sh_check(self, where, code, opts):
        errs = []
        for line in code.split("\n"):
            line = re.sub(r"\s+#.*$", "", line).strip()
            if not line or line.startswith("#"):
                continue
            words = shlex.split(line.replace("$(", "(").replace("\\", ""))
            while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
                words.pop(0)  # VAR=value before the command
            if not words:
                continue
            if words[0] == "make":
                for t in words[1:]:
                    if "=" not in t and not t.startswith("-") and t not in self.make_targets():
                        errs.append("%s: no make target %s" % (line, t))
                continue
            if words[0] == "mpirun":
                words = [w for w in words if w.startswith("build/bin/")] or words[-1:]
                k = next((i for i, w in enumerate(line.split()) if w == words[0]), 0)
                words = line.split()[k:]
            prog = words[0]
            if prog in ("sh", "bash", "python3", "/usr/bin/python3"):
                if len(words) < 2 or not (ROOT / words[1]).is_file():
                    errs.append("%s: no script %s" % (line, words[1:2]))
                continue
            if not prog.startswith("build/bin/"):
                errs.append("%s: sh-check knows make and build/bin/ tools only" % line)
                continue
            exe = self.build / "bin" / prog[len("build/bin/"):]
            if not exe.exists():
                errs.append("%s: no %s" % (line, exe))
                continue
            argv = [str(exe)]
            if exe.name == "disco" and len(words) > 1:
                argv.append(words[1])
            text = self.help_of(argv)
            if text is None:
                errs.append("%s: %s --help fails" % (line, " ".join(argv)))
                continue
            for w in words[1:]:
                opt = w.split("=")[0]
                if opt.startswith("--") and not re.search(re.escape(opt) + r"\b", text):
                    errs.append("%s: %s does not know %s" % (line, " ".join(argv), opt))
        return "\n".join(errs) or None

    def covered_by(self, where, code, opts):
        path = opts.get("file")
        if not path or not (ROOT / path).exists():
            return "covered-by needs file=<an existing file>"
        if path not in (ROOT / "Makefile").read_text():
            return "%s is not run by the Makefile" % path
        text = (ROOT / path).read_text()
        missing = [s for s in re.findall(r"\$\([^)]*\)", code) if s not in text]
        return ("%s lacks %s" % (path, ", ".join(missing))) if missing else None

    def output_of(self, where, code, opts):
        cmd = opts.get("cmd")
        if not cmd:
            return "output-of needs cmd=\"...\""
        p = self.run(["bash", "-c", cmd], env=self.env_with(opts))
        if p.returncode != 0:
            return "%s: exit %d\n%s" % (cmd, p.returncode, p.stderr[-2000:])

        def mask(s):
            s = re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "#", s)
            return re.sub(r"\s+", " ", s).strip()

        got = [mask(l) for l in (p.stdout + p.stderr).split("\n")]
        at = 0
        for line in code.rstrip("\n").split("\n"):
            if line.strip() in ("...", ""):
                continue
            want = mask(line)
            while at < len(got) and got[at] != want:
                at += 1
            if at == len(got):
                return "%s no longer prints (in this order): %s" % (cmd, line)
            at += 1
        return None

    def check(self, md):
        errs = []
        for line, kind, opts, lang, code in blocks(md):
            where = "%s:%d" % (md.relative_to(ROOT), line)
            if kind is None:
                errs.append("%s: an untagged %s block (tag it: <!-- test: KIND -->)" % (where, lang or "code"))
                continue
            if kind not in KINDS:
                errs.append("%s: unknown test kind %s" % (where, kind))
                continue
            if kind == "text":
                self.text_blocks.append(where)
                continue
            err = getattr(self, kind.replace("-", "_"))(where, code, opts)
            if err:
                errs.append("%s (%s): %s" % (where, kind, err))
            elif opts.get("compile-only"):
                print("doc_examples: %s built, not run: %s" % (where, opts["why"]))
        return errs


def main(argv):
    build = "build"
    if argv[:1] == ["--build"]:
        build, argv = argv[1], argv[2:]
    listing = argv[:1] == ["--list"]
    argv = argv[1:] if listing else argv
    files = [pathlib.Path(a).resolve() for a in argv] or \
        [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md"))
    c = Checker(build)
    errs, counts = [], {}
    for md in files:
        for _, kind, _, _, _ in blocks(md):
            counts[kind] = counts.get(kind, 0) + 1
        errs += c.check(md)
    for e in errs:
        print("doc_examples: " + e)
    if listing:
        for w in c.text_blocks:
            print("doc_examples: not code (text): " + w)
    summary = ", ".join("%d %s" % (n, k) for k, n in sorted(counts.items(), key=str))
    print("doc_examples: %d Markdown files; blocks: %s%s" %
          (len(files), summary, "" if not errs else "; %d FAILED" % len(errs)))
    return 1 if errs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
