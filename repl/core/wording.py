"""How counts read in messages: "1 trial", "5 trials"."""


def counted(number: int, noun: str, plural: str | None = None) -> str:
    """'1 trial', '0 trials', '3 problems'; `plural` for nouns that do not take an s."""
    return f"{number} {noun if number == 1 else plural or noun + 's'}"
