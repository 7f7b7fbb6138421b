"""The on-ramp: `new` (a spec from a function or a KernelBench problem), `check` (one kernel through the contract and the checker), their drafts."""
