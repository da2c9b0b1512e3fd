"""Fixtures shared by the tests."""

import os
import sys
import uuid
from pathlib import Path

import pytest

# One intra-op thread per torch process here and in those it starts: several run at once on few cores, where
# teams of threads wait on each other (a tiny model decodes about 8 times slower with 2 on 2 busy cores).
os.environ.setdefault("OMP_NUM_THREADS", "1")

# The terminals the tests start are sized by their pty alone: pytest-xdist's workers export COLUMNS=80 and LINES=24,
# which rich (as the user asked, when they set them) would take over the pty's real size.
for variable in ("COLUMNS", "LINES"):
    os.environ.pop(variable, None)

# tests/ is not a package; putting it on sys.path lets tests `import tiny_models` under any pytest import mode.
TESTS_DIR = Path(__file__).resolve().parent
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))


@pytest.fixture(autouse=True, scope="session")
def isolated_data_directory(tmp_path_factory):
    """No test writes the user's own session log or input history: KERNELLLM_HOME is a temporary folder (a test, or
    a subprocess it starts, may still set its own)."""
    if "KERNELLLM_HOME" not in os.environ:
        os.environ["KERNELLLM_HOME"] = str(tmp_path_factory.mktemp("kernelllm-home"))


# --- Tiny KernelLLM stand-ins (tests/tiny_models.py; imported lazily, it pulls in torch and transformers) ---

@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """Random-weight tiny Llama + Llama-3-style tokenizer; loads with AutoTokenizer/AutoModelForCausalLM."""
    import tiny_models

    return tiny_models.build_random_tiny_model(tmp_path_factory.mktemp("tiny-random-model"))


@pytest.fixture(scope="session")
def trained_model_dir() -> Path:
    """Tiny Llama that answers any KernelBench prompt with tiny_models.PREPARED_REPLY, then END_OF_TEXT.

    Cached on disk ($KERNELLLM_TEST_CACHE or ~/.cache/kernelllm-tests); the first build takes about a minute.
    Shared: do not write into it.
    """
    import tiny_models

    return tiny_models.trained_kernel_model_dir()


@pytest.fixture(scope="session")
def relu_module_source() -> str:
    """A KernelBench-style module (class Model with torch.relu, small signed inputs) that no training prompt used."""
    import tiny_models

    return tiny_models.RELU_MODULE


@pytest.fixture(scope="module")
def random_model(tiny_model_dir):
    """The tiny random-weight model loaded on the CPU (repl.generation.model_loading.LoadedModel), once per test
    module."""
    from repl.generation.model_loading import load_model

    return load_model(str(tiny_model_dir), device="cpu")


@pytest.fixture(scope="module")
def trained_model(trained_model_dir):
    """The tiny trained model loaded on the CPU (a LoadedModel), once per test module."""
    from repl.generation.model_loading import load_model

    return load_model(str(trained_model_dir), device="cpu")


# --- The checker stand-in (tests/stand_in_checker.py): injected, never patched into a module ---

@pytest.fixture
def stand_in_checks():
    """stand_in_checks(decide) -> a CheckPool of stand-in judges (no judge process), for Engine(checks=...) or
    evaluate(checks=...); decide(reference, kernel, device=..., **options) gives each CheckResult. Closed after the
    test."""
    from stand_in_checker import stand_in_checks as make

    pools = []

    def checks(decide):
        pools.append(make(decide))
        return pools[-1]

    yield checks
    for pool in pools:
        pool.close()


# --- One working Checker for the checker's suite cases (tests/checker_suite.py), shared by the session ---

@pytest.fixture(scope="session")
def hang_marker():
    """A word that relu_hangs.py puts on the command line of the child process it starts, to find it by."""
    from processes import processes_with

    marker = f"kernelllm-test-{uuid.uuid4().hex}"
    os.environ["KERNELLLM_TEST_MARKER"] = marker
    yield marker
    del os.environ["KERNELLLM_TEST_MARKER"]
    for pid in processes_with(marker):  # only if a test failed to see them killed
        os.kill(pid, 9)


@pytest.fixture(scope="session")
def suite_checker(hang_marker):
    """A Checker on the CPU for the tests that need a working one (each new Checker starts its judges and their
    fork servers: seconds of CPU). Tests of a Checker's own life, options or environment make their own.

    After hang_marker: a judge copies the environment as it starts, and its first one starts here; started before the
    marker was set, its candidates' children would carry none, and no test could see them outlive a check."""
    from repl.checker import Checker

    with Checker(device="cpu", jobs=2) as checker:
        yield checker


@pytest.fixture(scope="session")
def suite_checked(suite_checker):
    """suite_checked(cases) -> {case name: CheckResult} for those cases of checker_suite, each checked once per
    session on the CPU (the ones not checked yet two at a time, each check a separate worker process)."""
    from checker_suite import check_all

    results = {}

    def checked(cases: dict) -> dict:
        missing = {name: case for name, case in cases.items() if name not in results}
        if missing:
            results.update(check_all(device="cpu", at_once=2, cases=missing, checker=suite_checker))
        return {name: results[name] for name in cases}

    return checked
