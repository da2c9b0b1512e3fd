import pytest

from repl.core.settings import SamplingSettings


def test_defaults_are_the_model_cards_evaluation_setting():
    settings = SamplingSettings()
    assert (settings.temperature, settings.top_p, settings.max_new_tokens, settings.seed) == (1.0, 0.97, 2048, None)


def test_with_value_parses_and_copies():
    settings = SamplingSettings()
    changed = settings.with_value("temperature", "0.6").with_value("seed", "7").with_value("max_new_tokens", "64")
    assert (changed.temperature, changed.seed, changed.max_new_tokens) == (0.6, 7, 64)
    assert settings.temperature == 1.0
    assert changed.with_value("seed", "none").seed is None


@pytest.mark.parametrize("name, value, message", [
    ("temperature", "hot", "needs a number"),
    ("temperature", "-1", ">= 0"),
    ("top_p", "0", "(0, 1]"),
    ("max_new_tokens", "0", "max_new_tokens must be at least 1, not 0"),  # not "needs an integer, got '0'"
    ("max_new_tokens", "many", "max_new_tokens needs a whole number, got 'many'"),
    ("seed", "1.5", "seed needs a whole number"),
    ("colour", "red", "unknown setting"),
])
def test_bad_values_get_a_one_line_reason(name, value, message):
    with pytest.raises(ValueError, match=None) as error:
        SamplingSettings().with_value(name, value)
    assert message in str(error.value)
