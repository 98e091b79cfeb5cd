"""Our GRPO step against the same GRPO step written in PyTorch + transformers, as TRL does it.

  .venv/bin/python bench/train_step.py [--iters 3] [--rounds 1] [--presets tiny,bench-40m]
                                       [--precisions float32,bfloat16] [--lora-rank 16]

Both sides run one objective on one batch, built from one checkpoint: batch 8 x 512 (a
64-token prompt, then 448 policy tokens carrying loss), fp32 parameters and AdamW state,
the token-level clipped GRPO loss (clip 1 - 0.2 / 1 + 0.28, token mean) plus beta * k3 KL
to a frozen reference (beta = 0.05), global-norm gradient clipping and an AdamW step.
- ours: `Trainer.train_step` (the reference log-probs come from a frozen copy of the
  parameters, inside the jitted step);
- transformers: `TorchGRPOStep` below, the way TRL's GRPOTrainer computes it: the
  reference is a `copy.deepcopy` of the policy with `requires_grad_(False)`, run under
  `torch.no_grad()`; both forwards compute logits at the completion only (`logits_to_keep`);
  per-token log-probs, entropy (a metric, as on our side), the clipped ratio and
  k3 = exp(x) - x - 1 with x = ref - policy, then `clip_grad_norm_` and `torch.optim.AdamW`.
  The advantages (8 scalars, host-side) come from our `compute_advantages`.
One JSON line on stdout (each pair also goes to stderr as it finishes), per preset and precision:
- "jax_tok_s" / "torch_tok_s": tokens/s of the step with the reference forward, warm, and
  "ratio" = jax / torch, the headline; "jax_compile_s" separately;
- "jax_no_ref_tok_s" / "torch_no_ref_tok_s" / "ratio_no_ref": the same step with beta = 0
  (no reference model, no reference forward) on both sides;
- "jax_peak_rss_mb" / "torch_peak_rss_mb": each side in its own subprocess (ru_maxrss, read
  after the step with the reference), so the two do not share a high-water mark;
- "*_gflop_s": the matmul work each side sustains (dense presets; null for MoE): forward +
  backward is 3 forwards, and the reference forward a fourth. A forward is 2 FLOPs per
  matmul parameter per token, plus causal attention (2 x heads x head_dim x SEQ per layer:
  QK^T and PV over SEQ / 2 keys on average). The vocabulary matmul counts at the positions
  each side computes logits: ours the loss positions (SEQ - PROMPT), transformers one more.
`--lora-rank R` (R > 0) runs the same step with LoRA adapters of rank R (alpha 2R) on every
q/k/v/o and gate/up/down projection, only the adapters training: ours with
config.model.lora_rank (the reference is the base with the adapters off, model/lora.py),
transformers with peft's `get_peft_model(LoraConfig(...))` and the reference forward under
`model.disable_adapter()`, as TRL's GRPOTrainer does with a peft model (no reference copy).
Precision "float32" computes in fp32 on both sides. "bfloat16" is mixed precision on both
sides: our model with compute_dtype bfloat16 (matmuls read bf16 and accumulate in fp32),
transformers under `torch.autocast("cpu", dtype=torch.bfloat16)`; log-probs in fp32 on both.
Each figure is the best of `--iters` warm steps: on a shared machine the fastest step is
the one least disturbed by other load. `--rounds N` runs the two children alternately N
times and keeps each side's best, so a burst of outside load cannot land on one side
only. Goal (issue 5): ratio >= 1.0.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import json
import os
import pathlib
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BATCH, SEQ, PROMPT = 8, 512, 64
GROUP = 4  # rows per prompt group
PRECISIONS = ("float32", "bfloat16")
RL = dict(learning_rate=1e-5, beta=0.05, kl_estimator="k3")  # RLConfig fields; the rest default
INPUTS, RL_JSON = "bench_inputs.npz", "bench_rl.json"  # written beside the checkpoint


def _best_time(fn, iters: int) -> tuple[float, float]:
  """(first call seconds, fastest of `iters` further calls)."""
  t = time.perf_counter()
  fn()
  first = time.perf_counter() - t
  times = []
  for _ in range(iters):
    t = time.perf_counter()
    fn()
    times.append(time.perf_counter() - t)
  return first, min(times)


def _peak_rss_mb() -> float:
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def write_inputs(directory: str, vocab: int, rl: dict, *, batch: int = BATCH, seq: int = SEQ,
                 prompt: int = PROMPT) -> None:
  """The batch and RLConfig fields both children read: tokens [B, T], a loss mask on
  positions >= prompt, behaviour log-probs there, rewards, groups and our advantages."""
  from spade_jax.rl.advantages import compute_advantages
  from spade_jax.rl.config import RLConfig

  cfg = RLConfig.from_config(rl)
  rng = np.random.default_rng(0)
  tokens = rng.integers(0, vocab, (batch, seq)).astype(np.int32)
  loss_mask = np.zeros((batch, seq), np.float32)
  loss_mask[:, prompt:] = 1
  # Around a uniform policy's log-prob, so some ratios fall outside the clip range.
  behaviour = -np.log(vocab) + rng.normal(0.0, 0.3, (batch, seq))
  rewards = rng.random(batch).astype(np.float32)
  group_ids = np.arange(batch, dtype=np.int32) // GROUP
  roles = np.zeros(batch, np.int32)  # AGENT
  advantages, _ = compute_advantages(rewards, group_ids, roles, estimator=cfg.adv_estimator,
                                     bessel=cfg.adv_std_bessel, eps=cfg.adv_eps,
                                     role_weights={0: cfg.agent_weight})
  np.savez(os.path.join(directory, INPUTS), tokens=tokens, loss_mask=loss_mask,
           behaviour_logprobs=np.where(loss_mask > 0, behaviour, 0.0).astype(np.float32),
           rewards=rewards, group_ids=group_ids, roles=roles, advantages=advantages)
  with open(os.path.join(directory, RL_JSON), "w") as f:
    json.dump(dataclasses.asdict(cfg), f)


def read_inputs(directory: str) -> tuple[dict[str, np.ndarray], dict]:
  with np.load(os.path.join(directory, INPUTS)) as z:
    arrays = dict(z)
  with open(os.path.join(directory, RL_JSON)) as f:
    return arrays, json.load(f)


def child_jax(checkpoint: str, iters: int, precision: str, lora_rank: int = 0) -> dict:
  import jax

  from spade_jax.model.hf_io import from_pretrained
  from spade_jax.model.lora_io import with_adapters
  from spade_jax.rl.batch import TrainBatch
  from spade_jax.rl.config import RLConfig
  from spade_jax.rl.trainer import Trainer

  model = from_pretrained(checkpoint, dtype="float32", compute_dtype=precision)
  if lora_rank:
    model = with_adapters(model, model.cfg.replace(lora_rank=lora_rank,
                                                   lora_alpha=2.0 * lora_rank), seed=0)
  x, rl = read_inputs(checkpoint)
  batch = TrainBatch(tokens=x["tokens"], attention_mask=np.ones_like(x["tokens"]),
                     loss_mask=x["loss_mask"], behaviour_logprobs=x["behaviour_logprobs"],
                     rewards=x["rewards"], group_ids=x["group_ids"], roles=x["roles"])
  out = {}
  for beta, key in ((rl["beta"], "tok_s"), (0.0, "no_ref_tok_s")):
    trainer = Trainer(RLConfig(**{**rl, "beta": beta}), model)

    def step(trainer=trainer):
      trainer.train_step(batch)  # returns host floats: the update has finished
      jax.block_until_ready(jax.tree.leaves(trainer.params))

    first, seconds = _best_time(step, iters)
    out[key] = x["tokens"].size / seconds
    if beta:
      out.update(compile_s=first - seconds, peak_rss_mb=_peak_rss_mb())
  return out


def torch_token_logprobs(model, ids, completion: int):
  """(logp, entropy) [B, completion] of the last `completion` tokens of ids [B, T] given
  their prefixes; logits only there (`logits_to_keep`), log-softmax in fp32."""
  import torch

  logits = model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False,
                 logits_to_keep=completion + 1).logits[:, :-1].float()  # [B, C, V]
  logz = torch.logsumexp(logits, dim=-1)  # [B, C]
  logp = torch.gather(logits, -1, ids[:, -completion:, None])[..., 0] - logz
  with torch.no_grad():
    entropy = logz - (torch.softmax(logits, dim=-1) * logits).sum(-1)
  return logp, entropy


def torch_grpo_loss(logp, behaviour_logp, ref_logp, advantages, mask, *, beta: float,
                    clip_low: float, clip_high: float):
  """TRL's token-level GRPO loss over completion tokens [B, C]: (loss, mean k3 KL).

  -min(A r, A clip(r, 1 - clip_low, 1 + clip_high)) + beta * k3, r = exp(logp - behaviour),
  averaged over the mask's tokens (our "token_mean"). ref_logp None: no KL term.
  """
  import torch

  ratio = torch.exp(logp - behaviour_logp)
  adv = advantages[:, None]  # [B, 1]
  per_token = -torch.min(ratio * adv, torch.clamp(ratio, 1 - clip_low, 1 + clip_high) * adv)
  kl = torch.zeros_like(logp)
  if ref_logp is not None:
    x = ref_logp - logp
    kl = torch.exp(x) - x - 1
    per_token = per_token + beta * kl
  tokens = mask.sum().clamp(min=1.0)
  return (per_token * mask).sum() / tokens, (kl * mask).sum().detach() / tokens


def frozen_copy(model):
  """A separate, frozen copy of `model` (its own parameter tensors), as TRL's reference."""
  ref = copy.deepcopy(model)
  ref.requires_grad_(False)
  return ref.eval()


