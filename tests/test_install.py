"""`pip install .` (issue 24 item 10): the `kernelllm` command does what `python kernelllm.py` does and
`from kernelllm import KernelLLM` works from anywhere; the package's dependencies are requirements.txt's, read from
it (the one list CI and the README install from), never a copy that could drift."""

import json
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

from repl import __version__

REPO = Path(__file__).resolve().parents[1]
CASES = REPO / "tests" / "checker_cases"


def requirement_lines(path: Path) -> list[str]:
    lines = [line.split("#")[0].strip() for line in path.read_text().splitlines()]
    return [line.replace(" ", "") for line in lines if line and not line.startswith("-")]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A venv with the package installed from a copy of the tree, as `pip install .` does; its bin folder. The
    venv sees the packages of the Python running the tests (a .pth file: no network, and pip and setuptools come
    from there), whether that Python is a venv or not."""
    pytest.importorskip("setuptools", reason="building the package needs setuptools (requirements-dev.txt has it)")
    root = tmp_path_factory.mktemp("install")
    source = root / "source"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(".git", "build", "*.egg-info", "__pycache__",
                                                                ".pytest_cache", ".kernelllm-home"))
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (site_packages,) = (venv / "lib").glob("python*/site-packages")
    (site_packages / "tests_parent_packages.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    install = subprocess.run([venv / "bin" / "python", "-m", "pip", "install", "--no-deps", "--no-build-isolation",
                              "--no-index", "--disable-pip-version-check", "-q", str(source)],
                             capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stdout + install.stderr
    return venv / "bin"


def run_installed(command: list, cwd: Path) -> subprocess.CompletedProcess:
    environment = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "COLUMNS")}
    return subprocess.run(command, cwd=cwd, env=environment, capture_output=True, text=True, timeout=300)


def test_the_kernelllm_command_does_what_kernelllm_py_does(installed, tmp_path):
    version = run_installed([installed / "kernelllm", "--version"], tmp_path)
    assert version.returncode == 0 and version.stdout.startswith(f"kernelllm {__version__} (Python"), version.stderr
    usage = run_installed([installed / "kernelllm", "eval", "--help"], tmp_path)
    assert usage.returncode == 0 and usage.stdout.startswith("usage: kernelllm eval")
    # A real check, from a folder that is not the project's: the judge and the confined candidate find the
    # installed package.
    shutil.copy(CASES / "relu_reference.py", tmp_path)
    shutil.copy(CASES / "relu_triton.py", tmp_path)
    check = run_installed([installed / "kernelllm", "check", "relu_reference.py", "relu_triton.py", "--device", "cpu",
                           "--trials", "1", "--json"], tmp_path)
    assert check.returncode == 0, check.stderr
    assert json.loads(check.stdout)["verdict"] == "correct"


def test_the_python_api_imports_from_anywhere(installed, tmp_path):
    probe = "import kernelllm; from kernelllm import KernelLLM, extract_kernel_code; print(kernelllm.__file__)"
    result = run_installed([installed / "python", "-c", probe], tmp_path)
    assert result.returncode == 0, result.stderr
    assert Path(result.stdout.strip()).is_relative_to(installed.parent)  # the installed copy, not this tree
    # package data: the drafting seed ships with the package (else an installed tool drafts its first replies from
    # nothing, silently)
    seed = run_installed([installed / "python", "-c", "import kernelllm; "
                          "from repl.fastpath.drafting_seed import SEED_FILE; print(SEED_FILE.is_relative_to(__import__('sys').prefix), len(SEED_FILE.read_text()))"],
                         tmp_path)
    assert seed.returncode == 0 and seed.stdout.split()[0] == "True" and int(seed.stdout.split()[1]) > 10000, \
        seed.stdout + seed.stderr
    # and eval --report's stylesheet (else every installed report is an unstyled page)
    style = run_installed([installed / "python", "-c", "import kernelllm, sys; from repl.cli.eval_report import "
                           "STYLE_FILE; print(STYLE_FILE.is_relative_to(sys.prefix), len(STYLE_FILE.read_text()))"],
                          tmp_path)
    assert style.returncode == 0 and style.stdout.split()[0] == "True" and int(style.stdout.split()[1]) > 1000, \
        style.stdout + style.stderr


def test_nothing_generic_is_installed_at_the_top_of_site_packages(installed):
    """`pip install .` put a package named `repl` (a name an unrelated published project uses) into site-packages."""
    (site_packages,) = (installed.parent / "lib").glob("python*/site-packages")
    top = {path.name for path in site_packages.iterdir() if not path.name.endswith((".dist-info", ".pth"))}
    assert top - {"__pycache__"} == {"kernelllm.py", "kernelllm_repl"}
    assert (site_packages / "kernelllm_repl" / "repl" / "checker" / "judge" / "server.py").is_file()


def test_the_package_depends_on_exactly_what_requirements_txt_lists(installed, tmp_path):
    probe = "import json; from importlib.metadata import requires; print(json.dumps(requires('kernelllm')))"
    result = run_installed([installed / "python", "-c", probe], tmp_path)
    assert result.returncode == 0, result.stderr
    declared = [requirement.replace(" ", "") for requirement in json.loads(result.stdout)]
    assert [line for line in declared if "extra==" not in line] == requirement_lines(REPO / "requirements.txt")
    ray = [line.split(";extra==")[0] for line in declared if 'extra=="ray"' in line]
    assert ray == requirement_lines(REPO / "requirements-ray.txt")
