"""`:copy`: the current kernel to the clipboard through the terminal itself (OSC 52), which works over ssh and in
tmux where the terminal allows it. The sequence is the tool's own, written past the console's escape filter: its
payload is base64 (letters, digits, + / =), so nothing a kernel holds can reach the terminal as a control."""

import base64

from repl.core.wording import counted

# Terminals cap what one OSC 52 may carry (xterm: 100,000 bytes by default); a kernel is far smaller.
MAX_PAYLOAD_BYTES = 74_994  # base64 of this is 99,992 characters


def osc52(text: str) -> str | None:
    """The sequence that puts text on the system clipboard ("c"); None when it is too long for terminals."""
    payload = text.encode("utf-8")
    if len(payload) > MAX_PAYLOAD_BYTES:
        return None
    return f"\x1b]52;c;{base64.b64encode(payload).decode('ascii')}\x07"


def copy_to_clipboard(console, text: str) -> str:
    """Write the sequence to the console's terminal; the one line to say what happened."""
    if not console.is_terminal:
        return "not copied: the output is not a terminal"
    sequence = osc52(text)
    if sequence is None:
        return f"not copied: {len(text.encode('utf-8')):,} bytes is more than terminals take through OSC 52"
    console.file.write(sequence)
    console.file.flush()
    return (f"copied {counted(len(text.splitlines()), 'line')} to the clipboard through the terminal (OSC 52; some terminals "
            "ask first or need it allowed, e.g. tmux's set-clipboard)")
