"""Generation engine: KV-cache sampling, continuous batching, multi-turn conversations.

`spade_jax.engine.generate` is the one-call API (its `generate(model, prompt_ids,
max_new_tokens, ...)`) and CLI, a module of its own: the package does not re-export the
function, so the name means the module alone and `python -m spade_jax.engine.generate` runs
it cleanly; `SlotConversationEngine` is the ConversationEngine used by rollouts; `FakeEngine`
scripts replies without a model. See docs/engine.md.
"""

from spade_jax.engine.api import Completion, ConversationEngine, Request, SamplingParams
from spade_jax.engine.conversation import SlotConversationEngine
from spade_jax.engine.fake import FakeEngine
from spade_jax.engine.slot_engine import SlotEngine

__all__ = [
    "Completion", "ConversationEngine", "FakeEngine", "Request", "SamplingParams",
    "SlotConversationEngine", "SlotEngine",
]
