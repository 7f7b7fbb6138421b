"""The launcher typing: the kind of every launcher value (tensor, TMA descriptor, kernel, grid,
CONFIG, scalar, ...) as proved from what the value is; a value it cannot prove is unknown (the
kind UNK, or no kind at all), never taken for a scalar, and the rules refuse it where it is used.

A launcher function is typed once per typing context (the kinds its arguments have at a call
site; the entry and helpers nobody calls take tensors), memoized, and judged once, callers first,
in the union of its call sites' contexts. In a context, bindings are
solved with a worklist: one is re-examined only when a name it reads gains a kind, and a name's
kinds only grow, so the work is linear in the function's size times the number of kinds. Helpers
are typed on demand, callees first, on an explicit stack however long the chain; a recursive
call is typed as unknown (and refused by the rules). Every step is charged to the file's budget.Budget.
A mixin of walk.Walker (which holds the file's names and the table); pure AST.
"""
from __future__ import annotations

import ast
from collections import deque

from kernloop.contract import budget
from kernloop.contract.nodes import dotted

TEN, DESC, KERN, GRID, CONF, SCAL, FUNC, BUILTIN, MOD, META, UNK = (
    "tensor", "descriptor", "kernel", "grid", "config", "scalar", "function", "builtin",
    "module", "meta", "unknown")
NOT_NUMBERS = frozenset({TEN, DESC, KERN, GRID, FUNC, BUILTIN, MOD, UNK})   # never operands of arithmetic
MATH_VALUES = frozenset({"inf", "pi", "e"})   # math.<name> that are numbers, not functions


def unproven(kinds) -> bool:
    """True when a value of these kinds may not be used as a number: no kind proved (unknown),
    or a kind that is not a number (a tensor, a kernel, a function, ...)."""
    return not kinds or bool(set(kinds) & NOT_NUMBERS)


