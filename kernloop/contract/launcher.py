"""The contract's launcher rules: the type of every launcher value (tensor, TMA descriptor,
kernel, grid, CONFIG, scalar), inferred to a fixpoint, and what each kind may be used for.

A mixin of contract_walk.Walker (which holds the file's names and the table); pure AST.
"""
from __future__ import annotations

import ast

from kernloop.contract.nodes import LAUNCHER_NODES, dotted
from kernloop.contract.nodes import src as _src


TEN, DESC, KERN, GRID, CONF, SCAL, FUNC, BUILTIN, MOD, META = (
    "tensor", "descriptor", "kernel", "grid", "config", "scalar", "function", "builtin",
    "module", "meta")
NOT_NUMBERS = {TEN, DESC, KERN, GRID, FUNC, BUILTIN, MOD}   # never operands of arithmetic
# What Triton 3.x reads as compile options from a launch's keywords (CUDAOptions, HIPOptions;
# tests/test_contract.py holds this against the installed Triton). It reads them from EVERY
# keyword, the kernel's own parameters too, so no kernel parameter may carry one of these names
# unless the table lists it as a launch option.
TRITON_OPTIONS = frozenset({
    "allow_flush_denorm", "allowed_dot_input_precisions", "arch", "backend_name", "debug",
    "default_dot_input_precision", "deprecated_fp8_dot_operand_dtypes", "enable_fp_fusion",
    "enable_reflect_ftz", "extern_libs", "instrumentation_mode", "ir_override", "kpack",
    "launch_cooperative_grid", "launch_pdl", "llvm_fn_attrs", "matrix_instr_nonkdim",
    "max_num_imprecise_acc_default", "maxnreg", "num_ctas", "num_stages", "num_warps",
    "ptx_options", "ptx_version", "sanitize_overflow", "schedule_hint", "supported_fp8_dtypes",
    "warp_size", "waves_per_eu"})
TENSOR_ARGS_OK = {"torch.empty_like", "torch.zeros_like", "torch.full_like",
                  "TensorDescriptor.from_tensor", "TensorDescriptor"}


class Launchers:
    """Type inference and rules for the plain (launcher) functions of a kernel file."""

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
        while True:   # to the fixpoint: types only grow, over a finite set (a cap let late ones in)
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
        state = lambda: ({k: [frozenset(x) for x in v] for k, v in self.params.items()},   # noqa: E731
                         {k: frozenset(v) for k, v in self.returns.items()})
        while True:   # to the fixpoint, however deep the chain of helpers
            before = state()
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
            if state() == before:
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
                elif META in vt and not (isinstance(n.slice, ast.Constant) and n.slice.value in self.constexprs()):
                    self.add(n, f"'{_src(n)}': a grid reads from META only a kernel's tl.constexpr "
                                "parameters (its other entries are the launch's arguments, tensors too)")
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
            self.launch_args(n, env)
            return self.launch_keywords(n, env)   # a launch: tensors are its arguments
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

    def launch_args(self, n: ast.Call, env: dict) -> None:
        """A launch passes tensors, descriptors and numbers: any other Python object (a kernel,
        a function, a builtin, a module, a grid lambda, CONFIG itself) reaches Triton's code
        generator as a constexpr, and a callable one runs there at compile time."""
        for a in [*n.args, *(k.value for k in n.keywords if k.arg is not None)]:
            kinds = self.typeof(a, env) & {KERN, FUNC, BUILTIN, MOD, GRID, CONF, META}
            if kinds:
                self.add(n, f"'{_src(a)}' ({', '.join(sorted(kinds))}) passed to a kernel launch: "
                            "a kernel takes tensors, descriptors and numbers")

    def launch_keywords(self, n: ast.Call, env: dict) -> None:
        """A launch's keywords (and the keys of a **CONFIG it splats) are the kernel's parameters
        or the listed launch options: Triton hands any other one to its compiler, where
        ir_override= compiles IR read from a file, extern_libs= links a bitcode file and
        ptx_options= passes flags to ptxas."""
        ok = self.n["launch_options"] | ({a.arg for fn in self.jit.values() for a in fn.args.args} - TRITON_OPTIONS)
        for k in n.keywords:
            splat = k.arg is None and CONF in self.typeof(k.value, env)
            for name in sorted(self.config_keys) if splat else [k.arg] if k.arg else []:
                if name not in ok:
                    self.add(n, f"launch keyword '{name}'{' (a CONFIG key, splatted)' if splat else ''} is "
                                "neither a parameter of a kernel here nor a listed launch option"
                                f"{self.why(name)}")

    def constexprs(self) -> set:
        """Names of the kernels' tl.constexpr parameters: what META may be asked for."""
        return {a.arg for fn in self.jit.values() for a in fn.args.args if dotted(a.annotation) == "tl.constexpr"}
