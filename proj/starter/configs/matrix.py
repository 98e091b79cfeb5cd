r"""Issue 49's learning matrix: one skill category, probing (the `locate` and `peek`
minigames), from the starter warm-started on `peek`, the family whose hint carries a strategy.

    python -m proj.starter build --out runs/starter --without peek
    python -m proj.starter warm --from runs/starter --out runs/starter_peek
    python proj/starter/scripts/learning_runs.py --matrix --root runs/matrix

starter.py with these changes, and why:
* one category a refresh, probing: the hint can only pay where the agent can execute it
  (issue 49), and one category leaves every design of a refresh competing on the same games;
* the weights and tokenizer of runs/starter_peek (`warm`), the starter that plays peek's
  strategy when told and probes only sometimes when not;
* 120 steps (60 refreshes of k = 2), a checkpoint every 20;
* `minigames_heldout` (proj/starter/heldout.py: 280 items, 4 reset seeds a game) every 20
  steps, all items, hint and no hint, at the agent's temperature; the report reads its records
  (<workdir>/eval/step_N.jsonl) for the category's families.
The learning rate is the sweep's (learning_runs.py --sweep) and comes in as
--config.rl.learning_rate.
"""

import importlib.util
import pathlib

from ml_collections import ConfigDict

_STARTER = importlib.util.spec_from_file_location(
    "starter_config", pathlib.Path(__file__).with_name("starter.py"))
starter = importlib.util.module_from_spec(_STARTER)
_STARTER.loader.exec_module(starter)

WARM_DIR = str(pathlib.Path(starter.STARTER_DIR).with_name("starter_peek"))


def get_config() -> ConfigDict:
  c = starter.get_config()
  c.model.checkpoint = WARM_DIR  # python -m proj.starter warm --out runs/starter_peek
  c.tokenizer = WARM_DIR
  c.selfplay.skills = ("probing",)
  c.selfplay.categories_per_step = 1
  c.train.num_steps = 120
  c.train.checkpoint_every = 20
  c.eval.suites = ("minigames_heldout",)
  c.eval.every = 20
  c.eval.limit = 280  # every item of the split
  return c