class Typing:
    """Kinds of launcher values, per function and typing context."""

    def typing_tables(self) -> None:
        """What module attributes are: numbers (dtypes, math constants) or functions returning
        a kind; built once per file from the table."""
        n = self.n
        self.module_values = {"torch": n["dtypes"], "tl": n["dtypes"], "math": n["math"] & MATH_VALUES}
        calls = {f"torch.{x}": TEN for x in n["torch"]}
        calls.update({f"torch.cuda.{x}": SCAL for x in n["torch_cuda"]})
        calls.update({f"triton.{x}": SCAL for x in n["triton"]})
        calls.update({f"math.{x}": SCAL for x in n["math"] - MATH_VALUES})
        calls["TensorDescriptor.from_tensor"] = DESC
        self.module_calls = calls
        self.contexts: dict = {}    # (name, argument kinds) -> (env, return kinds)
        self.active: set = set()    # the launchers whose contexts are being typed now
        self.memo = (None, {})      # (env, id(node) -> kinds) while a finished context is judged
        self.plans: dict = {}       # launcher name -> its bindings, readers and returns

    # ------------------------------------------------------------------ one expression
    def typeof(self, e, env) -> set:
        memo_env, memo = self.memo
        if memo_env is env and id(e) in memo:
            return memo[id(e)]
        self.budget.spend()
        out = self.kinds(e, env)
        if memo_env is env:
            memo[id(e)] = out
        return out

    def kinds(self, e, env) -> set:
        if isinstance(e, ast.Name):
            return self.name_kinds(e.id, env)
        if isinstance(e, ast.Constant):
            return {SCAL}
        if isinstance(e, (ast.Tuple, ast.List)):
            return {SCAL}.union(*(self.typeof(x, env) for x in e.elts))
        if isinstance(e, ast.IfExp):
            return self.typeof(e.body, env) | self.typeof(e.orelse, env)
        if isinstance(e, ast.BoolOp):   # its value is one of its operands
            return set().union(*(self.typeof(x, env) for x in e.values))
        if isinstance(e, (ast.BinOp, ast.UnaryOp, ast.Compare)):
            return {SCAL}   # of numbers only (the rules refuse any other operand)
        if isinstance(e, ast.Subscript):
            vt = self.typeof(e.value, env)
            return (vt - {CONF, META, KERN}) | {SCAL} | ({UNK} if KERN in vt else set())
        if isinstance(e, ast.Slice):
            return {SCAL}.union(*(self.typeof(x, env) for x in (e.lower, e.upper, e.step) if x is not None))
        if isinstance(e, ast.Lambda):
            return {GRID}
        if isinstance(e, ast.Call):
            return self.call_kinds(e, env)
        if isinstance(e, ast.Attribute):
            return self.attribute_kinds(e, env)
        return {UNK}

    def name_kinds(self, i: str, env) -> set:
        if i in env:
            return env[i]
        for kind, pool in ((CONF, {"CONFIG"}), (SCAL, self.consts), (KERN, self.jit),
                           (FUNC, self.launchers), (MOD, self.modules), (BUILTIN, self.n["builtins"])):
            if i in pool:
                return {kind}
        return set()

    def module_attribute(self, e: ast.Attribute, env) -> str | None:
        """The dotted path of an attribute of an allowed module (torch.empty, math.pi), or None."""
        path = dotted(e)
        head = (path or "").partition(".")[0]
        return path if head in self.module_names and head not in env else None

    def attribute_kinds(self, e: ast.Attribute, env) -> set:
        """An attribute read as a value (a call's callee is typed by call_kinds)."""
        path = self.module_attribute(e, env)
        if path is not None:
            head, _, rest = path.partition(".")
            return {SCAL} if rest in self.module_values.get(head, ()) else {UNK}
        vt, out = self.typeof(e.value, env), set()
        if TEN in vt and e.attr in self.n["tensor_attrs"]:
            out.add(SCAL)
        if SCAL in vt and e.attr in self.n["meta_attrs"]:
            out.add(SCAL)
        return out | (vt & {UNK})   # no kind has it: no kind proved (the rules refuse it)

    def call_kinds(self, e: ast.Call, env) -> set:
        """What a call returns; UNK for anything but the listed functions, methods and launcher
        functions (the rules refuse those calls)."""
        f = e.func
        if isinstance(f, ast.Name):
            if f.id in env:
                return {UNK}   # a local name holds a value, never a function
            if f.id in self.launchers:
                return self.returns_of(e, env)
            if f.id == "TensorDescriptor" and f.id in self.modules:
                return {DESC}
            return {SCAL} if f.id in self.n["builtins"] else {UNK}
        if not isinstance(f, ast.Attribute):
            return {UNK}   # a launch k[grid](...) (its value is refused), or a computed callee
        path = self.module_attribute(f, env)
        if path is not None:
            return {self.module_calls[path]} if path in self.module_calls else {UNK}
        vt, out = self.typeof(f.value, env), set()
        if TEN in vt and f.attr in self.n["tensor_meta"]:
            out.add(SCAL)
        if TEN in vt and f.attr in self.n["tensor_views"]:
            out.add(TEN)
        if CONF in vt and f.attr in self.n["config"]:   # CONFIG.get(key, default)
            out |= {SCAL}.union(*(self.typeof(a, env) for a in [*e.args[1:], *(k.value for k in e.keywords)]))
        return out | (vt & {UNK})

    # ------------------------------------------------------------------ launcher functions
    def argument_kinds(self, call: ast.Call, env) -> tuple:
        """The kinds each parameter of the called launcher function gets at this call."""
        names = [a.arg for a in self.launchers[call.func.id].args.args]
        slots = [set() for _ in names]
        for i, a in enumerate(call.args):
            if i < len(slots):
                slots[i] |= self.typeof(a, env)
        for k in call.keywords:
            if k.arg in names:
                slots[names.index(k.arg)] |= self.typeof(k.value, env)
        return tuple(frozenset(s) for s in slots)

    def returns_of(self, call: ast.Call, env) -> set:
        key = (call.func.id, self.argument_kinds(call, env))
        if key in self.contexts:
            return set(self.contexts[key][1])
        if call.func.id in self.active:
            return set()   # a recursive call: unknown (the rules refuse it)
        if self.active:
            raise _Need(key)   # typed first, then this binding again (Typing.context)
        return set(self.context(*key)[1])

    def context(self, name: str, params: tuple) -> tuple:
        """(env, return kinds) of launcher `name` given these parameter kinds, memoized. The
        helpers it needs are typed first, on an explicit stack (never Python's): a binding that
        calls an untyped one waits in its worklist until that one is typed."""
        todo, self.active = [_Frame(self, name, params)], {name}
        try:
            while todo:
                fr = todo[-1]
                try:
                    self.solve(fr)
                except _Need as need:   # never a name already on the stack: returns_of
                    todo.append(_Frame(self, *need.key))
                    self.active.add(need.key[0])
                    continue
                self.contexts[fr.key] = (fr.env, frozenset(fr.ret or {SCAL}))
                self.active.discard(todo.pop().key[0])
        finally:
            self.active = set()
        return self.contexts[(name, params)]

    def plan(self, name: str) -> tuple:
        """The bindings of launcher `name` (assignments, for targets, lambda parameters), which
        bindings read each name, and its returns: found once per function."""
        if name not in self.plans:
            items, readers, returns = [], {}, []
            for n in ast.walk(self.launchers[name]):
                self.budget.spend()
                if isinstance(n, ast.Return) and n.value is not None:
                    returns.append(n)
                if isinstance(n, (ast.Assign, ast.AugAssign, ast.For, ast.Lambda)):
                    if isinstance(n, (ast.Assign, ast.AugAssign)):
                        for x in ast.walk(n.value):
                            self.budget.spend()
                            if isinstance(x, ast.Name):
                                readers.setdefault(x.id, []).append(len(items))
                    items.append(n)
            self.plans[name] = (items, readers, returns)
        return self.plans[name]

    def solve(self, fr: "_Frame") -> None:
        """Type every local name of one context: a worklist over its bindings to the fixpoint
        (kinds only grow, over a finite set), then its returns. Raises _Need, resumable, when a
        binding calls a helper context not typed yet (the binding stays first in the queue)."""
        items, readers, returns = self.plan(fr.key[0])
        while fr.queue:
            i = fr.queue[0]
            pairs = self.binds(items[i], fr.env)
            fr.queue.popleft()
            fr.queued[i] = False
            self.budget.spend()
            for target, kinds in pairs:
                have = fr.env.setdefault(target, set())
                if not kinds <= have:
                    have |= kinds
                    for j in readers.get(target, ()):
                        if not fr.queued[j]:
                            fr.queued[j] = True
                            fr.queue.append(j)
        while fr.returned < len(returns):
            fr.ret |= self.typeof(returns[fr.returned].value, fr.env)
            fr.returned += 1

    def binds(self, n, env) -> list:
        if isinstance(n, ast.Assign):
            return [p for t in n.targets for p in self.bind(t, n.value, env)]
        if isinstance(n, ast.AugAssign):
            return [(n.target.id, self.typeof(n.value, env))] if isinstance(n.target, ast.Name) else []
        if isinstance(n, ast.For):
            return [(x.id, {SCAL}) for x in ast.walk(n.target) if isinstance(x, ast.Name)]
        return [(a.arg, {META}) for a in n.args.args]   # a lambda: a grid's META

    def bind(self, target, value, env) -> list:
        if isinstance(target, (ast.Tuple, ast.List)):
            if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts):
                return [p for t, v in zip(target.elts, value.elts) for p in self.bind(t, v, env)]
            ty = self.typeof(value, env)
            return [(x.id, ty) for x in ast.walk(target) if isinstance(x, ast.Name)]
        return [(target.id, self.typeof(value, env))] if isinstance(target, ast.Name) else []

    # ------------------------------------------------------------------ which contexts to judge
    def launcher_calls(self) -> dict:
        """launcher name -> the calls in it of launcher functions (by their own names)."""
        out = {}
        for name, fn in self.launchers.items():
            local = {a.arg for a in fn.args.args}
            out[name] = [n for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                         and n.func.id in self.launchers and n.func.id not in local]
        return out

    def recursive_calls(self, calls: dict) -> set:
        """ids of the calls that close a cycle of launcher functions (a depth-first search's back
        edges: every cycle has one)."""
        state, back = {}, set()   # name -> 1 on the search's path, 2 done
        for root in self.launchers:
            if root in state:
                continue
            state[root], stack = 1, [(root, iter(calls[root]))]
            while stack:
                name, it = stack[-1]
                call = next(it, None)
                if call is None:
                    state[name] = 2
                    stack.pop()
                elif state.get(call.func.id) == 1:
                    back.add(id(call))
                elif call.func.id not in state:
                    state[call.func.id] = 1
                    stack.append((call.func.id, iter(calls[call.func.id])))
        return back

    def judge_launchers(self) -> None:
        """Judge every launcher function once, callers first (call graph order, recursive calls
        left out): the entry and helpers nobody calls as given tensors, each helper with the
        union of the kinds all its call sites give it. (A call's value is typed in the callee's
        context for that call's own argument kinds: Typing.returns_of.)"""
        calls = self.launcher_calls()
        self.recursive = self.recursive_calls(calls)
        waiting = {name: 0 for name in self.launchers}   # calls from functions not judged yet
        for c in (c for cs in calls.values() for c in cs if id(c) not in self.recursive):
            waiting[c.func.id] += 1
        params = {name: [set() for _ in fn.args.args] for name, fn in self.launchers.items()}
        for name in self.launchers:
            if not waiting[name] or name == self.spec.entry:
                for p in params[name]:
                    p.add(TEN)
        ready = deque(name for name in self.launchers if not waiting[name])
        while ready:
            name = ready.popleft()
            env = self.context(name, tuple(frozenset(p) for p in params[name]))[0]
            self.memo = (env, {})
            try:
                self.launcher(self.launchers[name], env)
                for c in (c for c in calls[name] if id(c) not in self.recursive):
                    for p, kinds in zip(params[c.func.id], self.argument_kinds(c, env)):
                        p |= kinds
                    waiting[c.func.id] -= 1
                    if not waiting[c.func.id]:
                        ready.append(c.func.id)
            finally:
                self.memo = (None, {})


class _Need(Exception):
    """A binding calls a helper in a typing context not typed yet: type that one first."""

    def __init__(self, key: tuple):
        super().__init__(key[0])
        self.key = key


class _Frame:
    """One typing context being solved: its env so far, its worklist, its returns so far."""

    def __init__(self, typing: Typing, name: str, params: tuple):
        fn, items = typing.launchers[name], typing.plan(name)[0]
        self.key = (name, params)
        self.env = {a.arg: set(params[i]) if i < len(params) else set() for i, a in enumerate(fn.args.args)}
        self.queue, self.queued = deque(range(len(items))), [True] * len(items)
        self.ret, self.returned = set(), 0
