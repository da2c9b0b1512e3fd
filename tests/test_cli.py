"""The command line outside the interactive session: --help, piped input, --file/--out, failures."""

import os
import subprocess
import sys
from pathlib import Path

from tiny_models import PREPARED_KERNEL, RELU_MODULE

REPO = Path(__file__).resolve().parents[1]


def kernelllm(*arguments, stdin="", cwd=None, env=None, timeout=300):
    environment = {**os.environ, "KERNELLLM_HOME": str(Path(cwd or REPO) / ".kernelllm-home"), **(env or {})}
    return subprocess.run([sys.executable, str(REPO / "kernelllm.py"), *arguments], input=stdin, text=True,
                          capture_output=True, cwd=cwd, env=environment, timeout=timeout)


def test_help_documents_every_flag():
    result = kernelllm("--help")
    assert result.returncode == 0
    for flag in ("--model", "--device", "--dtype", "--temperature", "--top-p", "--max-new-tokens", "--seed",
                 "--file", "--out", "--debug"):
        assert flag in result.stdout


def test_piped_module_writes_only_the_kernel_to_stdout(trained_model_dir, tmp_path):
    result = kernelllm("--model", str(trained_model_dir), "--temperature", "0", "--max-new-tokens", "600",
                       stdin=RELU_MODULE, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == PREPARED_KERNEL
    assert "tokens in" in result.stderr


def test_file_and_out_write_the_kernel_and_refuse_to_overwrite(trained_model_dir, tmp_path):
    (tmp_path / "relu.py").write_text(RELU_MODULE)
    arguments = ["--model", str(trained_model_dir), "--temperature", "0", "--file", "relu.py", "--out", "k.py"]
    assert kernelllm(*arguments, cwd=tmp_path).returncode == 0
    assert (tmp_path / "k.py").read_text() == PREPARED_KERNEL
    again = kernelllm(*arguments, cwd=tmp_path)
    assert again.returncode == 1 and "exists; add --force" in again.stderr


def test_a_reply_without_code_exits_1_with_a_message(tiny_model_dir, tmp_path):
    result = kernelllm("--model", str(tiny_model_dir), "--max-new-tokens", "8", "--seed", "0",
                       stdin=RELU_MODULE, cwd=tmp_path)
    assert result.returncode == 1
    assert result.stdout == ""
    assert "the reply holds no code" in result.stderr


def test_missing_weights_give_one_line_and_no_traceback(tmp_path):
    result = kernelllm("--model", str(tmp_path / "nowhere"), stdin=RELU_MODULE, cwd=tmp_path)
    assert result.returncode == 1
    assert "no model directory at" in result.stderr and "Traceback" not in result.stderr


def test_input_that_is_not_a_module_exits_2(tmp_path):
    result = kernelllm("--model", str(tmp_path / "nowhere"), stdin="print('hi')\n", cwd=tmp_path)
    assert result.returncode == 2 and "No nn.Module subclass" in result.stderr
