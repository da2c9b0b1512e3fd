"""`eval --report FILE.html`: the page drawn from a real evaluation (the real checker on the CPU interpreter, the tiny
trained model or given candidates), its untrusted text kept as text, its links, and the page in a real headless
Chromium."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote

import pytest

from repl.cli.eval_charts import fast_p_chart, fast_p_points, histogram_bins, speedup_histogram

TESTS = Path(__file__).parent
REPO = TESTS.parent
HOSTILE_PROBLEM = '3_"><img src=x onerror=document.title=1>'
HOSTILE_FILE = 'javascript:"><img src=x onerror=document.title=2>.py'
HOSTILE_REASON = "<script>document.title='script ran'</script>"
RAISING_KERNEL = f'''import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        raise RuntimeError("{HOSTILE_REASON}")
'''


def run_eval(*arguments, environment=None):
    return subprocess.run([sys.executable, "-m", "repl.cli.eval", *arguments, "--device", "cpu", "--trials", "1"],
                          cwd=REPO, capture_output=True, text=True, timeout=300, env=environment)


class _Page(HTMLParser):
    """What a test reads of a page: its links, its elements by tag, its text."""

    def __init__(self, text: str):
        super().__init__()
        self.links, self.tags, self.text = [], [], []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag == "a":
            self.links.append(dict(attrs)["href"])

    def handle_data(self, data):
        self.text.append(data)

    def classes(self, tag: str) -> list[str]:
        return [attrs.get("class", "") for name, attrs in self.tags if name == tag]


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory):
    """Given candidates for ReLU, Add, a ReLU problem whose file name is markup (one of its candidates has a markup
    file name, another fails with markup in its reason) and KernelBench's 19_ReLU, too large for the CPU."""
    root = tmp_path_factory.mktemp("hostile")
    problems, candidates = root / "problems", root / "candidates"
    problems.mkdir()
    shutil.copytree(TESTS / "eval_candidates", candidates)
    for name in ("1_ReLU", "2_Add"):
        shutil.copy(TESTS / "eval_problems" / f"{name}.py", problems)
    shutil.copy(TESTS / "eval_problems" / "1_ReLU.py", problems / f"{HOSTILE_PROBLEM}.py")
    (candidates / HOSTILE_PROBLEM).mkdir()
    shutil.copy(TESTS / "eval_candidates" / "1_ReLU" / "good.py", candidates / HOSTILE_PROBLEM / HOSTILE_FILE)
    (candidates / HOSTILE_PROBLEM / "raises.py").write_text(RAISING_KERNEL)
    (problems / "19_ReLU.py").write_text((problems / "1_ReLU.py").read_text().replace(
        "batch_size = 4\n", "batch_size = 4096\n").replace("dim = 50\n", "dim = 393216\n"))  # 6.4 GB of input
    shutil.copytree(candidates / "1_ReLU", candidates / "19_ReLU")
    result = run_eval(str(problems), "--candidates", str(candidates), "--jobs", "2", "--json", str(root / "r.json"),
                      "--report", str(root / "report.html"))
    assert result.returncode == 0, result.stderr
    assert f"report in {root / 'report.html'}" in " ".join(result.stderr.split())
    return root, (root / "report.html").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def sampled_run(trained_model_dir, tmp_path_factory):
    """A sample of the tiny trained model for the ReLU problem, kept beside the results; the page one folder away
    from them."""
    root = tmp_path_factory.mktemp("sampled")
    (root / "problems").mkdir()
    (root / "pages").mkdir()
    shutil.copy(TESTS / "eval_problems" / "1_ReLU.py", root / "problems")
    common = [str(root / "problems"), "--max-new-tokens", "600", "--json", str(root / "r.json")]
    environment = {**os.environ, "KERNELLLM_HOME": str(root / "home")}
    result = run_eval(*common, "--model", str(trained_model_dir), "--report", str(root / "pages" / "r.html"),
                      environment=environment)
    assert result.returncode == 0, result.stderr
    return root, common, environment


