"""A proposer that hands out fixed files: stands in for an LLM that writes a given candidate
(a planted bug, an exploit). It is data for the loop under test, not a fake of it."""
from kernloop.propose.proposer import Proposal


class Scripted:
    name, model = "scripted", None

    def __init__(self, items):
        """items: candidate sources, or (note, source) pairs."""
        self.items = [it if isinstance(it, tuple) else ("planted", it) for it in items]

    def describe(self):
        return {"proposer": "scripted", "model": None, "endpoint_host": None}

    def propose(self, ctx):
        note, code = self.items.pop(0)
        return Proposal(code=code, note=note, proposer="scripted")
