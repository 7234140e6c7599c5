#!/usr/bin/env python3
"""tp_decoder.py - a tensor-parallel decoder in PyTorch on disco workers.

A small GPT-style decoder (pre-norm blocks of attention and MLP) sharded the
Megatron way over N workers:
  - attention: the QKV projection is column-parallel (each worker owns
    heads/N whole heads and their slice of the KV cache), the output
    projection row-parallel, then one allreduce;
  - MLP: the first matrix column-parallel, the second row-parallel, then one
    allreduce.
Everything else (embeddings, norms, LM head) is replicated. Each token is ONE
command, `sess.call_sync_all(step)`: every worker runs every layer and the
workers reduce among themselves with disco.comm, with no controller round trip
per allreduce. Greedy decoding with a KV cache.

The same forward function runs unsharded in this process with a no-op
reduce (the single-process reference): the generated tokens must be
identical and the logits close (--atol). Weights come from --seed, no
downloads.

  PYTHONPATH=python python3 tools/demo/tp_decoder.py --workers 2 [--device cuda]
      [--json out.json]

On --device cuda each worker uses cuda:(rank % device_count). The session
is opened before this process touches CUDA: forked workers must not inherit
an initialized CUDA context (worker 0 is this process).
"""
import argparse
import json
import math
import sys
import time

import torch

import disco
from disco import comm


def make_weights(cfg, seed):
    """The full (unsharded) weights, deterministic from seed, on the CPU.
    Linear weights are [out_features, in_features], as in torch.nn.Linear."""
    g = torch.Generator().manual_seed(seed)
    d, f, v = cfg["d_model"], cfg["d_ff"], cfg["vocab"]

    def rnd(*shape, scale):
        return torch.randn(*shape, generator=g) * scale

    w = {"emb": rnd(v, d, scale=1.0), "pos": rnd(cfg["max_len"], d, scale=0.1),
         "norm_f": 1 + rnd(d, scale=0.1), "head": rnd(v, d, scale=1 / math.sqrt(d))}
    for i in range(cfg["layers"]):
        w[i] = {"norm1": 1 + rnd(d, scale=0.1), "norm2": 1 + rnd(d, scale=0.1),
                "wqkv": rnd(3, d, d, scale=1 / math.sqrt(d)),  # q, k, v stacked
                "wo": rnd(d, d, scale=1 / math.sqrt(d)),
                "w1": rnd(f, d, scale=1 / math.sqrt(d)),
                "w2": rnd(d, f, scale=1 / math.sqrt(f))}
    return w


def shard(w, cfg, rank, world):
    """This worker's part of w: rows of the column-parallel matrices (output
    features; whole heads, since a head is d_head consecutive rows) and
    columns of the row-parallel ones."""
    d, f = cfg["d_model"], cfg["d_ff"]
    dq, df = d // world, f // world  # this worker's attention rows (its heads), MLP rows
    out = dict(w)
    for i in range(cfg["layers"]):
        lw = w[i]
        out[i] = dict(lw, wqkv=lw["wqkv"][:, rank * dq:(rank + 1) * dq],  # column-parallel
                      wo=lw["wo"][:, rank * dq:(rank + 1) * dq],  # row-parallel
                      w1=lw["w1"][rank * df:(rank + 1) * df],  # column-parallel
                      w2=lw["w2"][:, rank * df:(rank + 1) * df])  # row-parallel
    return out


def to_device(w, dev):
    """w's tensors, compact, on dev."""
    return {k: to_device(v, dev) if isinstance(v, dict) else v.contiguous().to(dev)
            for k, v in w.items()}


def rms_norm(x, weight):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * weight


