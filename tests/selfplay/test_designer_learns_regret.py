"""The designer learns from hint regret, and from nothing else.

A `tiny` Qwen3 policy is the designer. Its design is one sampled token: `MenuTokenizer`
renders a token of the design band as the full reply (python block and <hint>) of one of four
menu environments, the token id modulo 4 picking which, and the engine stops on the reply's
"</hint>" as it would on a written design. The real parser reads the reply, the real sandbox
validates and plays the environment, and the real schedule, k delay, designer advantages and
Trainer turn the regret into the update of the sampled token. The agent is scripted: it says
the word its hint tells it to say, or "guess" without one, so every environment's hinted and
unhinted returns are known:

  item    answer  hint                      no hint  hint  regret
  vault   amber   Say amber.                      0     1      +1
  plain   guess   Take your time.                 1     1       0
  gate    stone   Say stone.                      0     1      +1
  trap    guess   Say stone.                      1     0      -1

Over the run the designer's probability of the high-regret items (vault and gate) must rise by
a clear margin. Each mutation breaks the signal at one place and must stop the rise: the regret's
sign flipped, the two arms' returns swapped, the rewards of a window trained on the designs
sampled one refresh later (the k delay off by one window), and the rewards shuffled among the
designs of one refresh.
"""

from __future__ import annotations

import dataclasses
import re

import jax
import numpy as np
import pytest
from flax import nnx

from spade_jax.engine.api import SamplingParams
from spade_jax.engine.conversation import SlotConversationEngine
from spade_jax.engine.fake import FakeEngine
from spade_jax.model import Qwen3, get_preset
from spade_jax.rl.config import RLConfig
from spade_jax.rl.trainer import CompiledSteps, Trainer
from spade_jax.sandbox.pool import SandboxPool
from spade_jax.selfplay import designer, designer_rewards
from spade_jax.selfplay import loop as loop_module
from spade_jax.selfplay.chat import ChatFormatter
from spade_jax.selfplay.config import SelfPlayConfig
from spade_jax.selfplay.loop import SelfPlayLoop
from spade_jax.selfplay.schedule import ScoredDesign
from spade_jax.tokenizer.sentencepiece_tokenizer import SentencePieceTokenizer, tiny_model_path

ACTIONS = ("amber", "guess", "stone")  # every word the scripted agent can say
SKILL = "deduction"


@dataclasses.dataclass(frozen=True)
class Item:
  name: str
  answer: str
  hint: str
  regret: float


MENU = (Item("vault", "amber", "Say amber.", 1.0), Item("plain", "guess", "Take your time.", 0.0),
        Item("gate", "stone", "Say stone.", 1.0), Item("trap", "guess", "Say stone.", -1.0))
HIGH = [i for i, item in enumerate(MENU) if item.regret > 0]  # the vault and the gate


def menu_source(item: Item) -> str:
  """A one-turn environment that pays 1 for `item.answer`; the instance number varies."""
  return f'''\
import random


class {item.name.title()}:
  max_turns = 1

  def reset(self, seed=None):
    self.n = random.Random(seed).randint(0, 10**6)
    return "Door {item.name} number " + str(self.n) + ". Say the password.", {{}}

  def step(self, action):
    won = str(action).strip() == "{item.answer}"
    return ("open" if won else "closed"), float(won), True, False, {{}}

  def oracle_actions(self):
    return ["{item.answer}"]
'''


def designer_prompt(tok) -> list[int]:
  """The designer's prompt, the same at every refresh (no corpus passage, no memory)."""
  request = designer.DesignRequest(0, SKILL, None, None)
  return designer.fitted_prompt(ChatFormatter(tok), request, "games", None, style="compact")


