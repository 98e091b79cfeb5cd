"""The projects beside the core (proj/): the core never imports them and carries nothing of
theirs; they add presets and memory libraries through the core's registries."""

import subprocess
import sys

import pytest

from spade_jax.model import config as model_config
from spade_jax.selfplay import seed_envs
from tests.layering import imports_of, under


def test_the_core_never_imports_a_project():
  found = [f"{path}: {name}" for path, names in imports_of("").items()
           for name in sorted(names) if under(name, ("proj",))]
  assert not found, found


def test_the_core_alone_has_no_starter_preset_library_or_suite():
  code = ("from spade_jax.model.config import PRESETS\n"
          "from spade_jax.selfplay.seed_envs import library_names\n"
          "from spade_jax.eval.suites import SUITES\n"
          "print(sorted(n for n in [*PRESETS, *SUITES] if 'starter' in n or 'minigame' in n),"
          " library_names())")
  done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                        check=True)
  assert done.stdout.strip() == "[] ('seeds', 'vowels')"


def test_a_preset_registers_once_and_a_taken_name_is_refused(monkeypatch):
  monkeypatch.setattr(model_config, "PRESETS", dict(model_config.PRESETS))
  small = model_config.get_preset("tiny", num_layers=1)
  model_config.register_preset("tiny-1", small)
  model_config.register_preset("tiny-1", small)  # the same again: a no-op
  assert model_config.get_preset("tiny-1") == small
  with pytest.raises(ValueError, match="'tiny' is taken"):
    model_config.register_preset("tiny", small)


def test_a_library_registers_for_its_settings(monkeypatch):
  from spade_jax.selfplay.config import SelfPlayConfig  # after the registry is patched

  monkeypatch.setattr(seed_envs, "_LIBRARIES", dict(seed_envs._LIBRARIES))
  library = seed_envs.SeedLibrary(lambda selfplay, split: [], settings=("games",))
  seed_envs.register_library("empty", library)
  seed_envs.register_library("empty", library)
  assert seed_envs.seed_entries(SelfPlayConfig(library="empty")) == []
  with pytest.raises(ValueError, match="'seeds' is taken"):
    seed_envs.register_library("seeds", library)
  with pytest.raises(ValueError, match=r"library='empty': expected a library of the setting "
                                       r"'tool_use' \(it holds games\)"):
    SelfPlayConfig(setting="tool_use", library="empty", skills=("lookup",),
                   categories_per_step=1)
