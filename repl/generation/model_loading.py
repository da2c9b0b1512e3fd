"""Load KernelLLM (or any causal LM) through transformers, with download progress and one-line failures.

The weights come from a local directory or the Hugging Face hub cache; huggingface_hub reads HF_HOME, HF_HUB_OFFLINE
and HF_TOKEN itself, so they are honoured without code here. Loading runs in a background thread (``ModelLoader``)
so the prompt is usable at once.
"""

import io
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from repl.core.errors import one_line

DEFAULT_MODEL = "facebook/KernelLLM"

# Only what from_pretrained needs: skips the original/ consolidated checkpoint some Llama repos carry.
_WEIGHT_PATTERNS = ["*.json", "*.safetensors", "tokenizer*", "*.model", "*.txt"]


class ModelLoadError(Exception):
    """Loading failed; the message is one line and says what to do."""


@dataclass
class LoadedModel:
    model_id: str
    model: object  # transformers PreTrainedModel
    tokenizer: object  # transformers PreTrainedTokenizerBase
    device: str
    dtype: str
    quantization: str | None = None  # int8 or int4: the linear layers' weights (--quantize)
    placement: str | None = None  # --device-map auto: where the layers went and the speed to expect, one line

    @property
    def display_name(self) -> str:
        """The hub id, or a local directory's last component (full paths crowd the toolbar)."""
        path = Path(self.model_id).expanduser()
        return path.name if path.is_dir() else self.model_id

    @property
    def context_tokens(self) -> int | None:
        """The most tokens prompt and reply may hold together: the positions the model was made for."""
        return getattr(getattr(self.model, "config", None), "max_position_embeddings", None)

    @property
    def description(self) -> str:
        weights = f", {self.quantization} weights" if self.quantization else ""
        where = "across devices" if self.placement else f"on {self.device}"
        return f"{self.display_name} {where} ({self.dtype}{weights})"


def resolve_device(device: str = "auto") -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelLoadError(f"--device {device} asked for, but this PyTorch build sees no CUDA GPU; use --device cpu.")
    return device


def resolve_dtype(dtype: str, device: str):
    import torch

    if dtype == "auto":
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    names = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16,
             "fp32": torch.float32, "float32": torch.float32}
    if dtype not in names:
        raise ModelLoadError(f"unknown --dtype {dtype!r}; use auto, bf16, fp16 or fp32.")
    return names[dtype]


def load_model(model_id: str = DEFAULT_MODEL, device: str = "auto", dtype: str = "auto",
               on_progress: Callable[[str], None] | None = None, quantize: str | None = None,
               device_map: str | None = None, before_weights: Callable[[], None] | None = None,
               quantized_product: Callable | None = None) -> LoadedModel:
    """Download if needed, then load tokenizer and model onto the device. Raises ModelLoadError.

    ``before_weights`` is called once the files, the tokenizer and the configuration are in hand, just before the
    weights are read (a model switch frees the previous model there).

    ``quantize`` (int8, int4): the linear layers are quantized one by one as they go to the device
    (``quantized_model``), so a GPU smaller than the full-precision model can hold the quantized one; their product
    ``quantized_product`` (None: ``quantized_model.dequantized_product``). ``device_map="auto"``: accelerate places
    the layers across the GPUs and the CPU (``placement``)."""
    report = on_progress or (lambda message: None)
    problem = options_problem(quantize, device_map)
    if problem:
        raise ModelLoadError(problem)
    device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, device)
    path = _local_weights(model_id, report)
    report(f"loading {model_id} {'across devices' if device_map else f'onto {device}'}")
    placement = None
    try:
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as transformers_logging

        # Progress goes through on_progress; transformers' own bars would draw over the REPL's prompt.
        transformers_logging.disable_progress_bar()
        tokenizer = AutoTokenizer.from_pretrained(path)
        AutoConfig.from_pretrained(path)  # an architecture this transformers does not know fails here
        if before_weights is not None:
            before_weights()
        if device_map:
            from repl.generation.placement import load_placed

            model, placement = load_placed(path, torch_dtype, device, report)
        else:
            model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype)
            if quantize:
                from repl.generation.quantized_model import dequantized_product, quantize_model

                quantize_model(model, quantize, device, report, quantized_product or dequantized_product)
            model.to(device)
        model.eval()
    except Exception as error:  # any failure here is a message for the user, not a traceback
        raise ModelLoadError(_describe_load_failure(model_id, error)) from error
    return LoadedModel(model_id, model, tokenizer, device, str(torch_dtype).removeprefix("torch."),
                       quantization=quantize, placement=placement)


