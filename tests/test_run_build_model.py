"""The composition root builds the policy with the config's static model settings."""

import pytest

from spade_jax.config_schema import base_config
from spade_jax.run import build_model


def test_build_model_applies_the_model_settings():
  config = base_config()
  config.model.attention_impl, config.model.remat = "xla", "dots"
  cfg = build_model(config, None).cfg
  assert (cfg.attention_impl, cfg.remat, cfg.compute_dtype) == ("xla", "dots", "float32")


def test_build_model_refuses_a_kernel_the_platform_lacks_before_building():
  config = base_config()
  config.model.attention_impl = "pallas_tpu"
  with pytest.raises(ValueError, match=r"config.model.attention_impl='pallas_tpu' needs a tpu"):
    build_model(config, None)