class TorchGRPOStep:
  """One GRPO update of a transformers model with the settings of an RLConfig dict."""

  def __init__(self, model, rl: dict, *, peft_model: bool = False):
    import torch

    supported = dict(kl_estimator="k3", loss_agg="token_mean", schedule="constant",
                     warmup_steps=0, agent_temperature=1.0, designer_temperature=1.0,
                     micro_batch_size=0, role_balance=False, tis_cap=0.0)
    wrong = {k: rl[k] for k, v in supported.items() if rl[k] != v}
    if wrong:
      raise ValueError(f"TorchGRPOStep supports only {supported}; got {wrong}")
    self.model, self.rl = model, rl
    # A peft model's reference is its base: the same model with the adapters disabled.
    self.ref = None if rl["beta"] == 0 else model if peft_model else frozen_copy(model)
    self.ref_context = model.disable_adapter if peft_model else contextlib.nullcontext
    params = [p for p in model.parameters() if p.requires_grad]
    # Weight decay on matrices only, as our optimiser (rl/optim.py).
    groups = [{"params": [p for p in params if p.ndim >= 2], "weight_decay": rl["weight_decay"]},
              {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]
    self.params = params
    self.opt = torch.optim.AdamW(groups, lr=rl["learning_rate"],
                                 betas=(rl["adam_b1"], rl["adam_b2"]), eps=rl["adam_eps"])

  def __call__(self, ids, behaviour_logp, advantages, mask, precision: str) -> dict[str, float]:
    """ids [B, T] int64; behaviour_logp, mask [B, C] and advantages [B] float32 tensors,
    C the completion length. Returns the step's loss, mean KL and mean entropy."""
    import torch

    completion = mask.shape[1]
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bfloat16" else (
        contextlib.nullcontext())
    with autocast:
      ref_logp = None
      if self.ref is not None:
        with torch.no_grad(), self.ref_context():
          ref_logp, _ = torch_token_logprobs(self.ref, ids, completion)
      logp, entropy = torch_token_logprobs(self.model, ids, completion)
      loss, kl = torch_grpo_loss(logp, behaviour_logp, ref_logp, advantages, mask,
                                 beta=self.rl["beta"], clip_low=self.rl["clip_low"],
                                 clip_high=self.rl["clip_high"])
    loss.backward()
    if self.rl["grad_clip_norm"] > 0:
      torch.nn.utils.clip_grad_norm_(self.params, self.rl["grad_clip_norm"])
    self.opt.step()
    self.opt.zero_grad(set_to_none=True)
    entropy = (entropy * mask).sum() / mask.sum().clamp(min=1.0)
    return {"loss": loss.item(), "kl": kl.item(), "entropy": entropy.item()}


