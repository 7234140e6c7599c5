"""The tensor-parallel torch decoder of tools/demo/tp_decoder.py (issue 34,
part 4): at 2 and 3 workers it generates the same tokens as the same model
unsharded in one process, with close logits, one command per token."""

import json
import os
import subprocess
import sys

import pytest

from conftest import CALL_TIMEOUT_MS, ROOT

torch = pytest.importorskip("torch")
sys.path.insert(0, str(ROOT / "tools" / "demo"))
import tp_decoder  # noqa: E402  (registers tp.* for worker 0 and forked workers)

# Small sizes that split evenly over 2 and 3 workers: 6 heads of 8.
SMALL = {"layers": 2, "heads": 6, "d_model": 48, "vocab": 64}


@pytest.mark.parametrize("workers", [2, 3])
def test_tokens_equal_single_process(workers):
    """Greedy tokens identical to the unsharded run; logits within atol;
    every token was one call_sync_all (the trace's command count)."""
    r = tp_decoder.run(workers=workers, tokens=16, call_timeout_ms=CALL_TIMEOUT_MS, **SMALL)
    assert len(r["tokens"]) == 16
    assert r["tokens"] == r["reference_tokens"]
    assert r["max_logit_diff"] <= r["atol"] == 1e-4
    assert r["commands_per_token"] == 1.0
    assert r["workers"] == workers and r["device"] == "cpu"


def test_a_shard_alone_differs():
    """The check has teeth: one worker's shard without the allreduce gives
    other logits than the whole model (so a missing or wrong reduce, or a
    wrong slice, cannot pass as equal)."""
    cfg = dict(SMALL, d_ff=4 * SMALL["d_model"], max_len=8)
    w = tp_decoder.make_weights(cfg, 0)
    toks = torch.tensor([1, 2, 3])
    with torch.no_grad():
        full = tp_decoder.forward(w, tp_decoder.new_cache(cfg, 6, "cpu"), toks, 0, cfg,
                                  lambda x: x)
        part = tp_decoder.forward(tp_decoder.shard(w, cfg, 0, 2),
                                  tp_decoder.new_cache(cfg, 3, "cpu"), toks, 0, cfg,
                                  lambda x: x)
    assert (full - part).abs().max() > 1e-2


def test_cli_json(tmp_path):
    """The command `make demo` runs writes the figures issue 34 names."""
    out = tmp_path / "tp.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"), DISCO_QUIET="1")
    p = subprocess.run([sys.executable, str(ROOT / "tools" / "demo" / "tp_decoder.py"),
                        "--workers", "2", "--tokens", "8", "--heads", "6", "--d-model", "48",
                        "--vocab", "64", "--json", str(out)],
                       env=env, capture_output=True, text=True, timeout=50)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "tokens equal the single process's" in p.stdout
    r = json.loads(out.read_text())
    for key in ("tokens_per_s", "single_process_tokens_per_s", "commands_per_token",
                "workers", "device"):
        assert key in r, key
    assert r["tokens_per_s"] > 0 and r["single_process_tokens_per_s"] > 0
    assert r["commands_per_token"] == 1.0 and r["workers"] == 2 and r["device"] == "cpu"
