"""Triton's own compiler front end, for a GPU, on a machine without one: what a GPU would reject is rejected here too.

Triton's interpreter (``TRITON_INTERPRET=1``) runs a ``@triton.jit`` body as Python: a body that calls
``torch.relu`` on its pointers, loops over Python objects or prints passes there, and a GPU's compiler refuses it.
So on the CPU every kernel the candidate launches (once per kernel and specialisation) is also taken through the
real front end for an H100 (``GPUTarget("cuda", 90, 32)``): the code generator from the AST to TTIR, then the TTIR
passes. None of it needs a driver: the arguments are bound with the backend's own specialisation rules
(triton.runtime.jit's binder) from the launch's actual arguments. It stops there (the TTGIR passes, which would
double the cost, and LLVM and ptxas). About 20-30 ms a kernel on a loaded 2-core machine (0.1 s for the process's
first, paid by triton_warmup.py while a spare waits).

Under the interpreter, ``@triton.jit`` gives ``InterpretedFunction`` objects; the front end needs ``JITFunction``
ones, for the kernel and for every jit function it calls (``triton_helpers.maximum``, and ``tl.zeros``, which
triton.language itself defines with ``@jit``): ``FrontEndFunction`` stands in for each, through the kernel's capture
scope and, while the front end runs, in every module it can reach. The interpreter also patches triton.language's
builtins to its own while a kernel calls a jit helper, and does not always put them back (triton 3.9's
``InterpretedFunction.__call__``): the front end runs with the builtins as they were when the process got ready.
"""

import warnings

TARGET = ("cuda", 90, 32)


class FrontEndRejected(Exception):
    """A GPU's Triton compiler would not compile this kernel (kind "compile_error"), or its launcher would not take
    these arguments ("runtime_error"); the message names it and says why, in one line."""

    def __init__(self, message: str, kind: str = "compile_error"):
        super().__init__(message)
        self.kind = kind


_functions: dict = {}
_function_class = None


def _front_end_function(fn):
    global _function_class
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    if _function_class is None:
        class FrontEndFunction(JITFunction):
            def get_capture_scope(self):
                scope = dict(super().get_capture_scope())
                for name, value in scope.items():
                    if isinstance(value, InterpretedFunction):
                        scope[name] = _front_end_function(value.fn)
                return scope

        _function_class = FrontEndFunction
    if fn not in _functions:
        _functions[fn] = _function_class(fn)
    return _functions[fn]


_MISSING = object()


class PristineTriton:
    """triton.language as the compiler expects it, while the front end runs: the builtins as they were when this was
    made (before any candidate code), jit functions of reachable modules as FrontEndFunctions. Restored after."""

    def __init__(self):
        import triton.language as tl

        self.objects = [tl, tl.core, tl.tensor, tl.math, tl.dtype, tl.condition, tl.standard,
                        getattr(tl.core, "tensor_descriptor_base", tl.tensor)]
        self.saved = [(obj, dict(vars(obj))) for obj in self.objects]
        self.jit_names: dict[int, list[str]] = {}

    def __call__(self, kernel_globals: dict):
        return _Swap(self, kernel_globals)


class _Swap:
    def __init__(self, pristine: PristineTriton, kernel_globals: dict):
        self.pristine, self.kernel_globals = pristine, kernel_globals
        self.undo: list[tuple[object, str, object]] = []

    def _set(self, obj, name: str, value) -> None:
        self.undo.append((obj, name, vars(obj).get(name, _MISSING)))
        setattr(obj, name, value)

    def __enter__(self):
        import inspect

        from triton.runtime.interpreter import InterpretedFunction

        for obj, saved in self.pristine.saved:
            current = dict(vars(obj))
            for name, value in saved.items():
                if current.get(name, _MISSING) is not value and not name.startswith("__dict"):
                    try:
                        self._set(obj, name, value)
                    except (AttributeError, TypeError):
                        pass
            for name in set(current) - set(saved):
                try:
                    self.undo.append((obj, name, current[name]))
                    delattr(obj, name)
                except (AttributeError, TypeError):
                    self.undo.pop()
        modules = {id(obj): obj for obj in self.pristine.objects if inspect.ismodule(obj)}
        for value in self.kernel_globals.values():
            if inspect.ismodule(value):
                modules[id(value)] = value
        for module in modules.values():
            names = self.pristine.jit_names.get(id(module))
            if names is None:  # a module's jit functions are defined when it is imported: listed once
                names = [name for name, value in vars(module).items() if isinstance(value, InterpretedFunction)]
                self.pristine.jit_names[id(module)] = names
            for name in names:
                value = vars(module).get(name)
                if isinstance(value, InterpretedFunction):
                    self._set(module, name, _front_end_function(value.fn))
        return self

    def __exit__(self, *exc_info) -> None:
        for obj, name, value in reversed(self.undo):
            try:
                if value is _MISSING:
                    delattr(obj, name)
                else:
                    setattr(obj, name, value)
            except (AttributeError, TypeError):
                pass
        self.undo = []


