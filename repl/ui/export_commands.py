""":export [PATH] [--force] [--op] — the current kernel as a module to ship (repl/engine/export.py), listed in the
command table of commands.py; it works on ``session.attempt`` as :save does."""

from rich.text import Text

from repl.core.kernel_file import why_not_written
from repl.ui.command_parsing import CommandError
from repl.ui.console import terminal_safe


def export_command(session, arguments):
    """Write the current kernel, once :run found it correct, as a standalone module needing only torch and triton:
    its Model is a drop-in for the module's, runs the kernel only on the inputs it was verified for (:run says
    which) and the PyTorch code otherwise, and loads the module's state_dict; it calls the kernel directly. --op:
    the op form, Model calls the kernel as one torch.library.custom_op, so torch.compile treats it as one operation
    (verified on the CPU (Triton's interpreter); its GPU test failed on an H200 on 2026-12-02 and is not yet
    diagnosed). --force overwrites an existing file."""
    from repl.engine.export import OP_FORM_CAVEAT, ExportRefused, export_kernel, export_refusal

    options = {"--force", "--op"}
    paths = [word for word in arguments if word not in options]
    if len(paths) > 1 or any(word.startswith("--") for word in paths):
        raise CommandError("usage: :export [PATH] [--force] [--op]")
    force, op = "--force" in arguments, "--op" in arguments
    attempt = current_attempt(session, export_refusal, "not exported")
    target = paths[0] if paths else exported_name(attempt.module.suggested_filename(attempt.source_name))
    reply = attempt.reply
    try:
        written = export_kernel(target, attempt.module.code, attempt.kernel, attempt.check, force=force,
                                model=reply.model, settings=reply.settings, problem_name=attempt.source_name,
                                tuning=attempt.tuning, op=op)
    except ExportRefused as refused:
        raise CommandError(f"not exported: {refused}") from None
    except FileExistsError:
        again = " --op" if op else ""
        raise CommandError(f"{target} exists; :export {target} --force{again} overwrites it") from None
    except OSError as error:
        raise CommandError(f"could not write {target}: {why_not_written(target, error)}; the kernel is still here "
                           "(:show)") from None
    session.console.print(f"Exported {written.resolve()}", style="ok")
    summary = terminal_safe(str(attempt.check.valid_for.get("summary")))
    session.console.print(Text(f"Its Model runs the kernel for {summary}, PyTorch otherwise (and whenever autograd "
                               "is on).", style="hint"))
    if op:
        session.console.print(f"The op form (--op) is {OP_FORM_CAVEAT}.", style="hint")


def current_attempt(session, refusal_of, not_done: str):
    """The current attempt, or CommandError: no kernel, or refusal_of(its check) ("not exported: ...")."""
    attempt = session.attempt
    if attempt is None or attempt.kernel is None:
        raise CommandError("no kernel yet: paste a module first")
    refusal = refusal_of(attempt.check)
    if refusal:
        raise CommandError(f"{not_done}: {refusal}")
    return attempt


def exported_name(kernel_name: str) -> str:
    """relu_kernel.py -> relu_kernel_export.py: never the name :save would write."""
    stem = kernel_name[:-3] if kernel_name.endswith(".py") else kernel_name
    return f"{stem}_export.py"
