"""The AST walk that judges a kernel file against the contract's allow-list (contract.TABLE).

`Walker(tree, spec, table, why, labels).run()` returns the reasons (construct and line), or raises
budget.TooComplex past the file's work budget. This module judges the module level and the
@triton.jit bodies; contract/launcher.py (a mixin) the launchers, contract/infer.py their typing.
"""
from __future__ import annotations

import ast

from kernloop.contract import budget as contract_budget
from kernloop.contract import config as contract_config
from kernloop.contract import names as contract_names
from kernloop.contract import texts as contract_text
from kernloop.contract.launcher import TRITON_OPTIONS, Launchers
from kernloop.contract.nodes import JIT_NODES, dotted
from kernloop.contract.nodes import src as contract_src


class Walker(Launchers):
    """One pass over a parsed kernel file; `run()` returns the reasons in source order."""

    def __init__(self, tree: ast.Module, spec, table: dict, why: dict, labels: dict, text: str = "",
                 budget: contract_budget.Budget | None = None):
        self.tree, self.spec, self.reasons, self.whys, self.labels = tree, spec, [], why, labels
        self.text = text or ast.unparse(tree)
        self.n = {k: frozenset(v[2]) for k, v in table.items()}
        self.imports, self.from_imports, self.import_forms = {}, set(), set()
        for stmt in (ast.parse(s).body[0] for s in table["imports"][2]):
            for a in stmt.names:
                if isinstance(stmt, ast.Import):
                    self.imports[(a.name, a.asname)] = a.asname or a.name
                    self.import_forms.add(("import", None, a.name, a.asname))
                else:
                    self.from_imports.add((stmt.module, a.name))
                    self.import_forms.add(("from", stmt.module, a.name, a.asname))
        self.module_names = set(self.imports.values()) | {n for _, n in self.from_imports} - {"annotations"}
        self.math_prefixes = tuple(p + "." for p in table["jit_math_modules"][2])
        self.consts, self.modules, self.jit, self.launchers = set(), set(), {}, {}
        self.config_keys: set = set()
        self.budget = budget or contract_budget.Budget()
        self.typing_tables()

    def label(self, node) -> str:
        return self.labels.get(type(node).__name__, type(node).__name__)

    def why(self, name: str) -> str:
        return f" ({self.whys[name]})" if name in self.whys else ""

    def add(self, node, msg: str) -> None:
        self.reasons.append((getattr(node, "lineno", 0), f"line {getattr(node, 'lineno', '?')}: {msg}"))

    def src(self, node) -> str:
        """A construct's source as a reason quotes it (short); its length is charged to the budget."""
        s = ast.unparse(node)
        self.budget.spend(1 + len(s) // contract_budget.QUOTE_CHARS)
        return s if len(s) <= 48 else s[:45] + "..."

    def run(self) -> list[str]:
        self.budget.spend(sum(1 for _ in ast.walk(self.tree)))   # the file-level passes: linear
        head = self.config()
        self.module()
        for line, why in contract_names.problems(self.tree, self.module_names, self.import_forms,
                                                 self.spec.entry, tuple(self.spec.input_names)):
            self.reasons.append((line, f"line {line}: {why}"))
        texts = [p for fn in self.jit.values() for p in contract_text.kernel_problems(fn)]
        for line, why in texts:
            self.reasons.append((line, f"line {line}: {why}"))
        self.jit_names = self.consts | set(self.jit) | self.n["jit_builtins"] | {"tl"} \
            | ({p.split(".")[0] for p in self.math_prefixes} & self.modules)
        for fn in self.jit.values():
            self.jit_fn(fn)
        if not texts and self.jit and not any(d for fn in self.jit.values() for d in fn.decorator_list
                                              if self.decorator_name(d) != "triton.jit"):
            self.budget.spend(sum(contract_budget.IDENTITY_DEF + contract_budget.IDENTITY_LINE
                                  * (fn.end_lineno - fn.lineno + 1) for fn in self.jit.values()))
            for line, why in contract_text.identity_problems(self.text, self.tree, self.jit):
                self.reasons.append((line, f"line {line}: {why}"))
        self.launcher_tables()
        self.judge_launchers()
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
            pairs = contract_config.config_literal(self.tree)
        except contract_config.ConfigError as e:
            return [str(e)]
        if pairs is None:
            return ["no module-level CONFIG literal (CONFIG = dict(...)) holding the tunables"]
        self.config_keys = {k for k, _ in pairs if isinstance(k, str)}
        return contract_config.problems(pairs)

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
                    self.add(node, f"annotation '{self.src(node.annotation)}' of '{name}' is not in the allow-list")
                if name != "CONFIG":
                    if node.value is None or not self.const(node.value):
                        self.add(node, f"module-level '{name}' is not a literal constant: no state "
                                       "across calls (outputs must not be cached)")
                    else:
                        self.consts.add(name)
            else:
                self.add(node, f"{self.label(node) if not isinstance(node, ast.Expr) else 'expression statement'} "
                               "at module level is not in the allow-list")
            for n in bound:   # shadowing a builtin or module: contract_names
                if n in seen:
                    self.add(node, f"'{n}' is defined twice (first at line {seen[n]})")
                seen.setdefault(n, node.lineno)

    @staticmethod
    def decorator_name(d) -> str:
        target = d.func if isinstance(d, ast.Call) else d
        return dotted(target) or contract_src(target)

    def decorated(self, fn: ast.FunctionDef) -> bool:
        """True for a @triton.jit function (anything decorated is judged as one, and rejected
        unless the decorator is triton.jit)."""
        allowed_kw = self.n["jit_decorator"] - {"triton.jit"}
        for d in fn.decorator_list:
            name = self.decorator_name(d)
            if name != "triton.jit":
                self.add(d, f"decorator '@{name}' is not in the allow-list{self.why(name.rpartition('.')[2])}; "
                            "only @triton.jit")
            elif isinstance(d, ast.Call) and (d.args or any(k.arg not in allowed_kw or not (self.const(k.value) or (
                    isinstance(k.value, ast.List) and all(map(self.const, k.value.elts)))) for k in d.keywords)):
                self.add(d, f"'@{self.src(d)}': only {', '.join(sorted(allowed_kw))} with literal values")
        if len(fn.decorator_list) > 1:
            self.add(fn.decorator_list[1], f"'{fn.name}' has {len(fn.decorator_list)} decorators: "
                                           "a kernel has exactly one, @triton.jit")
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
                self.add(ann, f"annotation '{self.src(ann)}' is not in the allow-list (only {', '.join(sorted(allowed))})")
        return skip

    # ------------------------------------------------------------------ @triton.jit bodies
    def jit_fn(self, fn: ast.FunctionDef) -> None:
        skip = self.signature(fn, jit=True)
        for a in fn.args.args:
            if a.arg in TRITON_OPTIONS - self.n["launch_options"]:
                self.add(fn, f"'{fn.name}': parameter '{a.arg}' is named like a Triton compile option "
                             f"(Triton reads every launch keyword as one){self.why(a.arg)}")
        local = {a.arg for a in fn.args.args} | {n.id for s in fn.body for n in ast.walk(s)
                                                  if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        known = self.jit_names   # with `local`: the names a kernel body may read
        parents = {id(c): p for p in ast.walk(fn) for c in ast.iter_child_nodes(p)}
        where = "in a @triton.jit function"
        for n in (x for s in fn.body for x in ast.walk(s)):
            self.budget.spend()
            if id(n) in skip:
                continue
            if not isinstance(n, JIT_NODES):
                self.add(n, f"{self.label(n)} is not allowed {where}")
                skip |= {id(d) for d in ast.walk(n)}   # one reason for the construct, not its parts
            elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id not in local and n.id not in known:
                self.add(n, f"name '{n.id}' is not in the allow-list {where}{self.why(n.id)}")
            elif isinstance(n, ast.Name) and n.id in self.n["jit_builtins"] - local \
                    and not (isinstance(parents.get(id(n)), ast.Call) and parents[id(n)].func is n):
                self.add(n, f"builtin '{n.id}' used as a value {where}: builtins are only called "
                            "(a Python callable handed to Triton runs in its compiler)")
            elif isinstance(n, ast.Attribute):
                self.jit_attribute(n, parents)
            elif isinstance(n, ast.Subscript) and not isinstance(n.ctx, ast.Load):
                self.add(n, f"item assignment ('{self.src(n)}') is not allowed {where}")
            elif isinstance(n, ast.Call):
                f = n.func
                if isinstance(f, ast.Name) and (f.id in local or f.id in known) and f.id not in self.jit \
                        and f.id not in self.n["jit_builtins"]:
                    self.add(n, f"call of '{f.id}' is not allowed {where} (only tl.*, other "
                                "@triton.jit functions and the listed builtins)")
                elif not isinstance(f, (ast.Name, ast.Attribute)):
                    self.add(n, f"call of a computed value ('{self.src(f)}') is not allowed {where}")
            elif isinstance(n, ast.For):
                it = dotted(n.iter.func) if isinstance(n.iter, ast.Call) else None
                if it not in ("range", "tl.range", "tl.static_range"):
                    self.add(n, f"for loops {where} run only over range, tl.range or tl.static_range")

    def jit_attribute(self, n: ast.Attribute, parents) -> None:
        if n.attr.startswith("_"):
            return self.add(n, f"attribute '.{n.attr}' is not in the allow-list")
        if not isinstance(n.ctx, ast.Load):
            return self.add(n, f"assignment to an attribute ('{self.src(n)}') is not allowed in a @triton.jit function")
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