class MenuTokenizer(SentencePieceTokenizer):
  """The tiny tokenizer, except that a reply opening with a design-band token decodes as the
  full designer reply of menu item (token id % len(MENU)), whose "</hint>" stops the engine.
  The band is every id but the control tokens and the ids of the designer's prompt (so the
  item directions leave the prompt's hidden states alone) and of the scripted agent's replies
  (whose text stays as it is)."""

  def __init__(self):
    super().__init__(tiny_model_path())
    reserved = {self.token_to_id(t) for t in self.control_tokens}
    reserved.update(designer_prompt(self))
    for word in ACTIONS:
      reserved.update(self.encode(f"<action>{word}</action>"))
    self.band = np.array(sorted(set(range(self.vocab_size)) - reserved))
    self._in_band = frozenset(self.band.tolist())
    self.replies = [designer.format_designer_output(menu_source(i), i.hint) for i in MENU]

  def decode(self, ids) -> str:
    ids = [int(i) for i in ids]
    if ids and ids[0] in self._in_band:
      return self.replies[ids[0] % len(MENU)] + super().decode(ids[1:])
    return super().decode(ids)


_HINT = re.compile(r"Privileged hint for this environment:\n(.*?)<\|im_end\|>", re.S)


def scripted_agent(tok: MenuTokenizer):
  """reply_fn of the agent's FakeEngine: says the hint's word, or "guess" without a hint."""

  def reply(cid, history, params):
    hint = _HINT.search(tok.decode(history))
    said = re.search(r"Say (\w+)\.", hint.group(1)) if hint else None
    ids = tok.encode(f"<action>{said.group(1) if said else 'guess'}</action>") + [tok.eos_id]
    return ids, [-0.5] * len(ids)

  return reply


class RoleRouter:
  """The loop's engine: designer turns go to the model's engine, agent turns to the script."""

  def __init__(self, designer_engine, agent_engine):
    self.designer, self.agent = designer_engine, agent_engine

  def _engine(self, cid):
    return self.designer if cid[0] == "designer" else self.agent

  def submit(self, request):
    self._engine(request.conversation_id).submit(request)

  def poll(self):
    return [c for e in (self.designer, self.agent) if e.pending() for c in e.poll()]

  def pending(self):
    return self.designer.pending() + self.agent.pending()

  def release(self, cid):
    self._engine(cid).release(cid)

  def load_weights(self, params):
    self.designer.load_weights(params)
    self.agent.load_weights(params)


# 14 steps with k = 2: seven refreshes of eight one-token designs, six delayed designer updates
# and the last refresh's on the final step. Only the designer's rows carry a gradient: the
# scripted agent's returns are equal within every group, so its advantages are 0 (beta = 0).
# The learning rate keeps an update's move of the item probabilities small next to the run's,
# so that a few unlucky refreshes cannot carry a wrong item to the top.
STEPS, K, NUM_ENVS, GROUP = 14, 2, 8, 2
CACHE = 320  # the designer's prompt is 300 tokens
ITEM_SCALE = 0.5  # the item directions' length, against embedding rows of norm ~0.16
MARGIN = 0.3  # the rise of the high-regret items' probability that counts as learning
SETTINGS = SelfPlayConfig(
    skills=(SKILL,), seed=0, num_envs=NUM_ENVS, k=K, group_size=GROUP, categories_per_step=1,
    max_turns=1, designer_prompt="compact", use_corpus=False, use_memory=False,
    designer_sampling=SamplingParams(max_new_tokens=1, stop_strings=("</hint>",)),
    agent_sampling=SamplingParams(max_new_tokens=16), max_cache_len=CACHE)
RL = RLConfig(learning_rate=3e-4, bounds=SETTINGS.batch_bounds(STEPS))


@nnx.jit
def _next_token_probs(model, prompt_1xT):
  return jax.nn.softmax(model(prompt_1xT)[0, -1])  # [V]


def item_probs(model, tok: MenuTokenizer) -> np.ndarray:
  """The designer's probability of each menu item at its prompt: [len(MENU)]."""
  p_V = np.asarray(_next_token_probs(model, jax.numpy.asarray([designer_prompt(tok)])))
  p_band = p_V[tok.band]
  return np.array([p_band[tok.band % len(MENU) == i].sum() for i in range(len(MENU))])


def with_item_directions(model: Qwen3, tok: MenuTokenizer) -> Qwen3:
  """Adds one direction per menu item to its tokens' (tied) embedding rows, so that the item,
  not only the sampled token, is something the model can learn (related tokens share a
  direction in a pretrained model). No token of the prompt is in the band, so the start is
  near uniform over the items."""
  emb_VxD = np.array(model.embed.embedding[...])
  rng = np.random.default_rng(0)
  directions_MxD = np.linalg.qr(rng.normal(size=(emb_VxD.shape[1], len(MENU))))[0].T
  emb_VxD[tok.band] += ITEM_SCALE * directions_MxD[tok.band % len(MENU)]
  model.embed.embedding[...] = jax.numpy.asarray(emb_VxD)
  return model


