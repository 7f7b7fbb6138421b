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


class ThroughSlowerParent:
    """A scripted proposer whose good kernel needs two steps through a slower parent: its first
    candidate is a slower idea; only a candidate written FROM that idea (ctx.parent_id) is the good
    one; from any other parent it writes the same file again under another note (a tie)."""
    name, model = "scripted", None

    def __init__(self, slow: str, good: str, same: str):
        self.slow, self.good, self.same = slow, good, same
        self.slow_id: str | None = None

    def describe(self):
        return {"proposer": "scripted", "model": None, "endpoint_host": None}

    def propose(self, ctx):
        if self.slow_id is None:
            self.slow_id = f"it{ctx.iteration:04d}"
            return Proposal(code=self.slow, note="a different, slower idea", proposer="scripted")
        if ctx.parent_id == self.slow_id:
            return Proposal(code=self.good, note="the idea's second step", proposer="scripted")
        return Proposal(code=f"# NOTE: again {ctx.iteration}\n{self.same}", note="a tie", proposer="scripted")
