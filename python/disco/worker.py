"""disco.worker - the spawned Python worker (ProcessSession(launch="spawn")).

The controller starts ``disco-py-worker`` (beside this file), which runs
:func:`main` in a fresh interpreter: it puts the controller's import path
first ($DISCO_PY_PATH), imports every module named in $DISCO_PY_IMPORTS
(comma-separated; what they register with disco.register_func is what this
worker has, besides the builtins and disco's own), then serves the session
until it shuts down. Nothing else of the controller exists here.
"""

import importlib
import os
import sys

from . import _core


def main(argv):
    """Serves one session as a spawned worker; returns the exit code."""
    path = [p for p in os.environ.get("DISCO_PY_PATH", "").split(os.pathsep) if p]
    sys.path[:0] = [p for p in path if p not in sys.path]
    for name in filter(None, os.environ.get("DISCO_PY_IMPORTS", "").split(",")):
        importlib.import_module(name)
    return _core.worker_main(list(argv))
