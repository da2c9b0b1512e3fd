"""The drafting seed: its file splits into the replies it was written from, is tokenised without special tokens,
gives no seed (and no failure) when absent or unreadable. CPU, no model weights needed."""

import pytest

from repl.generation import drafting_seed
from repl.generation.drafting_seed import END_OF_REPLY, format_seed, split_seed


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_model_dir))


# -- the seed file ----------------------------------------------------------------------------------------------------

def test_the_seed_file_splits_into_the_replies_it_was_written_from():
    replies = ["```python\nimport torch\n\n\ndef call(args):\n    pass\n```", "second\n", "  third"]
    text = format_seed(replies)
    assert text.count(END_OF_REPLY + "\n") == 3
    assert split_seed(text) == replies
    assert split_seed("") == [] and split_seed(f"\n{END_OF_REPLY}\n  \n") == []  # blank replies are none
    assert split_seed(f"a\n{END_OF_REPLY}\nb") == ["a", "b"]  # the last reply needs no separator after it
    assert split_seed(f"a {END_OF_REPLY}\n") == [f"a {END_OF_REPLY}"]  # only a line of its own separates


def test_the_seed_is_each_reply_tokenised_without_special_tokens(tokenizer, tmp_path):
    replies = ["import triton\nimport triton.language as tl", "def call(args):\n    return buf0,"]
    path = tmp_path / "seed.txt"
    path.write_text(format_seed(replies))
    seed = drafting_seed.drafting_seed(tokenizer, path)
    assert seed == [tokenizer.encode(reply, add_special_tokens=False) for reply in replies]
    assert tokenizer.bos_token_id not in seed[0] and tokenizer.decode(seed[1]) == replies[1]


def test_an_absent_unreadable_or_untokenisable_seed_is_no_seed(tokenizer, tmp_path):
    assert drafting_seed.drafting_seed(tokenizer, tmp_path / "absent.txt") == []
    assert drafting_seed.drafting_seed(tokenizer, tmp_path) == []  # a folder: unreadable
    (tmp_path / "seed.txt").write_text(format_seed(["x = 1"]))

    class Broken:
        def encode(self, text, add_special_tokens=True):
            raise RuntimeError("no vocabulary")

    assert drafting_seed.drafting_seed(Broken(), tmp_path / "seed.txt") == []


def test_the_fast_backend_builds_and_drafts_without_a_seed_file(random_model, monkeypatch, tmp_path):
    from repl.generation.fast_decode import FastLocalBackend
    from repl.settings import SamplingSettings

    monkeypatch.setattr(drafting_seed, "SEED_FILE", tmp_path / "absent.txt")
    backend = FastLocalBackend(random_model, compile=False, max_seq_len=512, batch_sizes=(1,))
    assert backend.wait_until_ready(60) and backend.state == "ready"
    assert [index.tokens for index in backend.replies.sources([1, 2])] == [[]]  # the session's (empty) index only
    reply = backend.stream("def relu(x):", SamplingSettings(temperature=0, max_new_tokens=4))
    "".join(reply)
    assert reply.reply.tokens == 4
