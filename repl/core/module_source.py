"""What a pasted module is, judged from its source alone (it is parsed, never executed here)."""

import ast
import re
import threading
from dataclasses import dataclass, field

# CPython 3.11 keeps ast.parse's recursion depth in one per-interpreter counter: a garbage collection that runs a
# __del__ in mid-parse lets another thread's parse move it, and one of them fails with "SystemError: AST constructor
# recursion depth mismatch". :best and eval check kernels from several threads, so every parse here takes turns.
_PARSE_LOCK = threading.RLock()


def parse_python(code: str) -> ast.Module:
    """ast.parse, safe to call from several threads at once (see _PARSE_LOCK)."""
    with _PARSE_LOCK:
        return ast.parse(code)


@dataclass
class ModuleSource:
    code: str
    syntax_error: str | None = None  # one line, e.g. "line 3: invalid syntax"
    module_classes: list[str] = field(default_factory=list)  # classes deriving from *Module with a forward()
    functions: set[str] = field(default_factory=set)
    main_operation: str | None = None  # first call in Model.forward, e.g. "relu" for torch.relu(x)

    @property
    def is_python(self) -> bool:
        return self.syntax_error is None

    @property
    def is_module(self) -> bool:
        """Parses and defines at least one nn.Module subclass with forward(): what Enter submits."""
        return self.is_python and bool(self.module_classes)

    @property
    def runnable(self) -> bool:
        """Has what the checker needs to build and call it."""
        return self.is_module and not self.missing_functions

    @property
    def missing_functions(self) -> list[str]:
        """Which of get_inputs and get_init_inputs, that a check builds and calls the module with, it lacks."""
        return [name for name in ("get_inputs", "get_init_inputs") if name not in self.functions]

    @property
    def model_class(self) -> str | None:
        if "Model" in self.module_classes:
            return "Model"
        return self.module_classes[-1] if self.module_classes else None

    # problem() and warning() are said by every front end (the session, the command line), so they name no command
    # of any one of them; the session adds its own hint (repl/ui/session.py).

    def problem(self) -> str | None:
        """A one-line reason this cannot be sent to the model, or None."""
        if self.syntax_error and _looks_like_prose(self.code):
            return ("This looks like prose, not Python; the model writes kernels for a PyTorch module (class "
                    "Model(nn.Module) with get_inputs() and get_init_inputs()), it does not chat.")
        if self.syntax_error:
            return f"Not valid Python ({self.syntax_error})."
        if not self.module_classes:
            return ("No nn.Module subclass with a forward() method found; the model writes kernels for a module such "
                    "as `class Model(nn.Module)`.")
        return None

    def warning(self) -> str | None:
        """A one-line caveat for a module that can be sent but not checked."""
        if not self.is_module:
            return None
        missing = self.missing_functions
        if missing:
            return (f"No {' or '.join(f'{name}()' for name in missing)}: a kernel can be generated, but not checked "
                    "without them.")
        if self.model_class != "Model":
            return (f"No class named Model; the prompt asks the model to optimise `Model`, and checks compare the "
                    f"kernel with `{self.model_class}`.")
        return None

    def suggested_filename(self, source_stem: str | None = None) -> str:
        """Default file name for the kernel: the file it came from, else the class name, else (for the generic
        KernelBench name ``Model``) the first operation its forward() calls; plus ``_triton.py``."""
        if source_stem:
            stem = source_stem
        elif self.model_class and self.model_class != "Model":
            stem = _snake_case(self.model_class)
        else:
            stem = self.main_operation or "model"
        return f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', stem)}_triton.py"


def as_module_source(module: "ModuleSource | str") -> "ModuleSource":
    """A module as parsed: one already parsed is taken as it is, a source is parsed once here."""
    return module if isinstance(module, ModuleSource) else inspect_module_source(module)


def inspect_module_source(code: str) -> ModuleSource:
    source = ModuleSource(code=code)
    try:
        tree = parse_python(code)
    except SyntaxError as error:
        source.syntax_error = f"line {error.lineno}: {error.msg}"
        return source
    except (MemoryError, RecursionError, ValueError) as error:  # nested past the parser's limits; a NUL byte
        source.syntax_error = f"cannot be parsed ({type(error).__name__})"
        return source
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            source.functions.add(node.name)
        elif isinstance(node, ast.ClassDef) and _derives_from_module(node) and _has_forward(node):
            source.module_classes.append(node.name)
            if node.name == "Model" or source.main_operation is None:
                source.main_operation = _first_call_name(node)
    return source


_CODE_LINE = re.compile(r"^\s*(import |from \S+ import |class |def |@|return\b|if |for |while |with |#)|[=()\[\]:]\s*$")


def _looks_like_prose(code: str) -> bool:
    """Sentences rather than code: most non-blank lines hold several words and no line looks like a statement."""
    lines = [line for line in code.splitlines() if line.strip()]
    if not lines or any(_CODE_LINE.search(line) for line in lines):
        return False
    def sentence(line: str) -> bool:
        tokens = line.split()
        words = [token for token in tokens if re.fullmatch(r"[A-Za-z][A-Za-z',.?!]*", token)]
        return len(tokens) >= 4 and len(words) * 4 >= len(tokens) * 3

    return sum(map(sentence, lines)) * 2 >= len(lines)


def _first_call_name(node: ast.ClassDef) -> str | None:
    forward = next(item for item in node.body if isinstance(item, ast.FunctionDef) and item.name == "forward")
    for inner in ast.walk(forward):
        if isinstance(inner, ast.Call):
            function = inner.func
            name = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", None)
            if name and name not in {"super", "view", "reshape", "contiguous", "size"}:
                return _snake_case(name)
    return None


def _derives_from_module(node: ast.ClassDef) -> bool:
    for base in node.bases:
        name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")
        if name.endswith("Module"):
            return True
    return False


def _has_forward(node: ast.ClassDef) -> bool:
    return any(isinstance(item, ast.FunctionDef) and item.name == "forward" for item in node.body)


def _snake_case(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
