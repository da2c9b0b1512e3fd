"""Report lines for a pipe or a file without the spaces rich pads table rows with (`check | cat`, `log > log.txt`
ended every line in blanks up to the widest cell)."""


class TrailingSpaceStripper:
    """A text file that writes each line without its trailing spaces (a partial line is held until its newline or
    a flush)."""

    def __init__(self, file):
        self._file = file
        self._pending = ""

    def write(self, text: str) -> int:
        lines = (self._pending + text).split("\n")
        self._pending = lines.pop()
        if lines:
            self._file.write("".join(line.rstrip(" ") + "\n" for line in lines))
        return len(text)

    def flush(self) -> None:
        if self._pending:
            self._file.write(self._pending)
            self._pending = ""
        self._file.flush()

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self._file.fileno()

    def __getattr__(self, name):  # encoding, errors, ...: the file's own
        return getattr(self._file, name)
