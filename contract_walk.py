"""The AST walk that judges a kernel file against the contract's allow-list (contract.TABLE).

`Walker(tree, spec, table, why, labels).run()` returns the reasons (construct and line). Launchers
get a type inference (tensor, descriptor, kernel, grid, CONFIG, scalar) to tell tensors from shapes.
"""
from __future__ import annotations

import ast

_COMMON = (ast.arguments, ast.arg, ast.Assign, ast.AugAssign, ast.Return, ast.If, ast.For,
           ast.Break, ast.Continue, ast.Pass, ast.Expr, ast.Assert, ast.Name, ast.Constant,
           ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.IfExp, ast.Call, ast.keyword,
           ast.Attribute, ast.Subscript, ast.Slice, ast.Tuple, ast.List, ast.expr_context,
           ast.operator, ast.unaryop, ast.cmpop, ast.boolop)
JIT_NODES = _COMMON + (ast.AnnAssign, ast.While)
LAUNCHER_NODES = _COMMON + (ast.Lambda,)


def dotted(node) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def config_literal(tree: ast.Module):
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "CONFIG"
                                                for t in node.targets):
            v = node.value
            if isinstance(v, ast.Call) and dotted(v.func) == "dict" and not v.args:
                return {kw.arg: ast.literal_eval(kw.value) for kw in v.keywords}
            return ast.literal_eval(v)
    return None


TEN, DESC, KERN, GRID, CONF, SCAL, FUNC, BUILTIN, MOD, META = (
    "tensor", "descriptor", "kernel", "grid", "config", "scalar", "function", "builtin",
    "module", "meta")
NOT_NUMBERS = {TEN, DESC, KERN, GRID, FUNC, BUILTIN, MOD}   # never operands of arithmetic
TENSOR_ARGS_OK = {"torch.empty_like", "torch.zeros_like", "torch.full_like",
                  "TensorDescriptor.from_tensor", "TensorDescriptor"}


def _src(node) -> str:
    s = ast.unparse(node)
    return s if len(s) <= 48 else s[:45] + "..."


