"""SentencePiece BPE tokenizer for the tiny CPU model, with the Qwen3 chat format.

The bundled model (assets/tiny.model, trained by scripts/train_tiny_tokenizer.py on the
built-in science corpus) has 1024 ids, equal to the "tiny" preset's vocab_size. The Qwen3
chat control tokens are user-defined symbols, so "<|im_start|>" in text encodes to its one id
(`control_tokens` lists every user-defined symbol, read from the model's protobuf);
byte fallback means any text encodes without <unk>; identity normalisation and no dummy prefix make
decode(encode(text)) == text and encode(a + b) == encode(a) + encode(b) at control tokens.
"""

from __future__ import annotations

import importlib.resources
import pathlib
from collections.abc import Sequence

from spade_jax.tokenizer import base
from spade_jax.tokenizer import chat_template as chat_lib

TINY_VOCAB_SIZE = 1024


def tiny_model_path() -> pathlib.Path:
  """Path of the bundled tiny SentencePiece model."""
  return pathlib.Path(str(importlib.resources.files("spade_jax.tokenizer") / "assets" /
                          "tiny.model"))


class SentencePieceTokenizer(base.Tokenizer):
  """A SentencePiece model file behind the common tokenizer interface."""

  def __init__(self, model_file: str | pathlib.Path, chat_template: str | None = None):
    # Imported here: code that loads a Qwen3 tokenizer.json (the engine, bench/accelerator.py)
    # must import without sentencepiece, which accelerator images may lack.
    import sentencepiece as spm  # pylint: disable=import-outside-toplevel
    from sentencepiece import sentencepiece_model_pb2  # pylint: disable=import-outside-toplevel

    model_file = pathlib.Path(model_file)
    if not model_file.is_file():
      raise FileNotFoundError(f"{model_file}: SentencePiece model file not found")
    self._sp = spm.SentencePieceProcessor()
    try:
      self._sp.Load(str(model_file))
    except (OSError, RuntimeError) as e:
      raise ValueError(f"{model_file}: not a SentencePiece model ({e})") from e
    proto = sentencepiece_model_pb2.ModelProto.FromString(self._sp.serialized_model_proto())
    user_defined = sentencepiece_model_pb2.ModelProto.SentencePiece.USER_DEFINED
    self._user_defined = tuple(p.piece for p in proto.pieces if p.type == user_defined)
    if self._user_defined and proto.normalizer_spec.name != "identity":
      # A folding normalizer (nmt_nfkc) could form a symbol's string from other characters,
      # out of reach of the marks that keep untrusted text plain (`plain_text`).
      raise ValueError(f"{model_file}: user-defined symbols need the identity normalizer, "
                       f"got {proto.normalizer_spec.name!r}")
    missing = [t for t in (base.IM_START, base.IM_END, base.ENDOFTEXT)
               if self.token_to_id(t) is None]
    if missing:
      raise ValueError(f"{model_file}: chat control tokens {missing} are not in the vocabulary")
    self.special_tokens_map = {"eos_token": base.IM_END, "pad_token": base.ENDOFTEXT}
    self.chat_template = chat_template or chat_lib.default_chat_template()

  def encode(self, text: str) -> list[int]:
    return list(self._sp.EncodeAsIds(text))

  def decode(self, ids: Sequence[int]) -> str:
    return self._sp.DecodeIds([int(i) for i in ids])

  def token_to_id(self, token: str) -> int | None:
    token_id = self._sp.PieceToId(token)
    # PieceToId answers unk for unknown pieces; only unk itself may map to unk.
    if token_id == self._sp.unk_id() and token != self._sp.IdToPiece(token_id):
      return None
    return token_id

  @property
  def control_tokens(self) -> tuple[str, ...]:
    """The user-defined symbols: SentencePiece matches them whole in any text."""
    return self._user_defined

  @property
  def vocab_size(self) -> int:
    return self._sp.GetPieceSize()


def load_tiny() -> SentencePieceTokenizer:
  """The bundled tiny tokenizer (vocab 1024, Qwen3 chat format)."""
  return SentencePieceTokenizer(tiny_model_path())
