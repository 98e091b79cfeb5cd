"""spade_jax.sandbox: run generated environments safely (see docs/sandbox.md).

`SandboxPool` is the jailed process pool; `FakePool` runs trusted sources in-process for
tests; `contract.CONTRACT_TEXT` is what the designer is told to write.
"""

from spade_jax.sandbox.api import ERROR_KINDS, EnvPool, EnvStep, ValidationResult
from spade_jax.sandbox.contract import ALLOWED_IMPORTS, CONTRACT_TEXT
from spade_jax.sandbox.fake import FakePool
from spade_jax.sandbox.isolation import SandboxUnavailable
from spade_jax.sandbox.pool import SandboxPool

__all__ = ["ALLOWED_IMPORTS", "CONTRACT_TEXT", "ERROR_KINDS", "EnvPool", "EnvStep", "FakePool",
           "SandboxPool", "SandboxUnavailable", "ValidationResult"]