class Walker:
    """One pass over a parsed kernel file; `run()` returns the reasons in source order."""

    def __init__(self, tree: ast.Module, spec, table: dict, why: dict, labels: dict):
        self.tree, self.spec, self.reasons, self.whys, self.labels = tree, spec, [], why, labels
        self.n = {k: frozenset(v[2]) for k, v in table.items()}
        self.imports, self.from_imports = {}, set()
        for stmt in (ast.parse(s).body[0] for s in table["imports"][2]):
            for a in stmt.names:
                if isinstance(stmt, ast.Import):
                    self.imports[(a.name, a.asname)] = a.asname or a.name
                else:
                    self.from_imports.add((stmt.module, a.name))
        self.module_names = set(self.imports.values()) | {n for _, n in self.from_imports} - {"annotations"}
        self.math_prefixes = tuple(p + "." for p in table["jit_math_modules"][2])
        self.consts, self.modules, self.jit, self.launchers = set(), set(), {}, {}
        self.params, self.returns = {}, {}   # launcher -> [types per param]; -> return types

    def label(self, node) -> str:
        return self.labels.get(type(node).__name__, type(node).__name__)

    def why(self, name: str) -> str:
        return f" ({self.whys[name]})" if name in self.whys else ""

    def add(self, node, msg: str) -> None:
        self.reasons.append((getattr(node, "lineno", 0), f"line {getattr(node, 'lineno', '?')}: {msg}"))

    def run(self) -> list[str]:
        head = self.config()
        self.module()
        for fn in self.jit.values():
            self.jit_fn(fn)
        self.infer_launchers()
        for name, fn in self.launchers.items():
            self.launcher(fn, self.env(name, fn))
        tail = []
        if not self.jit:
            tail.append("no @triton.jit kernel in the file")
        entry = self.launchers.get(self.spec.entry)
        if entry is None:
            tail.append(f"entry function '{self.spec.entry}' is missing"
                        + (" (it must be a plain function)" if self.spec.entry in self.jit else ""))
        else:
            params = [a.arg for a in entry.args.args]
            if params != list(self.spec.input_names) or entry.args.vararg or entry.args.kwarg \
                    or entry.args.kwonlyargs or entry.args.defaults or entry.args.posonlyargs:
                tail.append(f"entry signature changed: expected {self.spec.entry}("
                            f"{', '.join(self.spec.input_names)}), got {self.spec.entry}({', '.join(params)})")
        body = [r for _, r in sorted(self.reasons, key=lambda x: x[0])]
        return list(dict.fromkeys(head + body + tail))

    # ------------------------------------------------------------------ module level
    def config(self) -> list[str]:
        try:
            cfg = config_literal(self.tree)
        except (ValueError, TypeError, SyntaxError):
            return ["CONFIG must be a literal dict of constants (CONFIG = dict(BLOCK_M=64, ...))"]
        if cfg is None:
            return ["no module-level CONFIG literal (CONFIG = dict(...)) holding the tunables"]
        if not isinstance(cfg, dict):
            return ["CONFIG must be a dict literal"]
        mutable = [k for k, v in cfg.items() if not isinstance(v, (int, float, str, bool, tuple, type(None)))]
        return [f"CONFIG values must be immutable constants, not {', '.join(map(str, mutable))} "
                "(a list or dict in CONFIG is state kept across calls)"] if mutable else []

    def const(self, v) -> bool:
        if isinstance(v, ast.Constant):
            return True
        if isinstance(v, ast.Tuple):
            return all(self.const(e) for e in v.elts)
        if isinstance(v, ast.UnaryOp):
            return self.const(v.operand)
        if isinstance(v, ast.BinOp):
            return not isinstance(v.op, ast.MatMult) and self.const(v.left) and self.const(v.right)
        if isinstance(v, ast.Name):
            return v.id in self.consts
        if isinstance(v, ast.Call):
            return (dotted(v.func) == "tl.constexpr" and len(v.args) == 1 and not v.keywords
                    and self.const(v.args[0]))
        head, _, rest = (dotted(v) or "").partition(".")
        return (head in ("torch", "tl") and rest in self.n["dtypes"]) or (head == "math" and rest in ("pi", "e", "inf"))

    def module(self) -> None:
        seen: dict[str, int] = {}
        only = f"is not in the allow-list (only: {'; '.join(sorted(self.n['imports']))})"
        for node in self.tree.body:
            bound = []
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
                continue   # docstring
            if isinstance(node, ast.Import):
                for a in node.names:
                    mod = self.imports.get((a.name, a.asname))
                    if mod is None:
                        self.add(node, f"import '{a.name}{' as ' + a.asname if a.asname else ''}' {only}")
                    else:
                        self.modules.add(mod)
                continue
            if isinstance(node, ast.ImportFrom):
                for a in node.names:
                    if node.level or a.asname or (node.module, a.name) not in self.from_imports:
                        self.add(node, f"'from {'.' * node.level}{node.module or ''} import {a.name}' {only}")
                    elif a.name != "annotations":
                        self.modules.add(a.name)
                continue
            if isinstance(node, ast.FunctionDef):
                bound = [node.name]
                (self.jit if self.decorated(node) else self.launchers)[node.name] = node
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if len(targets) != 1 or not isinstance(targets[0], ast.Name):
                    self.add(node, "a module-level assignment must bind one name to a constant")
                    continue
                name = targets[0].id
                bound = [name]
                if isinstance(node, ast.AnnAssign) and dotted(node.annotation) not in ("tl.constexpr", "int", "float", "bool", "str"):
                    self.add(node, f"annotation '{_src(node.annotation)}' of '{name}' is not in the allow-list")
                if name != "CONFIG":
                    if node.value is None or not self.const(node.value):
                        self.add(node, f"module-level '{name}' is not a literal constant: no state "
                                       "across calls (outputs must not be cached)")
                    else:
                        self.consts.add(name)
            else:
                self.add(node, f"{self.label(node) if not isinstance(node, ast.Expr) else 'expression statement'} "
                               "at module level is not in the allow-list")
            for n in bound:
                if n in seen:
                    self.add(node, f"'{n}' is defined twice (first at line {seen[n]})")
                elif n in self.module_names or n in self.n["builtins"]:
                    self.add(node, f"'{n}' shadows an allowed module or builtin")
                seen.setdefault(n, node.lineno)

    def decorated(self, fn: ast.FunctionDef) -> bool:
        """True for a @triton.jit function (anything decorated is judged as one, and rejected
        unless the decorator is triton.jit)."""
        allowed_kw = self.n["jit_decorator"] - {"triton.jit"}
        for d in fn.decorator_list:
            target = d.func if isinstance(d, ast.Call) else d
            name = dotted(target) or _src(target)
            if name != "triton.jit":
                self.add(d, f"decorator '@{name}' is not in the allow-list{self.why(name.rpartition('.')[2])}; "
                            "only @triton.jit")
            elif isinstance(d, ast.Call) and (d.args or any(k.arg not in allowed_kw or not (self.const(k.value) or (
                    isinstance(k.value, ast.List) and all(map(self.const, k.value.elts)))) for k in d.keywords)):
                self.add(d, f"'@{_src(d)}': only {', '.join(sorted(allowed_kw))} with literal values")
        return bool(fn.decorator_list)

    def signature(self, fn: ast.FunctionDef, jit: bool) -> set[int]:
        """Check the parameters; return the ids of annotation nodes (not walked as code)."""
        a, skip = fn.args, set()
        if a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs:
            self.add(fn, f"'{fn.name}': *args, **kwargs and keyword-only parameters are not in the allow-list")
        if a.defaults and not (jit and all(self.const(d) for d in a.defaults)):
            self.add(fn, f"'{fn.name}': default argument values are not in the allow-list "
                         "(a default is state kept across calls)" if not jit else
                         f"'{fn.name}': defaults of a kernel must be literal constants")
        allowed = {"tl.constexpr"} if jit else self.n['annotations']
        for ann in [x.annotation for x in a.args] + [fn.returns]:
            if ann is None:
                continue
            skip |= {id(n) for n in ast.walk(ann)}   # annotations are judged here, not as code
            ok = lambda t: (dotted(t) in allowed or (isinstance(t, ast.Constant) and t.value is None)   # noqa: E731
                            or (isinstance(t, ast.Subscript) and ok(t.value) and ok(t.slice))
                            or (isinstance(t, ast.Tuple) and all(map(ok, t.elts)))
                            or (isinstance(t, ast.BinOp) and isinstance(t.op, ast.BitOr) and ok(t.left) and ok(t.right)))
            if not ok(ann):
                self.add(ann, f"annotation '{_src(ann)}' is not in the allow-list (only {', '.join(sorted(allowed))})")
        return skip

    # ------------------------------------------------------------------ @triton.jit bodies
    def jit_fn(self, fn: ast.FunctionDef) -> None:
        skip = self.signature(fn, jit=True)
        local = {a.arg for a in fn.args.args} | {n.id for s in fn.body for n in ast.walk(s)
                                                  if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        for n in sorted(local & (self.module_names | set(self.jit) | self.consts)):
            self.add(fn, f"'{fn.name}': local '{n}' shadows a module-level name")
        names = local | self.consts | set(self.jit) | self.n["jit_builtins"] | {"tl"} \
            | ({p.split(".")[0] for p in self.math_prefixes} & self.modules)
        parents = {id(c): p for p in ast.walk(fn) for c in ast.iter_child_nodes(p)}
        where = "in a @triton.jit function"
        for n in (x for s in fn.body for x in ast.walk(s)):
            if id(n) in skip:
                continue
            if not isinstance(n, JIT_NODES):
                self.add(n, f"{self.label(n)} is not allowed {where}")
                skip |= {id(d) for d in ast.walk(n)}   # one reason for the construct, not its parts
            elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id not in names:
                self.add(n, f"name '{n.id}' is not in the allow-list {where}{self.why(n.id)}")
            elif isinstance(n, ast.Attribute):
                self.jit_attribute(n, parents)
            elif isinstance(n, ast.Subscript) and not isinstance(n.ctx, ast.Load):
                self.add(n, f"item assignment ('{_src(n)}') is not allowed {where}")
            elif isinstance(n, ast.Call):
                f = n.func
                if isinstance(f, ast.Name) and f.id in names and f.id not in set(self.jit) | self.n["jit_builtins"]:
                    self.add(n, f"call of '{f.id}' is not allowed {where} (only tl.*, other "
                                "@triton.jit functions and the listed builtins)")
                elif not isinstance(f, (ast.Name, ast.Attribute)):
                    self.add(n, f"call of a computed value ('{_src(f)}') is not allowed {where}")
            elif isinstance(n, ast.For):
                it = dotted(n.iter.func) if isinstance(n.iter, ast.Call) else None
                if it not in ("range", "tl.range", "tl.static_range"):
                    self.add(n, f"for loops {where} run only over range, tl.range or tl.static_range")

    def jit_attribute(self, n: ast.Attribute, parents) -> None:
        if n.attr.startswith("_"):
            return self.add(n, f"attribute '.{n.attr}' is not in the allow-list")
        if not isinstance(n.ctx, ast.Load):
            return self.add(n, f"assignment to an attribute ('{_src(n)}') is not allowed in a @triton.jit function")
        path = dotted(n)
        head = (path or "").split(".")[0]
        if head in self.module_names:
            if isinstance(parents.get(id(n)), ast.Attribute):
                return   # the whole chain is judged at its outermost attribute
            ok = (head == "tl" and path[3:] in self.n["jit_tl"]) or any(
                path.startswith(p) and path[len(p):] in self.n["jit_math"] for p in self.math_prefixes)
            if not ok:
                self.add(n, f"'{path}' is not in the allow-list in a @triton.jit function{self.why(n.attr)}")
        elif n.attr not in self.n["jit_value"]:
            self.add(n, f"attribute '.{n.attr}' is not in the allow-list in a @triton.jit function{self.why(n.attr)}")

    # ------------------------------------------------------------------ launchers: types
    def env(self, name: str, fn: ast.FunctionDef) -> dict:
        given = self.params.get(name)   # None: the entry, or a helper nobody calls: tensors in
        return self.infer(fn, {a.arg: set(given[i]) if given else {TEN} for i, a in enumerate(fn.args.args)})

    def typeof(self, e, env) -> set:
        if isinstance(e, ast.Name):
            i = e.id
            if i in env:
                return env[i]
            for kind, pool in ((CONF, {"CONFIG"}), (SCAL, self.consts), (KERN, self.jit),
                               (FUNC, self.launchers), (MOD, self.modules), (BUILTIN, self.n["builtins"])):
                if i in pool:
                    return {kind}
            return set()
        if isinstance(e, (ast.Tuple, ast.List)):
            out = {SCAL}
            for x in e.elts:
                out |= self.typeof(x, env) & {TEN, DESC}
            return out
        if isinstance(e, ast.IfExp):
            return self.typeof(e.body, env) | self.typeof(e.orelse, env)
        if isinstance(e, ast.Subscript):
            return (self.typeof(e.value, env) & {TEN, DESC}) | {SCAL}
        if isinstance(e, ast.Lambda):
            return {GRID}
        if isinstance(e, ast.Call):
            f, path = e.func, dotted(e.func) or ""
            if isinstance(f, ast.Name) and FUNC in self.typeof(f, env):
                return set(self.returns.get(f.id, set())) or {SCAL}
            if path == "TensorDescriptor" or path == "TensorDescriptor.from_tensor":
                return {DESC}
            if path.startswith("torch.") and path[6:] in self.n["torch"]:
                return {TEN}
            if isinstance(f, ast.Attribute) and f.attr in self.n["tensor_views"] \
                    and TEN in self.typeof(f.value, env):
                return {TEN}
        return {SCAL}

    def infer(self, fn, env) -> dict:
        for _ in range(8):
            changed = False
            for n in ast.walk(fn):
                pairs = []
                if isinstance(n, ast.Assign):
                    for t in n.targets:
                        pairs += self.bind(t, n.value, env)
                elif isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name):
                    pairs = [(n.target.id, self.typeof(n.value, env))]
                elif isinstance(n, ast.For):
                    pairs = [(x.id, {SCAL}) for x in ast.walk(n.target) if isinstance(x, ast.Name)]
                elif isinstance(n, ast.Lambda):
                    pairs = [(a.arg, {META}) for a in n.args.args]
                for name, ty in pairs:
                    if not ty <= env.get(name, set()):
                        env[name] = env.get(name, set()) | ty
                        changed = True
            if not changed:
                break
        return env

    def bind(self, target, value, env) -> list:
        if isinstance(target, (ast.Tuple, ast.List)):
            if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts):
                return [p for t, v in zip(target.elts, value.elts) for p in self.bind(t, v, env)]
            ty = self.typeof(value, env)
            return [(x.id, ty) for x in ast.walk(target) if isinstance(x, ast.Name)]
        return [(target.id, self.typeof(value, env))] if isinstance(target, ast.Name) else []

    def infer_launchers(self) -> None:
        called = {n.func.id for fn in self.launchers.values() for n in ast.walk(fn)
                  if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in self.launchers}
        self.params = {name: [set() for _ in fn.args.args] for name, fn in self.launchers.items()
                       if name in called and name != self.spec.entry}
        for _ in range(8):
            before = repr((self.params, self.returns))
            for name, fn in self.launchers.items():
                env = self.env(name, fn)
                ret = set()
                for n in ast.walk(fn):
                    if isinstance(n, ast.Return) and n.value is not None:
                        ret |= self.typeof(n.value, env)
                    if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in self.params:
                        names = [a.arg for a in self.launchers[n.func.id].args.args]
                        slots = self.params[n.func.id]
                        for i, arg in [*enumerate(n.args), *((names.index(k.arg), k.value) for k in n.keywords
                                                              if k.arg in names)]:
                            if i < len(slots):
                                slots[i] |= self.typeof(arg, env)
                self.returns[name] = self.returns.get(name, set()) | ret
            if repr((self.params, self.returns)) == before:
                break

    # ------------------------------------------------------------------ launchers: rules
    def launcher(self, fn: ast.FunctionDef, env: dict) -> None:
        skip = self.signature(fn, jit=False)
        parents = {id(c): p for p in ast.walk(fn) for c in ast.iter_child_nodes(p)}
        ty = lambda e: self.typeof(e, env)   # noqa: E731
        shadowed = self.module_names | self.n["builtins"] | self.consts | set(self.jit) | set(self.launchers) | {"CONFIG"}
        for n in (x for s in fn.body for x in ast.walk(s)):
            if id(n) in skip:
                continue
            p = parents.get(id(n))
            if not isinstance(n, LAUNCHER_NODES):
                self.add(n, f"{self.label(n)} is not in the allow-list in a launcher{self.why(type(n).__name__)}")
                skip |= {id(d) for d in ast.walk(n)}
            elif isinstance(n, ast.Name):
                self.launcher_name(n, p, ty(n), shadowed)
            elif isinstance(n, ast.Attribute):
                why = self.launcher_attribute(n, p, env)
                if why:
                    self.add(n, why)
            elif isinstance(n, ast.Subscript):
                vt = ty(n.value)
                if not isinstance(n.ctx, ast.Load):
                    self.add(n, f"item assignment ('{_src(n)}') is not in the allow-list: no mutation")
                elif KERN in vt:
                    if not (isinstance(p, ast.Call) and p.func is n):
                        self.add(n, f"'{_src(n)}': a kernel is subscripted only to launch it, k[grid](...)")
                    elif ty(n.slice) & (NOT_NUMBERS - {GRID}):
                        self.add(n, f"grid '{_src(n.slice)}' is not a tuple of sizes or lambda META: (...)")
                elif vt & (NOT_NUMBERS - {KERN}):
                    self.add(n, f"indexing a tensor ('{_src(n)}') is not in the allow-list "
                                "(views come from the listed methods; the op runs in Triton)")
            elif isinstance(n, ast.BinOp):
                if any(isinstance(o, ast.Constant) and isinstance(o.value, (str, bytes)) for o in (n.left, n.right)):
                    self.add(n, f"string formatting ('{_src(n)}') is not in the allow-list")
                elif isinstance(n.op, ast.MatMult):
                    self.add(n, f"the @ operator ('{_src(n)}') computes in torch, not Triton")
                elif (ty(n.left) | ty(n.right)) & NOT_NUMBERS:
                    self.add(n, f"arithmetic on a tensor ('{_src(n)}') computes in torch, not Triton")
            elif isinstance(n, ast.AugAssign):
                if (ty(n.target) | ty(n.value)) & NOT_NUMBERS or isinstance(n.op, ast.MatMult):
                    self.add(n, f"arithmetic on a tensor ('{_src(n)}') computes in torch, not Triton")
            elif isinstance(n, (ast.UnaryOp, ast.BoolOp, ast.Compare)):
                ops = n.values if isinstance(n, ast.BoolOp) else [n.operand] if isinstance(n, ast.UnaryOp) \
                    else ([] if all(isinstance(o, (ast.Is, ast.IsNot)) for o in n.ops) else [n.left, *n.comparators])
                if any(ty(o) & NOT_NUMBERS for o in ops):
                    self.add(n, f"an operation on a tensor ('{_src(n)}') computes in torch and may read "
                                "its values on the host")
            elif isinstance(n, (ast.If, ast.IfExp, ast.Assert)) and TEN in ty(n.test):
                self.add(n, f"branching on a tensor's value ('{_src(n.test)}') is a host sync")
            elif isinstance(n, ast.Call):
                self.launcher_call(n, p, env)
            elif isinstance(n, ast.For):
                if not (isinstance(n.iter, ast.Call) and isinstance(n.iter.func, ast.Name)
                        and n.iter.func.id == "range" and BUILTIN in ty(n.iter.func)):
                    self.add(n, f"for loops in a launcher run only over range(...), not '{_src(n.iter)}'")
            elif isinstance(n, ast.Lambda):
                grid = (isinstance(p, ast.Assign) and len(p.targets) == 1 and isinstance(p.targets[0], ast.Name)) \
                    or (isinstance(p, ast.Subscript) and p.slice is n)
                a = n.args
                if not grid or len(a.args) != 1 or a.defaults or a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs:
                    self.add(n, "lambda is in the allow-list only as a launch grid: lambda META: (...)")
            elif isinstance(n, ast.Expr) and not isinstance(n.value, (ast.Call, ast.Constant)):
                self.add(n, f"expression statement '{_src(n)}' is not in the allow-list")
            elif isinstance(n, ast.Assign) and any(isinstance(t, (ast.Tuple, ast.List)) for t in n.targets) \
                    and not isinstance(n.value, (ast.Tuple, ast.List)) and TEN in ty(n.value) \
                    and not isinstance(n.value, ast.Call):
                self.add(n, f"unpacking a tensor ('{_src(n.value)}') reads its values")

    def launcher_name(self, n: ast.Name, p, t: set, shadowed: set) -> None:
        if not isinstance(n.ctx, ast.Load):
            if n.id in shadowed:
                self.add(n, f"assignment to '{n.id}' shadows a module-level name or builtin")
            return
        called = isinstance(p, ast.Call) and p.func is n
        if not t:
            self.add(n, f"name '{n.id}' is not in the allow-list{self.why(n.id)}")
        elif MOD in t and not isinstance(p, ast.Attribute) and not (called and n.id == "TensorDescriptor"):
            self.add(n, f"module '{n.id}' used as a value (only its listed attributes)")
        elif t & {BUILTIN, FUNC} and not called:
            self.add(n, f"'{n.id}' used as a value: functions are only called")
        elif KERN in t and not (isinstance(p, ast.Subscript) and p.value is n) \
                and not isinstance(p, (ast.IfExp, ast.Assign)):
            self.add(n, f"kernel '{n.id}' used as a value: kernels are only launched, k[grid](...)")
        elif GRID in t and called:
            self.add(n, f"'{n.id}' (a grid lambda) is only passed as a grid")

    def launcher_attribute(self, n: ast.Attribute, p, env: dict) -> str | None:
        """Why this attribute is not allowed, or None."""
        if n.attr.startswith("_"):
            return f"attribute '.{n.attr}' is not in the allow-list"
        if not isinstance(n.ctx, ast.Load):
            return f"assignment to an attribute ('{_src(n)}') is not in the allow-list: no mutation"
        path = dotted(n) or ""
        head, _, rest = path.partition(".")
        if head in self.module_names and head not in env:
            if isinstance(p, ast.Attribute):
                return None   # judged at the outermost attribute of the chain
            ok = {"torch": self.n["torch"] | self.n["dtypes"] | {"cuda." + x for x in self.n["torch_cuda"]},
                  "triton": self.n["triton"], "tl": self.n["dtypes"], "math": self.n["math"],
                  "TensorDescriptor": {"from_tensor"}}.get(head, set())
            return None if rest in ok else f"'{path}' is not in the allow-list{self.why(n.attr)}"
        vt = self.typeof(n.value, env)
        called = isinstance(p, ast.Call) and p.func is n
        ok = (TEN in vt and (n.attr in (self.n["tensor_meta"] | self.n["tensor_views"]) if called
                             else n.attr in self.n["tensor_attrs"])) \
            or (CONF in vt and called and n.attr in self.n["config"]) \
            or (SCAL in vt and not called and n.attr in self.n["meta_attrs"])
        return None if ok else f"attribute '.{n.attr}' is not in the allow-list{self.why(n.attr)}"

    def launcher_call(self, n: ast.Call, parent, env: dict) -> None:
        f, path = n.func, dotted(n.func) or ""
        args = [*n.args, *(k.value for k in n.keywords)]
        for k in n.keywords:
            if k.arg is None and not (isinstance(f, ast.Subscript) and CONF in self.typeof(k.value, env)):
                self.add(n, f"**-unpacking of '{_src(k.value)}' is not in the allow-list (only **CONFIG in a launch)")
        tensor_args = [a for a in args if self.typeof(a, env) & {TEN, DESC}]
        if isinstance(f, ast.Subscript) and KERN in self.typeof(f.value, env):
            if not isinstance(parent, ast.Expr):
                self.add(n, f"the value of a launch ('{_src(n)}') is not in the allow-list (a compiled-kernel handle)")
            return   # a launch: tensors are its arguments
        if isinstance(f, ast.Name) and FUNC in self.typeof(f, env):
            return   # a launcher function: held to the same rules with what it is given
        if isinstance(f, ast.Name) and not self.typeof(f, env):
            return   # an unknown name: reported as such
        if isinstance(f, ast.Name) and KERN in self.typeof(f, env):
            return self.add(n, f"'{f.id}(...)': a kernel is called only as a launch, {f.id}[grid](...)")
        if not isinstance(f, (ast.Name, ast.Attribute)):
            return self.add(n, f"call of a computed value ('{_src(f)}') is not in the allow-list")
        if isinstance(f, ast.Attribute) and self.launcher_attribute(f, n, env):
            return   # the callee itself is rejected; its arguments add nothing
        if tensor_args and path not in TENSOR_ARGS_OK and not (path == "len" and len(args) == 1):
            self.add(n, f"a tensor passed to '{path or _src(f)}' ('{_src(tensor_args[0])}'): only "
                        "kernels, descriptors, *_like allocation, len() and launcher functions take tensors")