def options_problem(quantize: str | None, device_map: str | None) -> str | None:
    """Why --quantize / --device-map cannot be honoured (one line), or None."""
    if quantize not in (None, "int8", "int4"):
        return f"unknown --quantize {quantize!r}; use int8 or int4"
    if device_map not in (None, "auto"):
        return f"unknown --device-map {device_map!r}; use auto"
    if quantize and device_map:
        return ("--quantize and --device-map auto cannot be combined yet: a quantized model goes to one GPU "
                "(int4 holds the 8B model in about 5 GB, int8 in about 9 GB); drop one of the two")
    return None


def _local_weights(model_id: str, report: Callable[[str], None]) -> str:
    """A directory holding the model: the given one, or the hub snapshot (downloaded into the HF cache if missing)."""
    if Path(model_id).expanduser().is_dir():
        return str(Path(model_id).expanduser())
    if model_id.startswith((".", "/", "~")) or model_id.count("/") > 1:
        raise ModelLoadError(f"no model directory at {model_id}.")
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import GatedRepoError, LocalEntryNotFoundError, RepositoryNotFoundError

    try:
        # Cached weights first, without touching the network (fast, and works offline).
        return snapshot_download(model_id, allow_patterns=_WEIGHT_PATTERNS, local_files_only=True)
    except LocalEntryNotFoundError:
        pass
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in {"1", "true", "yes"}:
        raise ModelLoadError(_not_cached_message(model_id, "HF_HUB_OFFLINE is set"))
    report(f"downloading {model_id} into the Hugging Face cache")
    try:
        return snapshot_download(model_id, allow_patterns=_WEIGHT_PATTERNS, tqdm_class=_progress_bar_class(report))
    except GatedRepoError:
        raise ModelLoadError(
            f"{model_id} is gated: accept its licence at https://huggingface.co/{model_id}, then set HF_TOKEN "
            "or run `hf auth login`.") from None
    except RepositoryNotFoundError:
        raise ModelLoadError(f"no model {model_id!r} on the hub and no local directory of that name.") from None
    except LocalEntryNotFoundError:
        raise ModelLoadError(_not_cached_message(model_id, "the hub cannot be reached")) from None
    except OSError as error:
        raise ModelLoadError(f"downloading {model_id} failed: {one_line(error)}") from None


def _not_cached_message(model_id: str, reason: str) -> str:
    from huggingface_hub.constants import HF_HUB_CACHE

    return (f"{model_id} is not in the Hugging Face cache ({HF_HUB_CACHE}) and {reason}. "
            f"Download it on a connected machine with `hf download {model_id}`"
            f"{' (about 16 GB)' if model_id == DEFAULT_MODEL else ''}, "
            "or give the path of a local copy (--model PATH; :model PATH in a session).")


def _describe_load_failure(model_id: str, error: Exception) -> str:
    text = one_line(error)
    if "out of memory" in text.lower() or isinstance(error, MemoryError):
        return (f"not enough memory to load {model_id}: {text}. Try --quantize int4 (the 8B model in about 5 GB), "
                "--quantize int8 (about 9 GB), --device-map auto (layers spill into CPU memory) or --device cpu.")
    return f"could not load {model_id}: {type(error).__name__}: {text}"


def _progress_bar_class(report: Callable[[str], None]):
    """A tqdm class for snapshot_download that turns its byte counters into one-line progress reports."""
    from tqdm.auto import tqdm

    class ReportingProgressBar(tqdm):
        def __init__(self, *args, **kwargs):
            kwargs["file"] = io.StringIO()  # never draw on the terminal: the REPL's toolbar shows the progress
            super().__init__(*args, **kwargs)

        def update(self, n=1):
            result = super().update(n)
            if self.unit == "B" and self.total:
                report(f"downloading: {self.n / 1e9:.1f} of {self.total / 1e9:.1f} GB")
            return result

    return ReportingProgressBar


class ModelLoader:
    """Loads a model in a background thread; ``state`` and ``message`` feed the toolbar, ``wait()`` blocks."""

    def __init__(self, load: Callable[[Callable[[str], None]], object]):
        self._load = load
        self._done = threading.Event()
        self.state = "loading"  # loading -> ready | failed
        self.message = "starting"
        self.result = None
        self.error: str | None = None
        self._thread = threading.Thread(target=self._run, name="model-loader", daemon=True)

    def start(self) -> "ModelLoader":
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            self.result = self._load(self._set_message)
            self.state, self.message = "ready", "ready"
        except ModelLoadError as error:
            self.state, self.error, self.message = "failed", str(error), str(error)
        except Exception as error:  # a bug or an unforeseen failure must still surface as a message
            self.state, self.error = "failed", f"model loading failed: {type(error).__name__}: {one_line(error)}"
            self.message = self.error
        finally:
            self._done.set()

    def _set_message(self, message: str) -> None:
        self.message = message

    def wait(self, timeout: float | None = None) -> bool:
        """True once loading has finished (either way)."""
        return self._done.wait(timeout)