def forward(w, cache, tokens, pos, cfg, reduce):
    """Runs tokens (1-D, positions pos...) through the model, appending their
    keys and values to cache; returns the last position's logits. reduce(x)
    returns x summed over the workers (x itself on one process)."""
    t, dev = tokens.shape[0], tokens.device
    x = w["emb"][tokens] + w["pos"][pos:pos + t]  # [t, d]
    d_head = cfg["d_model"] // cfg["heads"]
    for i in range(cfg["layers"]):
        lw, (kc, vc) = w[i], cache[i]  # kc, vc: [my heads, max_len, d_head]
        h = rms_norm(x, lw["norm1"])
        q, k, v = (h @ lw["wqkv"][j].T for j in range(3))  # each [t, my heads * d_head]
        q, k, v = (a.view(t, -1, d_head).transpose(0, 1) for a in (q, k, v))
        kc[:, pos:pos + t], vc[:, pos:pos + t] = k, v
        s = q @ kc[:, :pos + t].transpose(1, 2) / math.sqrt(d_head)  # [heads, t, pos + t]
        causal = torch.ones(t, pos + t, dtype=torch.bool, device=dev).tril(pos)
        a = torch.softmax(s.masked_fill(~causal, float("-inf")), -1) @ vc[:, :pos + t]
        a = a.transpose(0, 1).reshape(t, -1) @ lw["wo"].T  # a partial sum: [t, d]
        x = x + reduce(a)  # allreduce #1 of the layer
        h = torch.nn.functional.gelu(rms_norm(x, lw["norm2"]) @ lw["w1"].T)
        x = x + reduce(h @ lw["w2"].T)  # allreduce #2 of the layer
    return rms_norm(x[-1], w["norm_f"]) @ w["head"].T  # [vocab]