def run(pool, compiled: CompiledSteps,
        mutation: str | None) -> tuple[list[float], list[list[int]]]:
  """The high-regret items' probability at every refresh and after the run; the items
  designed at each refresh ([len(MENU)] counts)."""
  tok = MenuTokenizer()
  model = with_item_directions(Qwen3(get_preset("tiny"), rngs=nnx.Rngs(0)), tok)
  trainer = Trainer(RL, model, seed=0, compiled=compiled)
  engine = RoleRouter(
      SlotConversationEngine(trainer.policy, num_slots=NUM_ENVS, max_cache_len=CACHE,
                             prefill_buckets=(CACHE,), decode_steps_per_poll=1,
                             detokenize=tok.decode),
      FakeEngine(scripted_agent(tok), num_slots=NUM_ENVS * GROUP * 2))
  loop = SelfPlayLoop(SETTINGS, engine=engine, pool=pool, tokenizer=tok, trainer=trainer,
                      corpus=None, seed_envs=[])
  curve, picks = [], []
  with pytest.MonkeyPatch.context() as mp:
    mutate(mp, mutation, loop)
    for t in range(1, STEPS + 1):
      if loop.schedule.is_refresh(t):
        curve.append(float(item_probs(model, tok)[HIGH].sum()))
      record = loop.step(final=t == STEPS)
      if record.refreshed:
        names = [e.source.split("class ", 1)[1].split(":", 1)[0].lower() for e in record.envs]
        picks.append([names.count(item.name) for item in MENU])
  curve.append(float(item_probs(model, tok)[HIGH].sum()))
  return curve, picks


def mutate(mp: pytest.MonkeyPatch, mutation: str | None, loop: SelfPlayLoop) -> None:
  """Breaks the designer's signal at one place (module docstring)."""
  if mutation == "sign":
    loop.reward_fn = lambda returns: -designer_rewards.hint_regret(returns)
  elif mutation == "arms":
    add_step = designer_rewards.ArmReturns.add_step
    mp.setattr(designer_rewards.ArmReturns, "add_step",
               lambda self, no_hint, hint: add_step(self, hint, no_hint))
  elif mutation in ("delay", "shuffle"):
    targets = loop_module.designer_targets
    rng = np.random.default_rng(0)

    def misattributed(scored, *args, **kwargs):
      if mutation == "delay":  # the closing window's rewards on the designs just sampled
        newest = {d.index: d for d in loop.schedule.pending}
        scored = [ScoredDesign(newest[s.design.index], s.reward) for s in scored
                  if s.design.index in newest]
      else:  # the valid designs' rewards permuted among them
        valid = [s for s in scored if s.valid]
        rewards = rng.permutation([s.reward for s in valid]).tolist()
        scored = [ScoredDesign(s.design, r) for s, r in zip(valid, rewards, strict=True)]
      return targets(scored, *args, **kwargs)

    mp.setattr(loop_module, "designer_targets", misattributed)


@pytest.fixture(scope="module")
def pool():
  with SandboxPool(num_workers=2) as p:
    yield p


@pytest.fixture(scope="module")
def compiled() -> CompiledSteps:
  """The five runs share one compiled train step."""
  return CompiledSteps()


# The clean run is `make test`'s; each mutation was checked once to stop the rise and runs again
# in `make test-slow` (about 25 s each).
@pytest.mark.parametrize("mutation", [None, *(pytest.param(m, marks=pytest.mark.slow)
                                               for m in ("sign", "arms", "delay", "shuffle"))])
def test_the_designer_learns_from_regret_and_nothing_else(pool, compiled, mutation):
  curve, picks = run(pool, compiled, mutation)
  print(f"mutation={mutation} p(high) {np.round(curve, 3).tolist()} items designed {picks}")
  rise = np.mean(curve[-2:]) - curve[0]
  # The clean run must raise the high-regret items' probability by MARGIN; no mutation may.
  assert (rise >= MARGIN) == (mutation is None), (mutation, rise, curve, picks)