def test_the_page_has_the_summary_a_row_per_candidate_and_links_to_each_kept_kernel(sampled_run, trained_model_dir):
    root, _, _ = sampled_run
    page = (root / "pages" / "r.html").read_text(encoding="utf-8")
    parsed = _Page(page)
    text = " ".join(" ".join(parsed.text).split())
    run = json.loads((root / "r.json").read_text())["run"]
    assert f"model {trained_model_dir}" in text and "temperature 1.0, top_p 0.97, max_new_tokens 600" in text
    assert "device cpu (Triton interpreter)" in text and f"date {run['date']}" in text
    assert "pass@k 1.000 k=1" in text  # the tiny model's ReLU kernel is correct
    assert "no kernel was timed (timing needs a GPU)" in text
    assert parsed.classes("tr").count("problem solved") == 1
    assert parsed.classes("span").count("verdict v-correct") == 1
    kept = sorted(str((root / "pages" / unquote(link)).resolve().relative_to(root)) for link in parsed.links)
    assert kept == ["r_kernels/1_ReLU/sample_1.check.json", "r_kernels/1_ReLU/sample_1.py"]
    assert all((root / path).is_file() for path in kept)
    assert '<svg class="chart fast-p"' in page and '<svg class="chart speedups"' in page


def test_a_finished_run_is_drawn_again_without_loading_anything(sampled_run):
    """The same command with --report on a finished run resumes nothing: a model that cannot load is never loaded."""
    root, common, environment = sampled_run
    again = run_eval(*common, "--model", str(root / "no-model"), "--report", str(root / "again.html"),
                     environment=environment)
    assert again.returncode == 0, again.stderr
    assert "1 problem already finished" in again.stderr
    drawn = _Page((root / "again.html").read_text(encoding="utf-8"))
    assert sorted(unquote(link) for link in drawn.links) == ["r_kernels/1_ReLU/sample_1.check.json",
                                                             "r_kernels/1_ReLU/sample_1.py"]


def test_names_and_reasons_from_kernels_and_problem_files_are_text_not_markup(hostile_run):
    root, page = hostile_run
    assert not re.search(r"<\s*(script|img)", page, re.I)
    parsed = _Page(page)
    text = "".join(parsed.text)
    assert HOSTILE_REASON in text and HOSTILE_PROBLEM in text and HOSTILE_FILE in text
    assert not [attrs for _, attrs in parsed.tags if any(name.startswith("on") for name in attrs)]
    hostile_link = next(link for link in parsed.links if "onerror" in unquote(link) and link.endswith(".py"))
    assert ":" not in hostile_link and '"' not in hostile_link  # percent-quoted: no scheme, no way out of href
    assert (root / unquote(hostile_link)).resolve() == (root / "candidates" / HOSTILE_PROBLEM / HOSTILE_FILE)
    verdicts = parsed.classes("span")
    assert (verdicts.count("verdict v-correct"), verdicts.count("verdict v-runtime_error")) == (4, 1)


def test_a_problem_too_large_to_check_has_its_reason_and_is_counted_apart(hostile_run):
    _, page = hostile_run
    row = re.search(r'<tr class="problem too-large">(.*?)</tr>', page).group(1)
    assert "19_ReLU" in row and "not checkable here: too large for the CPU interpreter" in row
    text = " ".join(" ".join(_Page(page).text).split())
    assert "problems 3 1 not checkable here" in text  # the summary's count: 19_ReLU is not among the 3
    assert "not checkable here (not in pass@k or fast_p): 19_ReLU" in text