def torch_step_inputs(x: dict[str, np.ndarray], prompt: int) -> tuple:
  """(ids, behaviour_logp, advantages, mask) tensors of the completion after `prompt`."""
  import torch

  return (torch.from_numpy(x["tokens"].astype(np.int64)),
          torch.from_numpy(x["behaviour_logprobs"][:, prompt:]),
          torch.from_numpy(x["advantages"]), torch.from_numpy(x["loss_mask"][:, prompt:]))


def child_torch(checkpoint: str, iters: int, precision: str, lora_rank: int = 0) -> dict:
  import torch
  import transformers

  torch.set_num_threads(os.cpu_count() or 1)
  model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
  if lora_rank:
    import peft

    model = peft.get_peft_model(model, peft.LoraConfig(
        r=lora_rank, lora_alpha=2 * lora_rank, lora_dropout=0.0, target_modules=[
            "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]))
  model.train()
  x, rl = read_inputs(checkpoint)
  inputs = torch_step_inputs(x, PROMPT)
  out = {}
  for beta, key in ((rl["beta"], "tok_s"), (0.0, "no_ref_tok_s")):
    step = TorchGRPOStep(model, {**rl, "beta": beta}, peft_model=bool(lora_rank))
    _, seconds = _best_time(lambda step=step: step(*inputs, precision), iters)
    out[key] = x["tokens"].size / seconds
    if beta:
      out["peak_rss_mb"] = _peak_rss_mb()
    del step  # frees the reference copy and the optimiser state before the next
  return out


def _run_child(kind: str, checkpoint: str, iters: int, precision: str,
               lora_rank: int = 0) -> dict:
  out = subprocess.run([sys.executable, __file__, "--child", kind, "--checkpoint", checkpoint,
                        "--iters", str(iters), "--precisions", precision,
                        "--lora-rank", str(lora_rank)],
                       capture_output=True, text=True, check=False, cwd=ROOT)
  if out.returncode:
    raise RuntimeError(f"{kind} child failed:\n{out.stderr[-3000:]}")
  return json.loads(out.stdout.strip().splitlines()[-1])


def _best(old: dict, new: dict) -> dict:
  """Merges two runs of a child: the higher throughputs and peak memory, the lower compile."""
  if not old:
    return new
  return {k: (min if k == "compile_s" else max)(old[k], new[k]) for k in new}


def _forward_flops_per_token(cfg, vocab_share: float) -> float | None:
  """Matmul FLOPs of one token's forward at length SEQ (see the module docstring), with
  logits at `vocab_share` of the positions."""
  if cfg.num_experts:
    return None
  d, q, kv = cfg.hidden_size, cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
  layer_params = 2 * d * q + 2 * d * kv + 3 * d * cfg.intermediate_size
  matmul_params = cfg.num_layers * layer_params + vocab_share * d * cfg.vocab_size
  return 2 * matmul_params + cfg.num_layers * 2 * q * SEQ


def _gflop_s(tok_s: float, forward_flops: float | None, forwards: int) -> float | None:
  """GFLOP/s at `tok_s` for a step of `forwards` forward-equivalents per token."""
  return None if forward_flops is None else round(tok_s * forwards * forward_flops / 1e9, 1)


def _compare(path: str, iters: int, rounds: int, precision: str,
             flops: tuple[float | None, float | None], lora_rank: int = 0) -> dict:
  """Both children at one precision, alternated `rounds` times; the figures of the pair."""
  jax_r, torch_r = {}, {}
  for _ in range(rounds):
    jax_r = _best(jax_r, _run_child("jax", path, iters, precision, lora_rank))
    torch_r = _best(torch_r, _run_child("torch", path, iters, precision, lora_rank))
  return {"jax_tok_s": round(jax_r["tok_s"], 1), "jax_compile_s": round(jax_r["compile_s"], 1),
          "jax_peak_rss_mb": round(jax_r["peak_rss_mb"]),
          "jax_no_ref_tok_s": round(jax_r["no_ref_tok_s"], 1),
          "torch_tok_s": round(torch_r["tok_s"], 1),
          "torch_no_ref_tok_s": round(torch_r["no_ref_tok_s"], 1),
          "torch_peak_rss_mb": round(torch_r["peak_rss_mb"]),
          "ratio": round(jax_r["tok_s"] / torch_r["tok_s"], 3),
          "ratio_no_ref": round(jax_r["no_ref_tok_s"] / torch_r["no_ref_tok_s"], 3),
          "jax_gflop_s": _gflop_s(jax_r["tok_s"], flops[0], 4),
          "jax_no_ref_gflop_s": _gflop_s(jax_r["no_ref_tok_s"], flops[0], 3),
          "torch_gflop_s": _gflop_s(torch_r["tok_s"], flops[1], 4),
          "torch_no_ref_gflop_s": _gflop_s(torch_r["no_ref_tok_s"], flops[1], 3)}


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument("--iters", type=int, default=3)
  parser.add_argument("--rounds", type=int, default=1)
  parser.add_argument("--presets", default="tiny,bench-40m")
  parser.add_argument("--precisions", default="float32,bfloat16")
  parser.add_argument("--child", choices=("jax", "torch"))
  parser.add_argument("--checkpoint")
  parser.add_argument("--lora-rank", type=int, default=0, help="0: full weights train")
  args = parser.parse_args()
  if args.child:
    fn = child_jax if args.child == "jax" else child_torch
    print(json.dumps(fn(args.checkpoint, args.iters, args.precisions, args.lora_rank)))
    return

  from flax import nnx

  from spade_jax.model import Qwen3, get_preset
  from spade_jax.model.hf_io import save_pretrained

  precisions = args.precisions.split(",")
  unknown = sorted(set(precisions) - set(PRECISIONS))
  if unknown:
    parser.error(f"--precisions {unknown}: expected names from {PRECISIONS}")
  result = {"batch": BATCH, "seq": SEQ, "param_dtype": "float32", "cpu_count": os.cpu_count(),
            "rounds": args.rounds, "lora_rank": args.lora_rank}
  with tempfile.TemporaryDirectory() as tmp:
    for name in args.presets.split(","):
      path = os.path.join(tmp, name)
      cfg = get_preset(name)
      save_pretrained(Qwen3(cfg, rngs=nnx.Rngs(0)), path)
      write_inputs(path, cfg.vocab_size, RL)
      flops = (_forward_flops_per_token(cfg, (SEQ - PROMPT) / SEQ),  # ours, transformers
               _forward_flops_per_token(cfg, (SEQ - PROMPT + 1) / SEQ))
      result[name] = {}
      for p in precisions:
        result[name][p] = _compare(path, args.iters, args.rounds, p, flops, args.lora_rank)
        print(json.dumps({name: {p: result[name][p]}}), file=sys.stderr, flush=True)  # progress
  print(json.dumps(result))


if __name__ == "__main__":
  main()
