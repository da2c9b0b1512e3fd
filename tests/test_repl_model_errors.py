""":model after a model failed to load, in a real terminal: the reason is said once, with what to do."""

import json

from test_repl_e2e import spawn


def test_model_after_a_failed_load_says_the_reason_once(tmp_path):
    broken = tmp_path / "broken"  # passes the quick look at the folder, fails in the loader
    broken.mkdir()
    for name in ("config.json", "tokenizer.json"):
        (broken / name).write_text(json.dumps({}))
    (broken / "model.safetensors").write_text("x")
    terminal = spawn(["--model", str(broken)], tmp_path)
    try:
        terminal.wait_for(r"model: failed to load \(:model says why\)", timeout=120)
        terminal.send(":model\r")
        terminal.wait_for(r"(?m)^:model PATH\|HUB_ID loads another[\s\S]*^› *$")
        terminal.send(":model " + str(tmp_path / "missing") + "\r")
        terminal.wait_for(r"no model directory at")
        terminal.send(":model\r")
        advice = r":model PATH\|HUB_ID loads another"
        terminal.wait_for(rf"(?m):model\n[\s\S]*{advice}[\s\S]*:model\n[\s\S]*{advice}[\s\S]*^› *$")
        text = terminal.text()
        assert text.count("KeyError") == 2, text  # once for each :model, not twice for the first
        assert "--model PATH" not in text  # inside the session, :model PATH is the advice
    finally:
        terminal.child.terminate(force=True)
