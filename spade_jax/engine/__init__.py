"""Generation engine: KV-cache sampling, continuous batching, multi-turn conversations.

`spade_jax.engine.generate(model, prompt_ids, max_new_tokens, ...)` is the one-call API;
`SlotConversationEngine` is the ConversationEngine used by rollouts; `FakeEngine` scripts
replies without a model. See docs/engine.md.
"""

from spade_jax.engine.api import Completion, ConversationEngine, Request, SamplingParams
from spade_jax.engine.conversation import SlotConversationEngine
from spade_jax.engine.fake import FakeEngine
from spade_jax.engine.generate import GenerateResult, generate
from spade_jax.engine.slot_engine import SlotEngine

__all__ = [
    "Completion", "ConversationEngine", "FakeEngine", "GenerateResult", "Request",
    "SamplingParams", "SlotConversationEngine", "SlotEngine", "generate",
]
