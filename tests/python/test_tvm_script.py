"""Done-when of issue 18: a TVM Disco user's script, with the import and
load_vm_module changed, runs (tvm_style_script.py, in a fresh interpreter,
as a user runs it: nothing of the suite's set up in it); and so does the
README's Python tour."""

import os
import subprocess
import sys

import disco
from conftest import ROOT, TESTLIB


def test_tvm_style_script():
    script = ROOT / "tests" / "python" / "tvm_style_script.py"
    env = dict(os.environ)
    # the package this suite tests, wherever it was imported from
    where = os.path.dirname(os.path.dirname(os.path.abspath(disco.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (where, env.get("PYTHONPATH")) if p)
    p = subprocess.run([sys.executable, str(script), TESTLIB], env=env, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, f"exit {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    assert "tvm-style script: ok" in p.stdout


# The README's Python tour runs as printed, with the output its comments
# say.
def test_readme_tour():
    text = (ROOT / "README.md").read_text()
    start = text.index("\n## Python\n")
    section = text[start:text.index("\n## ", start + 1)]
    code = section[section.index("```python\n") + 10:]
    code = code[:code.index("```")].replace("build/lib/libdisco_testlib.so", TESTLIB)
    env = dict(os.environ)
    where = os.path.dirname(os.path.dirname(os.path.abspath(disco.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (where, env.get("PYTHONPATH")) if p)
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=60, cwd=str(ROOT))
    assert p.returncode == 0, f"exit {p.returncode}\nstderr:\n{p.stderr}"
    assert p.stdout.split("\n")[:3] == ["[10, 11]", "28.0",
                                        "-16 worker 1: test.fail_on: boom (worker 1)"], p.stdout