def test_after_ctrl_c_the_page_has_the_finished_problems(tmp_path):
    """2_Add's candidate never returns: Ctrl-C once 1_ReLU has finished ends the run with 130, and the page is
    drawn from what the results file holds."""
    problems, candidates = tmp_path / "problems", tmp_path / "candidates"
    problems.mkdir()
    for name in ("1_ReLU", "2_Add"):
        shutil.copy(TESTS / "eval_problems" / f"{name}.py", problems)
    shutil.copytree(TESTS / "eval_candidates" / "1_ReLU", candidates / "1_ReLU")
    (candidates / "2_Add").mkdir()
    (candidates / "2_Add" / "hangs.py").write_text("import time\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
                                                  "    def forward(self, a, b):\n        time.sleep(600)\n")
    process = subprocess.Popen([sys.executable, "-m", "repl.cli.eval", str(problems), "--candidates", str(candidates),
                                "--device", "cpu", "--trials", "1", "--jobs", "2", "--timeout", "300", "--json",
                                str(tmp_path / "r.json"), "--report", str(tmp_path / "r.html")],
                               cwd=REPO, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    watchdog = threading.Timer(240, process.kill)
    watchdog.start()
    try:
        for line in process.stderr:
            if "1_ReLU" in line and "correct" in line:  # its progress line: the problem is in the results file
                process.send_signal(signal.SIGINT)
                break
        rest = process.stderr.read()
        assert process.wait() == 130, rest
    finally:
        watchdog.cancel()
    assert f"report in {tmp_path / 'r.html'}" in " ".join(rest.split())
    rows = re.findall(r'<tr class="problem [a-z-]+"><td class="name">([^<]*)</td>', (tmp_path / "r.html").read_text())
    assert rows == ["1_ReLU"]


def test_report_needs_the_results_file_an_existing_folder_and_no_link(tmp_path):
    problems = TESTS / "eval_problems"
    alone = run_eval(str(problems), "--candidates", str(TESTS / "eval_candidates"), "--report", "r.html")
    assert alone.returncode == 2
    assert alone.stderr.strip().splitlines() == [
        "eval: error: --report draws the page from the results file: give --json OUT too"]
    missing = run_eval(str(problems), "--candidates", str(TESTS / "eval_candidates"), "--json",
                       str(tmp_path / "r.json"), "--report", str(tmp_path / "no" / "r.html"))
    assert missing.returncode == 2 and f"the folder {tmp_path / 'no'} does not exist" in missing.stderr
    (tmp_path / "elsewhere.html").symlink_to(tmp_path / "target.html")
    linked = run_eval(str(problems), "--candidates", str(TESTS / "eval_candidates"), "--json",
                      str(tmp_path / "r.json"), "--report", str(tmp_path / "elsewhere.html"))
    assert linked.returncode == 2 and "is a symbolic link: not followed" in linked.stderr
    assert not (tmp_path / "r.json").exists() and not (tmp_path / "target.html").exists()  # refused before any work


def test_gpu_timings_draw_the_curves_the_speedups_and_the_tuned_kernels(hostile_run, tmp_path):
    """Timings need a GPU: the real run's file, given the figures a GPU run writes (kernel times, the best's speedup,
    a flagged timing, a tuned kernel), is drawn with both curves, the histogram's bars and the tuned column."""
    from repl.cli.eval_report import write_report

    root, _ = hostile_run
    data = json.loads((root / "r.json").read_text())
    relu, add = data["problems"][0], data["problems"][1]
    assert (relu["name"], add["name"]) == ("1_ReLU", "2_Add")
    relu["candidates"][0]["kernel_ms"], relu["candidates"][2]["kernel_ms"] = 0.025, 0.1  # eager: 0.05 ms
    relu["best"].update(kernel_ms=0.025, speedup_vs_eager=2.0)
    add["candidates"][0].update(kernel_ms=0.01, flagged="the kernel's clock disagrees with the judge's")
    add["best"].update(kernel_ms=0.01, speedup_vs_eager=5.0, flagged=add["candidates"][0]["flagged"])
    relu["tuned"] = {"candidate": "good.py", "kept": "BLOCK_SIZE=128", "kernel_ms": 0.02, "speedup_vs_eager": 2.5,
                     "speedup_vs_untuned": 1.25, "kernel_file": "r_kernels/1_ReLU/good.py.tuned.py"}
    (tmp_path / "gpu.json").write_text(json.dumps(data))
    page = write_report(tmp_path / "gpu.json", tmp_path / "gpu.html").read_text(encoding="utf-8")
    text = " ".join(" ".join(_Page(page).text).split())
    # fast_p over the 3 problems that fit: ReLU 2x counts to p = 1.5, Add's flagged 5x only in fast_0
    assert "fast_p 1.000 p=0 0.333 p=1.0 0.333 p=1.5 0.000 p=2.0" in text
    assert '<path class="curve"' in page and '<path class="curve tuned"' in page
    assert page.count('<rect class="bar"') == 2  # ReLU's 2x and 0.5x; the flagged 5x is left out
    assert "flagged timings (not in fast_p or the geomean): 2_Add/good.py" in text
    assert "BLOCK_SIZE=128 0.02 ms, 1.25x vs untuned" in text
    assert 'href="r_kernels/1_ReLU/good.py.tuned.py"' in page


# -- the charts ----------------------------------------------------------------------------------------------------

def test_fast_p_drops_at_each_problems_speedup():
    """Four problems: unsolved (None), 0.5x, 1.2x, 3x: fast_p is 3/4 above 0.1, 2/4 past 0.5, 1/4 past 1.2, 0 past 3."""
    assert fast_p_points([None, 0.5, 1.2, 3.0], 0.1) == [(0.1, 0.75), (0.5, 0.5), (1.2, 0.25), (3.0, 0.0)]
    chart = fast_p_chart([None, 0.5, 1.2, 3.0], fast_0=0.75)
    assert '<path class="curve"' in chart
    assert re.findall(r"<title>(fast_\d[^<]*)</title>", chart) == [
        "fast_1.0 = 0.500", "fast_1.5 = 0.250", "fast_2.0 = 0.250"]


def test_charts_without_timings_say_why_instead_of_drawing_nothing():
    assert "<path" not in fast_p_chart([None, None], fast_0=0.5)
    assert "no kernel was timed: timings need a GPU" in fast_p_chart([None, None], fast_0=0.5)
    assert "no kernel was timed" in speedup_histogram([]) and "<rect class=\"bar\"" not in speedup_histogram([])


def test_the_histogram_counts_each_speedup_once_in_half_octave_bins():
    bins = histogram_bins([0.7, 1.0, 1.1, 4.0], 0.1, 10.0)
    assert sum(count for _, _, count in bins) == 4
    assert [count for start, end, count in bins if start <= 1.0 < end] == [2]  # 1.0 and 1.1 share a bin
    assert speedup_histogram([0.7, 1.0, 1.1, 4.0]).count('<rect class="bar"') == 3


# -- a real browser ------------------------------------------------------------------------------------------------

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def test_headless_chromium_draws_the_page_and_runs_nothing_injected(hostile_run, tmp_path):
    """The DOM Chromium built from file://: the charts, a row per problem, the links; the title is the page's own
    (an onerror or a script that ran would have changed it) and no injected element exists."""
    if CHROMIUM is None:
        message = "no chromium on PATH (apt-get install -y chromium)"
        if os.environ.get("KERNELLLM_REQUIRE_CHROMIUM"):  # CI installs it: a skip there would hide the test
            pytest.fail(message)
        pytest.skip(message)
    root, _ = hostile_run
    dom = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                          "--no-first-run", "--disable-background-networking", "--disable-component-update",
                          "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom",
                          (root / "report.html").as_uri()], capture_output=True, text=True, timeout=120).stdout
    assert "<title>eval report: r.json</title>" in dom
    assert '<svg class="chart fast-p"' in dom and '<svg class="chart speedups"' in dom
    assert len(re.findall(r'<tr class="problem (solved|unsolved|too-large)">', dom)) == 4
    assert len(re.findall(r'<a class="file" href="[^"]+">', dom)) == 7
    assert not re.search(r"<\s*(script|img)", dom, re.I)
    assert "&lt;script&gt;document.title='script ran'&lt;/script&gt;" in dom


