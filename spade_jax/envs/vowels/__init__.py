"""A bundled vowels environment with a dense reward, for the trainer's learning test.

`VOWELS_SOURCE` is the source of `VowelEcho` (vowels.py): two turns, each rewarded by the
share of vowels in the answer. A randomly initialised tiny model scores about 0.3 (its
tokens decode to mixed text) and can reach 1.0 by putting its probability on the
vowel-only tokens, so GRPO has a signal from the first step and a clear way up. The file
obeys the environment contract (spade_jax/sandbox/contract.py) and runs in the sandbox
like any generated environment.

Plain Python: this package never imports jax or the model.
"""

from __future__ import annotations

import pathlib

VOWELS_FILE = pathlib.Path(__file__).with_name("vowels.py")
VOWELS_SOURCE = VOWELS_FILE.read_text()
VOWELS_HINT = "Answer with vowels only: a, e, i, o, u and nothing else."
