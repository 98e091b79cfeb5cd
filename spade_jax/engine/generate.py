"""`generate(model, prompt_ids, ...)`: batch sampling for users, and the command line.

    python -m spade_jax.engine.generate --checkpoint DIR (--prompt-ids 1,2,3 | --prompt TEXT) \
        --max-new-tokens N [--temperature T --top-p P --top-k K --seed S]

prints, as its last line, JSON {"tokens": [...], "logprobs": [...], "text": ...}. DIR is a
Hugging Face checkpoint directory or a checkpoint written by this project's trainer; "text"
is decoded with DIR's tokenizer.json when there is one, else null.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import sys
from collections.abc import Sequence

from flax import nnx

from spade_jax.engine import stopping
from spade_jax.engine.api import Request, SamplingParams
from spade_jax.engine.conversation import SlotConversationEngine
from spade_jax.model import load_model
from spade_jax.tokenizer import load_tokenizer

_BUCKETS = (16, 32, 64, 128, 256, 512)


@dataclasses.dataclass(frozen=True)
class GenerateResult:
  tokens: list[int]
  logprobs: list[float]  # under the distribution sampled from (see docs/engine.md)
  finish_reason: str  # "stop" | "length" | "cache_full" (only past max_position_embeddings)


def _round_up(n: int, multiple: int) -> int:
  return -(-n // multiple) * multiple


def generate(model: nnx.Module, prompt_ids: Sequence[Sequence[int]], max_new_tokens: int,
             temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0, seed: int = 0,
             stop: Sequence[int | str] | None = None, *,
             detokenize: stopping.Detokenize | None = None, max_slots: int = 32,
             decode_steps: int = 32, mesh=None, replica_chips: int = 0) -> list[GenerateResult]:
  """Samples a reply for every prompt with continuous batching; one result per prompt.

  Prompt i is sampled with seed `seed + i`. `stop` mixes stop token ids (int, kept as
  the reply's last token) and stop strings (str, need `detokenize`). temperature=0 is
  greedy. With a mesh, `replica_chips` groups its chips into replicas of the weights
  (EngineConfig.replica_chips). Shapes are rounded (cache length to 128, prompts to one
  power-of-two bucket) so repeated calls reuse compiled code.
  """
  prompts = [list(map(int, p)) for p in prompt_ids]
  if not prompts:
    raise ValueError("generate: prompt_ids is empty; pass a list of token-id lists")
  for i, p in enumerate(prompts):
    if not p:
      raise ValueError(f"generate: prompt {i} is empty; every prompt needs at least one token")
  if max_new_tokens <= 0:
    raise ValueError(f"generate: max_new_tokens must be > 0, got {max_new_tokens}")
  stop = list(stop or [])
  params = [SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                           top_k=top_k, seed=seed + i,
                           stop_token_ids=tuple(s for s in stop if isinstance(s, int)),
                           stop_strings=tuple(s for s in stop if isinstance(s, str)))
            for i in range(len(prompts))]
  longest = max(len(p) for p in prompts)
  max_len = model.cfg.max_position_embeddings
  if longest + 1 > max_len:
    raise ValueError(f"generate: prompt of {longest} tokens exceeds the model's "
                     f"max_position_embeddings={max_len}")
  cache_len = min(_round_up(longest + max_new_tokens, 128), max_len)
  bucket = next((b for b in _BUCKETS if b >= longest), _BUCKETS[-1])  # longer: chunked
  engine = SlotConversationEngine(
      model, num_slots=min(len(prompts), max_slots), max_cache_len=cache_len,
      prefill_buckets=(bucket,), decode_steps_per_poll=decode_steps, detokenize=detokenize,
      max_stop_ids=max(8, len(params[0].stop_token_ids)), mesh=mesh,
      replica_chips=replica_chips)
  for i, (p, sp) in enumerate(zip(prompts, params, strict=True)):
    engine.submit(Request(i, p, sp))
  results: dict[int, GenerateResult] = {}
  while engine.pending():
    for c in engine.poll():
      results[c.conversation_id] = GenerateResult(c.tokens, c.logprobs, c.finish_reason)
  return [results[i] for i in range(len(prompts))]


def load_checkpoint(path: str, dtype: str) -> nnx.Module:
  """A model from a Hugging Face directory or a trainer checkpoint directory."""
  if not pathlib.Path(path).is_dir():
    raise FileNotFoundError(f"--checkpoint {path!r}: no such directory (expected a Hugging Face "
                            "checkpoint with config.json, or a trainer checkpoint)")
  return load_model(path, dtype, None)


def _tokenizer(path: str):
  if not (pathlib.Path(path) / "tokenizer.json").is_file():
    return None
  return load_tokenizer(path)


def main(argv: Sequence[str] | None = None) -> None:
  parser = argparse.ArgumentParser(prog="python -m spade_jax.engine.generate",
                                   description=__doc__.split("\n\n")[0])
  parser.add_argument("--checkpoint", required=True, help="HF or trainer checkpoint directory")
  prompt = parser.add_mutually_exclusive_group(required=True)
  prompt.add_argument("--prompt-ids", help="comma-separated token ids, e.g. 1,2,3")
  prompt.add_argument("--prompt", help="text, encoded with the checkpoint's tokenizer.json")
  parser.add_argument("--max-new-tokens", type=int, required=True)
  parser.add_argument("--temperature", type=float, default=1.0)
  parser.add_argument("--top-p", type=float, default=1.0)
  parser.add_argument("--top-k", type=int, default=0)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--dtype", default="float32", help="parameter and compute dtype")
  args = parser.parse_args(argv)

  model = load_checkpoint(args.checkpoint, args.dtype)
  tok = _tokenizer(args.checkpoint)
  if args.prompt is not None:
    if tok is None:
      parser.error(f"--prompt needs {args.checkpoint}/tokenizer.json; use --prompt-ids")
    ids = tok.encode(args.prompt)
  else:
    try:
      ids = [int(x) for x in args.prompt_ids.split(",") if x.strip()]
    except ValueError:
      parser.error(f"--prompt-ids must be comma-separated integers, got {args.prompt_ids!r}")
  (result,) = generate(model, [ids], args.max_new_tokens, temperature=args.temperature,
                       top_p=args.top_p, top_k=args.top_k, seed=args.seed,
                       stop=list(tok.stop_ids) if tok is not None else None,
                       detokenize=tok.decode if tok is not None else None)
  text = tok.decode(result.tokens) if tok is not None else None
  print(json.dumps({"tokens": result.tokens, "logprobs": result.logprobs, "text": text}))
  sys.stdout.flush()


if __name__ == "__main__":
  main()
