"""The contract's launcher rules: what each kind of launcher value (tensor, TMA descriptor,
kernel, grid, CONFIG, scalar; contract.infer proves the kinds) may be used for. A value whose kind
is not proved is refused wherever a number, a callee or a launch argument is needed.

A mixin of walk.Walker (which holds the file's names and the table); pure AST.
"""
from __future__ import annotations

import ast

from kernloop.contract.infer import (BUILTIN, CONF, DESC, FUNC, GRID, KERN, META, MOD, NOT_NUMBERS,
                                     SCAL, TEN, UNK, Typing, unproven)
from kernloop.contract.nodes import LAUNCHER_NODES, dotted

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


class Launchers(Typing):
    """The rules for the plain (launcher) functions of a kernel file, judged per typing context."""

    # ------------------------------------------------------------------ launchers: rules
    def launcher(self, fn: ast.FunctionDef, env: dict) -> None:
        skip = self.signature(fn, jit=False)
        parents = {id(c): p for p in ast.walk(fn) for c in ast.iter_child_nodes(p)}
        ty = lambda e: self.typeof(e, env)   # noqa: E731
        for n in (x for s in fn.body for x in ast.walk(s)):
            self.budget.spend()
            if id(n) in skip:
                continue
            p = parents.get(id(n))
            if not isinstance(n, LAUNCHER_NODES):
                self.add(n, f"{self.label(n)} is not in the allow-list in a launcher{self.why(type(n).__name__)}")
                skip |= {id(d) for d in ast.walk(n)}
            elif isinstance(n, ast.Name):
                self.launcher_name(n, p, ty(n), env)
            elif isinstance(n, ast.Attribute):
                why = self.launcher_attribute(n, p, env)
                if why:
                    self.add(n, why)
            elif isinstance(n, ast.Subscript):
                self.launcher_subscript(n, p, env)
            elif isinstance(n, ast.BinOp):
                if any(isinstance(o, ast.Constant) and isinstance(o.value, (str, bytes)) for o in (n.left, n.right)):
                    self.add(n, f"string formatting ('{self.src(n)}') is not in the allow-list")
                elif isinstance(n.op, ast.MatMult):
                    self.add(n, f"the @ operator ('{self.src(n)}') computes in torch, not Triton")
                else:
                    self.arithmetic(n, [n.left, n.right], env)
            elif isinstance(n, ast.AugAssign):
                self.arithmetic(n, [n.target, n.value], env, matmul=isinstance(n.op, ast.MatMult))
            elif isinstance(n, (ast.UnaryOp, ast.BoolOp, ast.Compare)):
                ops = n.values if isinstance(n, ast.BoolOp) else [n.operand] if isinstance(n, ast.UnaryOp) \
                    else ([] if all(isinstance(o, (ast.Is, ast.IsNot)) for o in n.ops) else [n.left, *n.comparators])
                bad = next((o for o in ops if unproven(ty(o))), None)
                if bad is not None:
                    self.add(n, f"an operation on a tensor ('{self.src(n)}') computes in torch and may read "
                                "its values on the host" if ty(bad) & (NOT_NUMBERS - {UNK}) else
                             f"an operation on '{self.src(bad)}', a value of unknown kind ('{self.src(n)}'): "
                             "only numbers are operands")
            elif isinstance(n, (ast.If, ast.IfExp, ast.Assert)) and (TEN in ty(n.test) or not ty(n.test) or UNK in ty(n.test)):
                self.add(n, f"branching on a tensor's value ('{self.src(n.test)}') is a host sync" if TEN in ty(n.test)
                         else f"branching on '{self.src(n.test)}', a value of unknown kind")
            elif isinstance(n, ast.Call):
                self.launcher_call(n, p, env)
            elif isinstance(n, ast.For):
                if not (isinstance(n.iter, ast.Call) and isinstance(n.iter.func, ast.Name)
                        and n.iter.func.id == "range" and BUILTIN in ty(n.iter.func)):
                    self.add(n, f"for loops in a launcher run only over range(...), not '{self.src(n.iter)}'")
            elif isinstance(n, ast.Lambda):
                grid = (isinstance(p, ast.Assign) and len(p.targets) == 1 and isinstance(p.targets[0], ast.Name)) \
                    or (isinstance(p, ast.Subscript) and p.slice is n)
                a = n.args
                if not grid or len(a.args) != 1 or a.defaults or a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs:
                    self.add(n, "lambda is in the allow-list only as a launch grid: lambda META: (...)")
            elif isinstance(n, ast.Expr) and not isinstance(n.value, (ast.Call, ast.Constant)):
                self.add(n, f"expression statement '{self.src(n)}' is not in the allow-list")
            elif isinstance(n, ast.Assign) and any(isinstance(t, (ast.Tuple, ast.List)) for t in n.targets) \
                    and not isinstance(n.value, (ast.Tuple, ast.List)) and not isinstance(n.value, ast.Call) \
                    and (TEN in ty(n.value) or UNK in ty(n.value)):
                self.add(n, f"unpacking a tensor ('{self.src(n.value)}') reads its values")

    def arithmetic(self, n, operands: list, env: dict, matmul: bool = False) -> None:
        kinds = [self.typeof(o, env) for o in operands]
        if matmul or any(k & (NOT_NUMBERS - {UNK}) for k in kinds):
            self.add(n, f"arithmetic on a tensor ('{self.src(n)}') computes in torch, not Triton")
        elif any(unproven(k) for k in kinds):
            bad = operands[next(i for i, k in enumerate(kinds) if unproven(k))]
            self.add(n, f"arithmetic on '{self.src(bad)}', a value of unknown kind ('{self.src(n)}'): "
                        "only numbers are operands")

    def launcher_subscript(self, n: ast.Subscript, p, env: dict) -> None:
        vt = self.typeof(n.value, env)
        if not isinstance(n.ctx, ast.Load):
            self.add(n, f"item assignment ('{self.src(n)}') is not in the allow-list: no mutation")
        elif KERN in vt:
            if not (isinstance(p, ast.Call) and p.func is n):
                self.add(n, f"'{self.src(n)}': a kernel is subscripted only to launch it, k[grid](...)")
            elif not self.typeof(n.slice, env) or self.typeof(n.slice, env) & (NOT_NUMBERS - {GRID}):
                self.add(n, f"grid '{self.src(n.slice)}' is not a tuple of sizes or lambda META: (...)")
        elif vt & (NOT_NUMBERS - {KERN, UNK}):
            self.add(n, f"indexing a tensor ('{self.src(n)}') is not in the allow-list "
                        "(views come from the listed methods; the op runs in Triton)")
        elif not vt or UNK in vt:
            self.add(n, f"indexing '{self.src(n.value)}', a value of unknown kind ('{self.src(n)}')")
        elif META in vt and not (isinstance(n.slice, ast.Constant) and n.slice.value in self.constexpr_names):
            self.add(n, f"'{self.src(n)}': a grid reads from META only a kernel's tl.constexpr "
                        "parameters (its other entries are the launch's arguments, tensors too)")
        elif unproven(self.typeof(n.slice, env)):
            self.add(n, f"index '{self.src(n.slice)}' of '{self.src(n)}' is not a number "
                        "(a tensor as an index reads its value on the host)")

    def launcher_name(self, n: ast.Name, p, t: set, env: dict) -> None:
        if not isinstance(n.ctx, ast.Load):
            if n.id in self.shadowed:
                self.add(n, f"assignment to '{n.id}' shadows a module-level name or builtin")
            return
        called = isinstance(p, ast.Call) and p.func is n
        if not t:
            self.add(n, f"name '{n.id}' is not in the allow-list{self.why(n.id)}" if n.id not in env else
                     f"'{n.id}' holds only values of unknown kind: the launcher typing cannot prove what it is")
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
            return f"assignment to an attribute ('{self.src(n)}') is not in the allow-list: no mutation"
        called = isinstance(p, ast.Call) and p.func is n
        path = self.module_attribute(n, env)
        if path is not None:
            if isinstance(p, ast.Attribute):
                return None   # judged at the outermost attribute of the chain
            head, _, rest = path.partition(".")
            if path in self.module_calls:
                return None if called else f"'{path}' used as a value: functions are only called " \
                                           "(an alias would hide what it computes)"
            if rest in self.module_values.get(head, ()):
                return None if not called else f"'{path}' is not a function"
            return f"'{path}' is not in the allow-list{self.why(n.attr)}"
        vt = self.typeof(n.value, env)
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
                self.add(n, f"**-unpacking of '{self.src(k.value)}' is not in the allow-list (only **CONFIG in a launch)")
        if isinstance(f, ast.Subscript) and KERN in self.typeof(f.value, env):
            if not isinstance(parent, ast.Expr):
                self.add(n, f"the value of a launch ('{self.src(n)}') is not in the allow-list (a compiled-kernel handle)")
            self.launch_args(n, env)
            return self.launch_keywords(n, env)   # a launch: tensors are its arguments
        if isinstance(f, ast.Name):
            t = self.typeof(f, env)
            if KERN in t:
                return self.add(n, f"'{f.id}(...)': a kernel is called only as a launch, {f.id}[grid](...)")
            if f.id in env:
                if GRID not in t:   # a grid lambda called: launcher_name says so
                    self.add(n, f"call of '{f.id}', a local value: only the listed functions and "
                                "launcher functions are called, by their own names")
                return
            if FUNC in t:
                return self.helper_call(n, f.id)   # held to the same rules with what it is given
            if not t or MOD in t and f.id != "TensorDescriptor":
                return   # an unknown name, or a module used as a value: reported as such
            if BUILTIN not in t and f.id != "TensorDescriptor":
                return self.add(n, f"call of '{f.id}' is not in the allow-list (it is not a function)")
        elif not isinstance(f, ast.Attribute):
            return self.add(n, f"call of a computed value ('{self.src(f)}') is not in the allow-list")
        elif self.launcher_attribute(f, n, env):
            return   # the callee itself is rejected; its arguments add nothing
        kinds = [self.typeof(a, env) for a in args]
        tensor_args = [a for a, k in zip(args, kinds) if k & {TEN, DESC}]
        if tensor_args and path not in TENSOR_ARGS_OK and not (path == "len" and len(args) == 1):
            self.add(n, f"a tensor passed to '{path or self.src(f)}' ('{self.src(tensor_args[0])}'): only "
                        "kernels, descriptors, *_like allocation, len() and launcher functions take tensors")
        unknown = [a for a, k in zip(args, kinds) if not k or UNK in k]
        if unknown:
            self.add(n, f"'{self.src(unknown[0])}', a value of unknown kind, passed to '{path or self.src(f)}'")

    def helper_call(self, n: ast.Call, name: str) -> None:
        """A call of a launcher function gives each of its parameters one argument, and closes
        no cycle (a recursive helper cannot be typed)."""
        if id(n) in self.recursive:
            self.add(n, f"recursive call of '{name}' (it is reached again from itself): recursion is not "
                        "in the allow-list in a launcher (its values' kinds cannot be proved)")
        params = [a.arg for a in self.launchers[name].args.args]
        given = [*params[:len(n.args)], *(k.arg for k in n.keywords)]
        if len(n.args) > len(params) or sorted(given) != sorted(params):
            self.add(n, f"call of '{name}' does not give each of its parameters ({', '.join(params)}) "
                        "exactly one argument")

    def launch_args(self, n: ast.Call, env: dict) -> None:
        """A launch passes tensors, descriptors and numbers: any other Python object (a kernel,
        a function, a builtin, a module, a grid lambda, CONFIG itself, a value of unknown kind)
        reaches Triton's code generator as a constexpr, and a callable one runs there at compile time."""
        for a in [*n.args, *(k.value for k in n.keywords if k.arg is not None)]:
            t = self.typeof(a, env)
            kinds = (t & {KERN, FUNC, BUILTIN, MOD, GRID, CONF, META, UNK}) or ({UNK} if not t else set())
            if kinds:
                self.add(n, f"'{self.src(a)}' ({', '.join(sorted(kinds))}) passed to a kernel launch: "
                            "a kernel takes tensors, descriptors and numbers")

    def launch_keywords(self, n: ast.Call, env: dict) -> None:
        """A launch's keywords (and the keys of a **CONFIG it splats) are the kernel's parameters
        or the listed launch options: Triton hands any other one to its compiler, where
        ir_override= compiles IR read from a file, extern_libs= links a bitcode file and
        ptx_options= passes flags to ptxas."""
        for k in n.keywords:
            splat = k.arg is None and CONF in self.typeof(k.value, env)
            for name in sorted(self.config_keys) if splat else [k.arg] if k.arg else []:
                if name not in self.launch_ok:
                    self.add(n, f"launch keyword '{name}'{' (a CONFIG key, splatted)' if splat else ''} is "
                                "neither a parameter of a kernel here nor a listed launch option"
                                f"{self.why(name)}")

    def launcher_tables(self) -> None:
        """Names the launcher rules look up, once per file: what a local may not shadow, the
        keywords a launch may pass, the kernels' tl.constexpr parameters (what META may be asked for)."""
        self.shadowed = self.module_names | self.n["builtins"] | self.consts | set(self.jit) \
            | set(self.launchers) | {"CONFIG"}
        self.launch_ok = self.n["launch_options"] | ({a.arg for fn in self.jit.values() for a in fn.args.args}
                                                     - TRITON_OPTIONS)
        self.constexpr_names = {a.arg for fn in self.jit.values() for a in fn.args.args
                                if dotted(a.annotation) == "tl.constexpr"}