def new_cache(cfg, heads, dev):
    shape = (heads, cfg["max_len"], cfg["d_model"] // cfg["heads"])
    return [(torch.zeros(shape, device=dev), torch.zeros(shape, device=dev))
            for _ in range(cfg["layers"])]


# --- On the workers: state kept between calls, in each worker's process ---
_state = {}


def _allreduce(x):
    """comm.allreduce of a torch tensor, in place. disco.comm stages a CPU
    tensor through disco's shared heap and a CUDA one through the worker's
    device arena (docs/worker-comm.md: device tensors disco did not
    allocate), ordered after torch's work on the tensor's stream."""
    return comm.allreduce(x.contiguous())


@disco.register_func("tp.init")
def tp_init(cfg_json, seed, device, prompt):
    """Every worker: its shard of the weights, an empty KV cache, the prompt."""
    torch.set_num_threads(1)  # workers outnumber cores: one thread each
    cfg = json.loads(cfg_json)
    rank, world = comm.rank(), comm.world_size()
    dev = torch.device("cpu")
    if device == "cuda":  # CUDA is initialized here, in each worker after the fork
        if torch.cuda.device_count() == 0:
            raise RuntimeError("--device cuda: torch sees no CUDA device")
        dev = torch.device("cuda:%d" % (rank % torch.cuda.device_count()))
    # Every worker makes the whole model and keeps its slices (a real one
    # would load only its shard).
    w = to_device(shard(make_weights(cfg, seed), cfg, rank, world), dev)
    _state.update(cfg=cfg, w=w, cache=new_cache(cfg, cfg["heads"] // world, dev), pos=0,
                  todo=torch.tensor(list(prompt), device=dev), tokens=[], logits=[])


@disco.register_func("tp.step")
def tp_step():
    """One token on every worker: the forward pass with 2 allreduces a layer,
    then greedy argmax (every worker gets the same logits, so the same token)."""
    st = _state
    with torch.no_grad():
        logits = forward(st["w"], st["cache"], st["todo"], st["pos"], st["cfg"], _allreduce)
    st["pos"] += st["todo"].shape[0]
    st["todo"] = logits.argmax().view(1)
    st["tokens"].append(int(st["todo"]))
    st["logits"].append(logits.cpu())


@disco.register_func("tp.fetch")
def tp_fetch(what):
    """The generated tokens or the logits of each step (worker 0's)."""
    if what == "tokens":
        return torch.tensor(_state["tokens"], dtype=torch.int64)
    return torch.stack(_state["logits"])


def reference(cfg, seed, device, prompt, steps):
    """The same model unsharded, in this process only: (tokens, logits, s)."""
    w = to_device(make_weights(cfg, seed), device)
    cache, pos, tokens, logits = new_cache(cfg, cfg["heads"], device), 0, [], []
    todo = torch.tensor(prompt, device=device)
    t0 = time.perf_counter()
    with torch.no_grad():
        for _ in range(steps):
            out = forward(w, cache, todo, pos, cfg, lambda x: x)
            pos += todo.shape[0]
            todo = out.argmax().view(1)
            tokens.append(int(todo))
            logits.append(out.cpu())
    return tokens, torch.stack(logits), time.perf_counter() - t0


def run(workers=2, device="cpu", tokens=32, seed=0, layers=2, heads=12, d_model=96, vocab=256,
        prompt=(1, 2, 3, 4), atol=1e-4, call_timeout_ms=60000):
    """Generates with disco and with the reference; returns the figures."""
    cfg = {"layers": layers, "heads": heads, "d_model": d_model, "d_ff": 4 * d_model,
           "vocab": vocab, "max_len": len(prompt) + tokens}
    if heads % workers or d_model % heads:
        raise ValueError("heads (%d) must split over %d workers and d_model (%d) over the heads"
                         % (heads, workers, d_model))
    threads = torch.get_num_threads()  # tp.init sets 1 in this process too (worker 0)
    # Open the session first: the workers are forked from this process.
    with disco.ProcessSession(workers, call_timeout_ms=call_timeout_ms) as sess:
        sess.call_sync_all(sess.get_global_func("tp.init"), json.dumps(cfg), seed, device,
                           tuple(prompt))
        step = sess.get_global_func("tp.step")
        before = sess.trace()["commands"]
        t0 = time.perf_counter()
        for _ in range(tokens):  # the prompt (prefill) is the first step
            sess.call_sync_all(step)  # ONE command: every worker, every layer
        secs = time.perf_counter() - t0
        commands = sess.trace()["commands"] - before
        fetch = sess.get_global_func("tp.fetch")
        got = fetch("tokens").debug_get_from_remote(0).numpy().tolist()
        got_logits = torch.from_numpy(fetch("logits").debug_get_from_remote(0).numpy().copy())
    torch.set_num_threads(threads)
    ref, ref_logits, ref_secs = reference(cfg, seed, device, list(prompt), tokens)
    diff = float((got_logits - ref_logits).abs().max())
    return {"tokens_per_s": tokens / secs, "single_process_tokens_per_s": tokens / ref_secs,
            "commands_per_token": commands / tokens, "workers": workers, "device": device,
            "tokens": got, "reference_tokens": ref, "tokens_match": got == ref,
            "max_logit_diff": diff, "atol": atol, "logits_close": diff <= atol,
            "single_process_threads": threads}


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--tokens", type=int, default=32, help="steps (the prompt is the first)")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--d-model", type=int, default=96)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--atol", type=float, default=1e-4, help="largest logit difference allowed")
    p.add_argument("--json", metavar="PATH")
    a = p.parse_args(argv)
    r = run(a.workers, a.device, a.tokens, a.seed, a.layers, a.heads, a.d_model, a.vocab,
            atol=a.atol)
    print("tp_decoder: %d workers on %s, %d tokens: disco %.1f tokens/s, "
          "single-process torch %.1f tokens/s (%d threads), %.2f commands/token"
          % (r["workers"], r["device"], len(r["tokens"]), r["tokens_per_s"],
             r["single_process_tokens_per_s"], r["single_process_threads"],
             r["commands_per_token"]))
    print("tp_decoder: tokens %s the single process's; largest logit difference %.2g (atol %g)"
          % ("equal" if r["tokens_match"] else "DIFFER from", r["max_logit_diff"], r["atol"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=1)
    return 0 if r["tokens_match"] and r["logits_close"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
