"""SPADE's rollout workload: slot engine vs transformers `generate` turn by turn.

    .venv/bin/python bench/rollout.py [--preset bench-40m] [--num-slots 56] [--sandbox-ms 0]

Workload (seeded): 48 multi-turn episodes (a 64-96-token task prompt, 4-6 turns, 16-48 new
tokens a turn, a 20-60-token observation appended after every turn but the last) plus 8
designer requests (64-96-token prompt, 400 new tokens). Sampling at temperature 1, no
top-k/top-p, no stop tokens, so every reply has exactly its budget of tokens on both sides.
  * ours: the designer requests, then every episode, are submitted to one
    SlotConversationEngine (more requests than slots: the rest queue); the driver submits an
    episode's next turn as soon as its reply comes back.
  * baseline: what a user would otherwise write: per turn, one transformers `generate` over
    all live episodes (left-padded whole conversations, re-read each turn, max_new_tokens =
    the largest live budget, replies truncated to their budgets), then one `generate` for
    the designer requests.
Our engine's prefill buckets (32, 64, 96, 128) and its decode blocks of 8 steps per poll are
sized to these turns (20-61-token observation chunks, 64-96-token prompts, 16-48-token
replies: a slot whose reply ends mid-block idles until the block ends), as a user would size
them to their workload.
tok_s counts budgeted tokens only, identical on both sides. Our workload runs once to
compile (compile_s: its extra time), then twice with the engine's double buffering (ours_s,
the faster) and twice without (serial_s), alternately; `--sandbox-ms` adds host time after
every poll that returns turns, as the episodes' sandbox round does, which the overlap hides
behind the next decode block. Each mode's generate_s and sandbox_s split its run as a self-play
step's time/* does. Prints ONE JSON line.
torch and transformers (test requirements) are imported only by the baseline's functions, so
bench/accelerator.py imports this workload where only the runtime requirements are installed.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time

import jax
import numpy as np
from flax import nnx

from spade_jax.engine.conversation import SlotConversationEngine
from spade_jax.engine.workload import play
from spade_jax.model import Qwen3, get_preset
from spade_jax.model.hf_io import save_pretrained
from spade_jax.selfplay.timing import Timings


def make_workload(vocab: int, seed: int = 0):
  """-> (episodes, designer): episode = dict(prompt, budgets [turns], obs [turns - 1])."""
  rng = np.random.RandomState(seed)
  toks = lambda n: rng.randint(0, vocab, size=n).tolist()
  episodes = []
  for _ in range(48):
    turns = rng.randint(4, 7)
    episodes.append(dict(prompt=toks(rng.randint(64, 97)),
                         budgets=rng.randint(16, 49, size=turns).tolist(),
                         obs=[toks(rng.randint(20, 61)) for _ in range(turns - 1)]))
  designer = [dict(prompt=toks(rng.randint(64, 97)), budgets=[400], obs=[]) for _ in range(8)]
  return episodes, designer


def run_baseline(hf, episodes: list[dict], designer: list[dict]) -> int:
  """Turn-by-turn batched transformers generate, re-reading whole conversations."""
  convs = [list(e["prompt"]) for e in episodes]
  generated = 0
  for t in range(max(len(e["budgets"]) for e in episodes)):
    live = [i for i, e in enumerate(episodes) if len(e["budgets"]) > t]
    budgets = [episodes[i]["budgets"][t] for i in live]
    replies = _hf_generate(hf, [convs[i] for i in live], max(budgets))
    for i, b, r in zip(live, budgets, replies, strict=True):
      convs[i] += r[:b]
      generated += b
      if t + 1 < len(episodes[i]["budgets"]):
        convs[i] += episodes[i]["obs"][t]
  replies = _hf_generate(hf, [d["prompt"] for d in designer], 400)
  return generated + sum(len(r) for r in replies)


def _hf_generate(hf, prompts: list[list[int]], new: int) -> list[list[int]]:
  import torch  # a test requirement: only the baseline needs it
  width = max(len(p) for p in prompts)
  ids = torch.zeros((len(prompts), width), dtype=torch.long)
  mask = torch.zeros_like(ids)
  for row, p in enumerate(prompts):  # left padding
    ids[row, width - len(p):] = torch.tensor(p)
    mask[row, width - len(p):] = 1
  with torch.no_grad():
    out = hf.generate(ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=new,
                      do_sample=True, temperature=1.0, top_k=0, top_p=1.0, pad_token_id=0,
                      eos_token_id=None)
  return out[:, width:].tolist()


def _hf_reference(model: Qwen3, threads: int):
  """`model` saved and loaded back as a float32 transformers Qwen3 (the baseline)."""
  import torch  # test requirements: only the baseline needs them
  import transformers
  torch.set_num_threads(threads)
  torch.manual_seed(0)
  with tempfile.TemporaryDirectory() as d:
    save_pretrained(model, d)
    return transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--preset", default="bench-40m")
  parser.add_argument("--num-slots", type=int, default=56, help="56: every request has a slot")
  parser.add_argument("--decode-steps", type=int, default=8)
  parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
  parser.add_argument("--sandbox-ms", type=float, default=0.0,
                      help="host milliseconds after each poll that returns turns (slept)")
  args = parser.parse_args()
  cfg = get_preset(args.preset)
  model = Qwen3(cfg, rngs=nnx.Rngs(0))
  hf = _hf_reference(model, args.threads)
  episodes, designer = make_workload(cfg.vocab_size)
  jobs = designer + episodes  # SPADE's designer writes environments before agents play them

  runs = {}  # overlap -> [(seconds, time/* split)]
  for overlap in (True, True, False, True, False):  # the first run compiles
    engine = SlotConversationEngine(model, num_slots=args.num_slots, max_cache_len=1024,
                                    prefill_buckets=(32, 64, 96, 128),
                                    decode_steps_per_poll=args.decode_steps, overlap=overlap)
    timings = Timings()
    start = time.perf_counter()
    ours_tokens = play(engine, jobs, args.sandbox_ms / 1000, timings).tokens
    runs.setdefault(overlap, []).append((time.perf_counter() - start, timings.as_dict()))
    print(f"ours (overlap={overlap}): {runs[overlap][-1][0]:.1f}s", file=sys.stderr, flush=True)
  compile_run = runs[True].pop(0)[0]
  (ours_s, ours_split), (serial_s, serial_split) = (min(runs[o], key=lambda r: r[0])
                                                    for o in (True, False))
  split = lambda d: {k: round(v, 2) for k, v in sorted(d.items())}
  start = time.perf_counter()
  hf_tokens = run_baseline(hf, episodes, designer)
  hf_s = time.perf_counter() - start
  print(f"transformers: {hf_s:.1f}s", file=sys.stderr, flush=True)
  assert ours_tokens == hf_tokens, (ours_tokens, hf_tokens)
  print(json.dumps({
      "bench": "rollout", "preset": args.preset, "backend": jax.default_backend(),
      "dtype": "float32", "episodes": len(episodes), "designer_requests": len(designer),
      "num_slots": args.num_slots, "decode_steps_per_poll": args.decode_steps,
      "sandbox_ms": args.sandbox_ms, "tokens": ours_tokens, "ours_s": round(ours_s, 2),
      "serial_s": round(serial_s, 2), "hf_s": round(hf_s, 2),
      "ours_tok_s": round(ours_tokens / ours_s, 1), "hf_tok_s": round(hf_tokens / hf_s, 1),
      "ratio": round(hf_s / ours_s, 2), "compile_s": round(compile_run - ours_s, 2),
      "ours_time": split(ours_split), "serial_time": split(serial_split)}))


if __name__ == "__main__":
  main()
