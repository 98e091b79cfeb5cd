r"""The starter setting cut to one skill for CI: a starter built in minutes that writes valid
designs, and two loop steps from it (proj/starter/tests/test_build.py).

    python -m proj.starter build --out runs/starter_ci --size ci \
        --config proj/starter/configs/starter_ci.py
    python launch/tpu_run.py --config proj/starter/configs/starter_ci.py \
        --workdir runs/starter_ci_loop \
        --config.model.checkpoint=runs/starter_ci --config.tokenizer=runs/starter_ci

starter.py with one skill, deduction: the build's environment sets keep that category
(the `guess` minigames and a deduction seed game's variant), so a small model learns one
family's edits in the build's few minutes, and the loop asks for that category and starts its
memory from its two library minigames. Passages are cut to 240 characters, so that a
fine-tuning example is about a thousand tokens. A step is 8 designs (a refresh of k = 1), G = 2
episodes an arm of 3 turns of 16 tokens, no evaluation, two decode sizes (fewer compiles). The
designer advantage is `two_level`: a starter built in minutes scores near zero in both arms, so
most valid designs have regret 0, and under `discard` a refresh whose valid designs all tie has
no advantage at all; two_level adds the validity contrast (valid against invalid designs of the
refresh), and regret differences among the valid ones still count in full.
"""

import importlib.util
import pathlib

from ml_collections import ConfigDict

_STARTER = importlib.util.spec_from_file_location(
    "starter_config", pathlib.Path(__file__).with_name("starter.py"))
starter = importlib.util.module_from_spec(_STARTER)
_STARTER.loader.exec_module(starter)


def get_config() -> ConfigDict:
  c = starter.get_config()
  c.model.preset = "starter-ci"  # the ci build's model (`--size ci`)
  c.selfplay.skills = ("deduction",)
  c.selfplay.categories_per_step = 1
  c.selfplay.num_envs = 8  # designs a refresh
  c.selfplay.k = 1
  c.selfplay.designer_advantage = "two_level"
  c.selfplay.group_size = 2
  c.selfplay.max_turns = 3
  c.corpus.max_chars = 240
  c.sampling.agent = {"max_new_tokens": 16, "temperature": 0.3, "top_p": 1.0, "top_k": 0}
  c.engine.num_slots = 16
  # A design's prompt and reply fit 1536 tokens and an episode of 3 turns far less: rows of
  # 2048, not the starter's 3072, are what the train step pads to (its bound).
  c.engine.max_cache_len = 2048
  c.engine.prefill_buckets = (256, 1024)
  # One slot count and one cache length below the full one (a design's prompt and reply fit
  # 1536): two loop steps are mostly compiling, and each size pair is compiled apart.
  c.engine.decode_widths = (16,)
  c.engine.decode_lengths = (1536,)
  c.eval.every = 0
  c.train.num_steps = 2
  c.train.checkpoint_every = 2
  return c