def test_candidates_the_checker_failed_to_judge_are_said_apart_and_left_out_of_fast_p(tmp_path):
    from repl.cli.eval_report import report_page
    from repl.workflows.eval_results import ProblemResult

    def record(file, verdict, speedup=None):
        return {"file": file, "verdict": verdict, "message": f"{verdict} <b>here</b>", "kernel_ms": 1.0 if speedup
                else None, "flagged": None, "speedup_vs_eager": speedup}

    judged = ProblemResult(name="1_ReLU", n=2, compiled=2, correct=1, pass_at={"1": 0.5, "2": 1.0},
                           best={"candidate": "a.py", "kernel_ms": 1.0, "speedup_vs_eager": 2.0, "flagged": None},
                           candidates=[record("a.py", "correct", 2.0), record("b.py", "checker_error")])
    unjudged = ProblemResult(name="2_Add", n=1, compiled=0, correct=0, pass_at=None, best=None,
                             candidates=[record("c.py", "checker_error")])
    page = report_page([judged, unjudged], {"date": "today"}, tmp_path, tmp_path, "r.json")
    text = " ".join(" ".join(_Page(page).text).split())
    assert ("not judged (the checker failed; neither correct nor wrong, not in pass@k or fast_p): 2 candidates; "
            "no candidate judged for 2_Add") in text
    assert "<b>" not in page  # the reasons are text
    fast_0 = re.search(r"fast_0 (\d+)% \(correct\)", text)
    assert fast_0 and fast_0.group(1) == "100", text  # 1_ReLU solved of the one problem judged, not of two