class FrontEndCheck:
    def __init__(self):
        from triton.backends.compiler import GPUTarget
        from triton.compiler.compiler import make_backend

        self.pristine = PristineTriton()

        self.target = GPUTarget(*TARGET)
        self.backend = make_backend(self.target)
        self.binders: dict = {}
        self.checked: set = set()
        self.rejected: FrontEndRejected | None = None  # the first: it stands, whatever the candidate did with it

    def reject(self, message: str, kind: str = "compile_error") -> FrontEndRejected:
        self.rejected = self.rejected or FrontEndRejected(message, kind)
        return self.rejected

    def check(self, kernel, args, kwargs) -> str | None:
        """Raise FrontEndRejected if the kernel, with these launch arguments, does not compile for a GPU. Return a
        message when a GPU's launcher would refuse the arguments: if the interpreter then runs the launch anyway,
        the caller rejects it with that message (if it fails too, its own error stands, as on a GPU)."""
        fn = getattr(kernel, "fn", None)
        if fn is None or not callable(fn):
            return None
        options = {key: value for key, value in kwargs.items() if key not in ("grid", "warmup")}
        try:
            jit = _front_end_function(fn)
            if fn not in self.binders:
                from triton.runtime.jit import create_function_from_signature

                self.binders[fn] = create_function_from_signature(jit.signature, jit.params, self.backend)
            bound, specialization, parsed = self.binders[fn](*args, **options)
        except Exception as error:  # a GPU's launcher binds the arguments the same way
            return f"Triton's launcher for a GPU refuses {fn.__name__}'s arguments: {_first_line(error)}"
        key = (fn, repr(specialization), repr(sorted((k, repr(v)) for k, v in options.items())))
        if key in self.checked:
            return None
        try:
            self.compile(jit, bound, specialization, parsed, options)
        except Exception as error:
            raise self.reject(f"Triton's compiler for a GPU rejects {fn.__name__}: {_first_line(error)}") from None
        self.checked.add(key)
        return None

    def compile(self, jit, bound, specialization, parsed, options) -> None:
        from triton import knobs

        backend = self.backend
        interpreting = knobs.runtime.interpret
        # Triton's constexpr functions answer differently under the interpreter (no constexpr wrapping): the front
        # end must see the compiler's world while it runs.
        knobs.runtime.interpret = False
        try:
            with self.pristine(jit.fn.__globals__):
                self._compile(jit, bound, specialization, parsed, options, backend)
        finally:
            knobs.runtime.interpret = interpreting

    def _compile(self, jit, bound, specialization, parsed, options, backend) -> None:
        from triton._C.libtriton import ir
        from triton.compiler import ASTSource

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile_options, signature, constexprs, attrs = jit._pack_args(backend, options, bound, specialization,
                                                                           parsed)
            source = ASTSource(jit, signature, constexprs, attrs)
            context = ir.context()
            ir.load_dialects(context)
            backend.load_dialects(context)
            module = source.make_ir(self.target, compile_options, backend.get_codegen_implementation(compile_options),
                                    backend.get_module_map(), context)
            stages: dict = {}
            backend.add_stages(stages, compile_options, source.language)
            metadata: dict = {}
            stages["ttir"](module, metadata)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    # Triton's CompilationError: "at 2:4:", the source lines, a caret, then the cause on the last line.
    detail = lines[-1] if lines else type(error).__name__
    where = lines[0] if lines and lines[0].startswith("at ") else ""
    message = f"{detail} ({where.rstrip(':')})" if where else detail
    return message[:300]
