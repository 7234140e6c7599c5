"""Python worker functions a spawned worker gets by importing this module
(ProcessSession(launch="spawn", imports=("spawn_funcs",))); the controller
imports it too, for worker 0 (test_worker_funcs.py)."""

import os

import disco


@disco.register_func("pyt.spawn.pid")
def _pid():
    return os.getpid()
