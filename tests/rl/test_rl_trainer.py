"""Trainer: sharded == unsharded, bit-exact resume, corrupt-checkpoint fallback, load_model."""

import gc
import os
import warnings
import weakref

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from spade_jax.model import LOGICAL_RULES, Qwen3, get_preset, load_model, make_mesh
from spade_jax.model.attention_impl import emulated_kernels
from spade_jax.model.integrity import CheckpointIntegrityError
from spade_jax.rl.batch import AGENT, DESIGNER, TrainBatch
from spade_jax.rl.checkpoint import CheckpointManager
from spade_jax.rl.trainer import Trainer

RL = dict(learning_rate=3e-3, warmup_steps=1, schedule="cosine", total_steps=10, beta=0.05,
          kl_estimator="k3", micro_batch_size=4, weight_decay=0.01, grad_clip_norm=1.0,
          logprob_chunk=16)


@pytest.fixture(scope="module")
def initial():
  """The tiny model's initial (graphdef, state); every test builds fresh copies from it."""
  return nnx.split(Qwen3(get_preset("tiny"), rngs=nnx.Rngs(0)))


def _model(initial):
  graphdef, state = initial
  return nnx.merge(graphdef, jax.tree.map(lambda x: x.copy(), state))


def _batch(step, rows=8, length=28):
  """Agent episodes (two turns) and designer samples with their own groups."""
  rng = np.random.default_rng(100 + step)
  tokens = rng.integers(1, 1024, (rows, length)).astype(np.int32)
  attention = np.ones((rows, length), np.int32)
  attention[rows // 2:, 22:] = 0
  loss = np.zeros((rows, length), np.float32)
  loss[:, 5:9] = 1
  loss[: rows // 2, 12:18] = 1
  behaviour = np.where(loss > 0, -6.9 + rng.normal(0, 0.05, loss.shape), 0).astype(np.float32)
  roles = np.array([AGENT] * (rows // 2) + [DESIGNER] * (rows // 2), np.int32)
  return TrainBatch(tokens, attention, loss, behaviour, rng.random(rows).astype(np.float32),
                    np.arange(rows, dtype=np.int32) // 2, roles)


def _leaves(tree):
  return [np.asarray(x) for x in jax.tree.leaves(tree)]


def _train_alike(expected: Trainer, actual: Trainer, keys, *, metric_atol: float) -> dict:
  """Two steps of each on the same batches: metrics and parameters must agree."""
  for step in range(2):
    m_expected, m_actual = expected.train_step(_batch(step)), actual.train_step(_batch(step))
    for key in keys:
      np.testing.assert_allclose(m_actual[key], m_expected[key], rtol=2e-5, atol=metric_atol,
                                 err_msg=key)
  for a, b in zip(_leaves(expected.params), _leaves(actual.params), strict=True):
    np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
  return m_expected


def test_sharded_step_equals_unsharded(initial, compiled):
  """Adam's eps is raised so that the comparison is well conditioned: Adam is scale-invariant,
  so an element whose gradient is a cancelling sum carries the gradient's relative rounding
  error (the shardings reduce in different orders) into a full-size update. With eps 1e-8 one
  embedding element of 65,536 missed by 1.17e-6 on an AMD EPYC (1.13 x the tolerance); with
  1e-4 the worst element is at 0.16 x."""
  rl = dict(RL, adam_eps=1e-4)
  plain = Trainer(rl, _model(initial), compiled=compiled)
  mesh = make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
  sharded = Trainer(rl, _model(initial), mesh, compiled=compiled)
  assert any(len(x.sharding.device_set) == 8 and not x.sharding.is_fully_replicated
             for x in jax.tree.leaves(sharded.params))
  keys = ("loss", "kl", "entropy", "clip_fraction", "grad_norm", "logprob_gap_mean")
  m_plain = _train_alike(plain, sharded, keys, metric_atol=1e-6)
  assert m_plain["designer/num_rows"] == 4
  # The warmup's first rate is 0, so the second step's policy is still the reference (its KL
  # is 0 up to rounding); the third step's policy is one real update away from it.
  third_plain, third_sharded = plain.train_step(_batch(2)), sharded.train_step(_batch(2))
  assert third_plain["kl"] > 1e-6
  for key in keys:
    np.testing.assert_allclose(third_sharded[key], third_plain[key], rtol=2e-5, atol=1e-6,
                               err_msg=key)


def test_the_trainer_batch_follows_the_logical_batch_rule(initial, monkeypatch):
  """Rows split as LOGICAL_RULES["batch"] says, as the activations are: change the rule
  and the step's batch sharding and its row multiple follow."""
  mesh = make_mesh({"data": 2, "fsdp": 4})
  monkeypatch.setitem(LOGICAL_RULES, "batch", ("data",))
  # Its own compiled steps (no `compiled=`): nothing compiled under another rule is reused.
  trainer = Trainer(dict(RL, micro_batch_size=2), _model(initial), mesh)  # 2: data, not fsdp
  batch_shardings = trainer.compiled_step(_batch(0)).input_shardings[0][4]
  specs = {name: tuple(sh.spec)[:2] for name, sh in batch_shardings.items()}
  assert set(specs.values()) == {(None, "data")}, specs


# tis_cap 1.0: the batch's fake behaviour log-probs put the ratios on both sides of the cap.
@pytest.mark.parametrize("tis_cap", [pytest.param(0.0, marks=pytest.mark.slow), 1.0])
def test_gradient_accumulation_equals_one_full_batch(initial, tis_cap, compiled):
  accumulated = Trainer(dict(RL, tis_cap=tis_cap), _model(initial), compiled=compiled)  # 4 rows
  full = Trainer(dict(RL, micro_batch_size=0, tis_cap=tis_cap), _model(initial),
                 compiled=compiled)  # one micro-batch
  m_acc, m_full = accumulated.train_step(_batch(0)), full.train_step(_batch(0))
  if tis_cap:
    assert 0 < m_full["tis_truncated_fraction"] < 1
    # TIS rows (the agent's) take the ratio against the trainer's own log-probs: never
    # clipped. Designer rows keep the plain clipped ratio (docs/rl.md), so they may be.
    assert m_full["importance_ratio_max"] > 1 > m_full["agent/clip_fraction"] == 0
    assert m_full["designer/tis_truncated_fraction"] == 0
  for key in ("loss", "kl", "entropy", "grad_norm", "logprob_gap_max", "importance_ratio_mean",
              "importance_ratio_max", "tis_truncated_fraction"):
    np.testing.assert_allclose(m_acc[key], m_full[key], rtol=2e-5, atol=1e-7, err_msg=key)
  for a, b in zip(_leaves(accumulated.params), _leaves(full.params), strict=True):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_logits_at_loss_positions_only_train_like_logits_everywhere(initial, compiled):
  full = Trainer(dict(RL, logprob_positions="all"), _model(initial), compiled=compiled)
  compact = Trainer(RL, _model(initial), compiled=compiled)  # logprob_positions="loss"
  _train_alike(full, compact, ("loss", "kl", "entropy", "clip_fraction", "grad_norm",
                               "logprob_gap_max"), metric_atol=1e-7)


def _model_with(initial, **changes):
  """The initial weights in a graph built with ModelConfig changes (as run.build_model does)."""
  graphdef, state = initial
  cfg = get_preset("tiny", **changes)
  graph = nnx.split(nnx.eval_shape(lambda: Qwen3(cfg, rngs=nnx.Rngs(0))))[0]
  return nnx.merge(graph, jax.tree.map(jnp.copy, state))


def test_remat_with_the_reference_trains_like_no_remat(initial, compiled):
  """Rematerialised layers in the micro-batch scan, the reference's too (this once raised
  flax's TraceContextError under nnx.remat)."""
  _train_alike(Trainer(RL, _model(initial), compiled=compiled),
               Trainer(RL, _model_with(initial, remat="full"), compiled=compiled),
               ("loss", "kl", "entropy", "grad_norm"), metric_atol=1e-6)


# The accelerator path runs on newer jax / flax / optax too (docs/model.md, "JAX versions"):
# what the pinned releases deprecate is what the next ones remove.
@pytest.mark.filterwarnings("error::DeprecationWarning", "error::FutureWarning")
def test_accelerator_training_path_trains_like_the_cpu_path(initial, monkeypatch, compiled):
  """As on a GPU: cuDNN attention (emulated: the XLA implementation of the same call) and
  remat "auto" = full, through micro-batches, the reference and TIS; same metrics and
  parameters as the blocked kernel without remat."""
  cpu = Trainer(dict(RL, tis_cap=1.0), _model(initial), compiled=compiled)
  monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
  with emulated_kernels():
    gpu = Trainer(dict(RL, tis_cap=1.0), _model_with(initial, attention_impl="cudnn"),
                  compiled=compiled)
    _train_alike(cpu, gpu, ("loss", "kl", "entropy", "grad_norm", "logprob_gap_mean",
                            "importance_ratio_max", "tis_truncated_fraction"), metric_atol=1e-6)


def test_bf16_compute_keeps_float32_parameters_and_optimizer_state(initial, compiled):
  graphdef, state = initial
  bf16 = Qwen3(get_preset("tiny", compute_dtype="bfloat16"), rngs=nnx.Rngs(0))
  nnx.update(bf16, jax.tree.map(lambda x: x.copy(), state))
  trainer = Trainer(dict(RL, micro_batch_size=0), bf16, compiled=compiled)
  metrics = trainer.train_step(_batch(0))
  assert all(np.isfinite(v) for v in metrics.values())
  assert {x.dtype for x in jax.tree.leaves((trainer.params, trainer.opt_state))
          if x.ndim} == {np.dtype("float32")}
  # bf16 matmuls move the log-probs by about 1e-2 from the float32 ones, not more.
  reference = Trainer(dict(RL, micro_batch_size=0), _model(initial),
                      compiled=compiled).train_step(_batch(0))
  assert abs(metrics["logprob_gap_mean"] - reference["logprob_gap_mean"]) < 0.05
  assert metrics["entropy"] == pytest.approx(reference["entropy"], abs=0.05)


def test_resume_reproduces_uninterrupted_run_bit_for_bit(initial, tmp_path, compiled):
  straight = Trainer(RL, _model(initial), seed=7, compiled=compiled)
  for step in range(4):
    straight.train_step(_batch(step))
  straight_key = straight.next_rng()

  def manager():
    return CheckpointManager(tmp_path / "checkpoints", save_every=2, keep=2,
                             model_config=get_preset("tiny"))

  first = Trainer(RL, _model(initial), seed=7, checkpoints=manager(), compiled=compiled)
  assert first.restore() is None  # nothing to resume from yet
  for step in range(3):  # saves after step 2 only; step 3 is lost when the run "dies"
    first.train_step(_batch(step))
    first.maybe_save({"data_position": step + 1, "memory": ["env-a"]})
  first.close()
  assert first.checkpoints.all_steps() == [2]

  resumed = Trainer(RL, _model(initial), seed=7, checkpoints=manager(), compiled=compiled)
  host = resumed.restore()
  assert host == {"data_position": 2, "memory": ["env-a"]} and resumed.updates == 2
  for step in range(2, 4):
    resumed.train_step(_batch(step))
  resumed.close()
  for a, b in zip(_leaves(straight.params), _leaves(resumed.params), strict=True):
    np.testing.assert_array_equal(a, b)
  for a, b in zip(_leaves(straight.opt_state), _leaves(resumed.opt_state), strict=True):
    np.testing.assert_array_equal(a, b)
  np.testing.assert_array_equal(jax.random.key_data(straight_key),
                                jax.random.key_data(resumed.next_rng()))


def test_corrupt_latest_checkpoint_falls_back_with_a_warning(initial, tmp_path, compiled):
  directory = tmp_path / "checkpoints"
  trainer = Trainer(RL, _model(initial), checkpoints=CheckpointManager(directory, keep=3),
                    compiled=compiled)
  saved = {}
  for step in range(2):
    trainer.train_step(_batch(step))
    trainer.maybe_save({"step_seen": step + 1})
    trainer.checkpoints.wait_until_finished()
    saved[trainer.updates] = _leaves(trainer.params)
  trainer.close()
  # Damage every array file of the newest checkpoint's parameters.
  damaged = 0
  for root, _, files in os.walk(directory / "2" / "params"):
    for name in files:
      if not name.endswith(".json") and "metadata" not in name:
        with open(os.path.join(root, name), "r+b") as f:
          f.truncate(3)
        damaged += 1
  assert damaged
  # A save that died half-way leaves a temporary directory: it must be ignored.
  (directory / "3.orbax-checkpoint-tmp-1234").mkdir()

  resumed = Trainer(RL, _model(initial), checkpoints=CheckpointManager(directory, keep=3),
                    compiled=compiled)
  with pytest.warns(RuntimeWarning, match="checkpoint .*2 is not usable: .*manifest.ocdbt"):
    host = resumed.restore()
  assert resumed.updates == 1 and host == {"step_seen": 1}
  assert (directory / "2.corrupt").is_dir() and not (directory / "2").exists()
  for a, b in zip(saved[1], _leaves(resumed.params), strict=True):
    np.testing.assert_array_equal(a, b)
  resumed.train_step(_batch(1))  # training goes on and step 2 can be written again
  assert resumed.maybe_save({"step_seen": 2})
  resumed.close()
  assert resumed.checkpoints.all_steps() == [1, 2]

  with warnings.catch_warnings():
    warnings.simplefilter("error")  # the engine's loader reads the good newest step silently
    loaded = load_model(tmp_path, dtype="float32")
  for a, b in zip(_leaves(resumed.params), _leaves(nnx.state(loaded, nnx.Param)), strict=True):
    np.testing.assert_array_equal(a, b)
  older = load_model(directory / "1")
  for a, b in zip(saved[1], _leaves(nnx.state(older, nnx.Param)), strict=True):
    np.testing.assert_array_equal(a, b)
  # The loader verifies too: flipped bytes in step 1's largest data file are refused by name.
  data = max((p for p in (directory / "1" / "params").rglob("*") if "/d/" in str(p)),
             key=lambda p: p.stat().st_size)
  raw = bytearray(data.read_bytes())
  raw[100:164] = bytes(b ^ 0xFF for b in raw[100:164])
  data.write_bytes(bytes(raw))
  with pytest.raises(CheckpointIntegrityError, match=f"checksum mismatch.*{data.name}"):
    load_model(directory / "1")


def test_load_model_opens_hugging_face_directories_too(initial, tmp_path):
  from spade_jax.model.hf_io import save_pretrained
  model = _model(initial)
  save_pretrained(model, tmp_path / "hf")
  loaded = load_model(tmp_path / "hf", dtype="float32")
  for a, b in zip(_leaves(nnx.state(model, nnx.Param)), _leaves(nnx.state(loaded, nnx.Param)),
                  strict=True):
    np.testing.assert_array_equal(a, b)


def test_bad_batches_fail_early_with_the_field_name(initial, compiled):
  trainer = Trainer(dict(RL, beta=0.0), _model(initial), compiled=compiled)
  batch = _batch(0)
  batch.loss_mask[5, 25] = 1  # on right padding
  with pytest.raises(ValueError, match="loss_mask is 1 on padding .*rows \\[5\\]"):
    trainer.train_step(batch)
  batch = _batch(0)
  batch.behaviour_logprobs[1, 6] = np.nan
  with pytest.raises(ValueError, match="behaviour_logprobs must be finite.*rows \\[1\\]"):
    trainer.train_step(batch)
  with pytest.raises(ValueError, match="micro_batch_size=3 must be a multiple"):
    Trainer(dict(RL, micro_batch_size=3), _model(initial), make_mesh({"fsdp": 2, "data": 4}))


@pytest.mark.parametrize("committed", [False, True])
def test_step_compiles_once_whether_or_not_the_parameters_are_committed(initial, committed,
                                                                         compiled):
  model = _model(initial)
  if committed:  # as from_pretrained leaves them
    nnx.update(model, jax.device_put(nnx.state(model, nnx.Param), jax.devices()[0]))
  trainer = Trainer(dict(RL, learning_rate=1e-3 if committed else 2e-3), model,
                    compiled=compiled)
  for step in range(3):
    trainer.train_step(_batch(step))
  assert trainer._fns.step._cache_size() == 1


def test_a_trainer_owns_its_compiled_steps_unless_given_shared_ones(initial, compiled):
  """No hidden cache: two trainers share compiled steps only through one `compiled=`, and
  a trainer's go when it does."""
  mine, yours = Trainer(RL, _model(initial)), Trainer(RL, _model(initial))
  assert mine._fns.step is not yours._fns.step
  shared = Trainer(RL, _model(initial), compiled=compiled)
  assert shared._fns is Trainer(RL, _model(initial), compiled=compiled)._fns
  owned = weakref.ref(mine._compiled)
  del mine
  gc.collect()
  assert owned() is None
