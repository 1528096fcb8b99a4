"""A small, read-only reader of bash launch scripts: enough of the shell to follow
``NAME=value`` assignments and expand them into the arguments of a launch command.

Nothing is executed: command substitutions (``$(...)``, backticks) stay as literal text,
arithmetic ``$((...))`` is evaluated only over integers, and a variable the script does
not set stays as it is written (``$CKPT``), so a message can say it was not resolved.
A variable assigned inside ``if``/``case``/loop bodies, after ``&&``/``||`` or in a function
body has one value per branch: past the construct it stays as written too, and
:attr:`Script.conditional` says where each branch set it.  Two exceptions: a branch that only
appends to a value (``ARGS="$ARGS --x"``) keeps it, the appended part marked
(:attr:`Script.branch_lines`); a ``[ -z "$X" ]`` guard is decided by a value the script knows, and
on an X it does not set reads as ``X=${X:-v}`` does.
Every character of a value keeps the line it was written on, so an argument taken
from ``GPT_ARGS="..."`` points at its own line, not at the ``torchrun`` line.
"""

from __future__ import annotations

import ast
import fnmatch
import operator
import os
import re
from dataclasses import dataclass, field


class ShellError(ValueError):
    def __init__(self, line: int, message: str):
        super().__init__(message)
        self.line = line
        self.message = message


class LStr:
    """A string whose every character knows its line."""

    __slots__ = ("text", "lines")

    def __init__(self, text: str = "", lines=None, line: int | None = None):
        self.text = text
        if lines is None:
            lines = [line or 0] * len(text)
        self.lines = list(lines)

    def __add__(self, other: "LStr") -> "LStr":
        return LStr(self.text + other.text, self.lines + other.lines)

    def __bool__(self):
        return bool(self.text)

    def __repr__(self):
        return f"LStr({self.text!r})"

    @property
    def line(self) -> int:
        return self.lines[0] if self.lines else 0

    def strip(self) -> "LStr":
        t = self.text
        a = len(t) - len(t.lstrip())
        b = len(t.rstrip())
        return LStr(t[a:b], self.lines[a:b])


@dataclass
class Word:
    text: str
    line: int  # where the word (its first character) was written
    value_lines: list[int] = field(default_factory=list)

    def line_at(self, offset: int) -> int:
        if 0 <= offset < len(self.value_lines):
            return self.value_lines[offset]
        return self.line


@dataclass
class Command:
    words: list[Word]
    line: int


@dataclass
class Script:
    commands: list[Command]
    variables: dict[str, LStr]
    crlf_lines: tuple[int, ...]
    # Variables whose value depends on a branch the script takes when it runs: name ->
    # [(line, value)] of each assignment in a branch (the value as written there).
    conditional: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    # Lines whose text a variable holds only when a branch runs (it was appended there, the rest
    # of the variable is known): line -> the variable.
    branch_lines: dict[int, str] = field(default_factory=dict)
    # `source FILE` / `. FILE` commands: (line, file). What such a file sets is not read.
    sourced: list[tuple[int, str]] = field(default_factory=list)
    # Text in single quotes with a $ in it, by line: bash passes '${TP}' on as those five
    # characters, unexpanded.
    single_quoted: dict[int, list[str]] = field(default_factory=dict)
    text_lines: tuple[str, ...] = ()  # the script as written (LF line endings)

    def sourced_before(self, line: int) -> list[tuple[int, str]]:
        """The files sourced before ``line`` (those after the launch cannot set what it reads)."""
        return [entry for entry in self.sourced if entry[0] < line]


@dataclass
class _Frame:
    """An open compound command (if/case/loop/{ } group/&& chain) while reading."""

    closer: str  # the word that ends it: fi, esac, done, }; "" for an && / || chain
    conditional: bool  # its body may run or not (every kind but a plain { } group)
    assigned: dict[str, list[tuple[int, str]]] = field(default_factory=dict)  # (line, value), any branch
    before: dict[str, tuple] = field(default_factory=dict)  # name -> (value, unknown) when it opened
    branch: set[str] = field(default_factory=set)  # names the current branch assigned
    fresh: bool = True  # an && chain with no word read since its last && / ||
    # GPT_ARGS="$GPT_ARGS --use-flash-attn" in a branch adds to what the variable held: name -> what
    # each such assignment appended; a name any branch set to a new value is in ``replaced``.
    appended: dict[str, list[LStr]] = field(default_factory=dict)
    replaced: set[str] = field(default_factory=set)
    # An `if` with one branch, or an `a && b` / `a || b` chain of two: the test that guards the
    # body (`[ -z "$X" ]`), read as its words; None once it cannot be such a guard.
    guard: list[str] | None = None
    guard_pending: bool = False  # an `if` whose condition is the next command
    in_body: bool = False  # an `if` past its `then`: commands are its body, not its condition
    start_line: int = 0  # where it opens: text from earlier lines came in by expansion
    arrays_before: dict[str, list | None] = field(default_factory=dict)  # arrays as they were when it opened


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\+?)=")
_DECLARERS = {"export", "declare", "local", "readonly", "typeset"}
_OPENERS = {"if": "fi", "case": "esac", "while": "done", "until": "done", "for": "done", "select": "done"}
_BRANCH_WORDS = {"elif", "else"}  # a new branch of the innermost if
_PLAIN_KEYWORDS = {"then", "do", "!"}  # no new branch: the next word is a command
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
        ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}


def _arith(expr: str, variables: dict[str, LStr]) -> int | None:
    """Integer arithmetic of ``$((...))``; None if it uses anything unknown."""
    def sub(m):
        name = m.group(1) or m.group(2) or m.group(3)
        value = variables.get(name)
        if value is None or not re.fullmatch(r"-?\d+", value.text.strip()):
            raise ValueError(name)
        return value.text.strip()
    try:
        text = re.sub(r"\$\{([A-Za-z_]\w*)\}|\$([A-Za-z_]\w*)|\b([A-Za-z_]\w*)\b", sub, expr)
        text = text.replace("/", "//")
        tree = ast.parse(text.strip(), mode="eval")
    except (ValueError, SyntaxError):
        return None

    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            right = ev(node.right)
            if isinstance(node.op, (ast.FloorDiv, ast.Mod)) and right == 0:
                raise ZeroDivisionError
            return _OPS[type(node.op)](ev(node.left), right)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = ev(node.operand)
            return -v if isinstance(node.op, ast.USub) else v
        raise ValueError("unsupported")
    try:
        return ev(tree)
    except (ValueError, ZeroDivisionError, RecursionError):
        return None


# Every assignment keeps its expanded value, each character with its line: a value appended to
# a few thousand times (a generated script) grows quadratically, and 4000 appends took 1.4 GB.
EXPANDED_MAX = 10_000_000


class _Reader:
    def __init__(self, text: str):
        self.s = text
        self.i = 0
        self.line = 1
        self.vars: dict[str, LStr] = {}
        self.unknown: dict[str, list[tuple[int, str]]] = {}  # set in a branch: see Script.conditional
        self.branch_lines: dict[int, str] = {}  # see Script.branch_lines
        self.single_quoted: dict[int, list[str]] = {}  # see Script.single_quoted
        self.sourced: list[tuple[int, str]] = []  # see Script.sourced
        self.arrays: dict[str, list[LStr]] = {}  # NAME=( a b c ): its elements, as words
        self.frames: list[_Frame] = []
        self.function_body = False  # "name()" or "function" seen: the next { } is a function body
        self.commands: list[Command] = []
        self.heredocs: list[tuple[str, bool]] = []
        self.expanded = 0  # characters of assigned values kept, each with its line (EXPANDED_MAX)

    # -- characters -------------------------------------------------------------------
    def peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.s[j] if j < len(self.s) else ""

    def take(self) -> str:
        if self.i >= len(self.s):  # a quote, escape or expansion the file ends inside of
            raise ShellError(self.line, "the script ends inside a quote, escape or expansion")
        c = self.s[self.i]
        self.i += 1
        if c == "\n":
            self.line += 1
        return c

    # -- expansions -------------------------------------------------------------------
    def _matching(self, open_: str, close: str, what: str) -> str:
        """Text up to the matching close (nesting and quotes respected); consumes it."""
        start_line, depth, out = self.line, 1, []
        while self.i < len(self.s):
            c = self.take()
            if c == "\\" and self.i < len(self.s):
                out.append(c + self.take())
                continue
            if c in "'\"":
                q, buf = c, [c]
                while self.i < len(self.s) and self.peek() != q:
                    buf.append(self.take())
                if self.i >= len(self.s):
                    raise ShellError(start_line, f"unterminated {what}")
                buf.append(self.take())
                out.append("".join(buf))
                continue
            if c == open_:
                depth += 1
            elif c == close:
                depth -= 1
                if depth == 0:
                    return "".join(out)
            out.append(c)
        raise ShellError(start_line, f"unterminated {what}")

    def _array_literal(self) -> list[LStr]:
        """After ``NAME=``: the words of ``( ... )`` (newlines and comments inside are blanks)."""
        open_line = self.line
        self.take()
        elements: list[LStr] = []
        while True:
            c = self.peek()
            if not c:
                raise ShellError(open_line, "the script ends inside an array ( ... ) opened here")
            if c in " \t\n":
                self.take()
            elif c == "#":
                while self.peek() and self.peek() != "\n":
                    self.take()
            elif c == ")":
                self.take()
                return elements
            else:
                start = self.i
                segs, line, _ = self.word(False)
                if self.i == start:  # an operator character inside: taken as text
                    segs = [(LStr(self.take(), line=self.line), False)]
                elements += [LStr(text, lines) for text, lines in _split(segs)]

    def _default_word(self, text: str, line: int) -> LStr:
        """The word of a ``${X:-word}`` default, read as bash reads it: quotes removed, its own
        expansions done (``${X:-"${HOME}/models"}``)."""
        sub = _Reader(text)
        sub.line, sub.vars, sub.unknown, sub.arrays = line, self.vars, self.unknown, self.arrays
        out = LStr()
        while sub.i < len(sub.s):
            start = sub.i
            segs, _, _ = sub.word(False)
            for seg, _ in segs:
                out = out + seg
            if sub.i == start:  # blanks and operator characters are text here
                out = out + LStr(sub.take(), line=sub.line)
        return out

    def _operation(self, inner: str) -> str | None:
        """The usual parameter operations on a variable the script set to a known value:
        ``${#A[@]}``, ``${#X}``, ``${X%/}`` (``%``, ``%%``, ``#``, ``##`` with glob patterns),
        ``${X^^}``, ``${X,,}``, ``${X/a/b}``, ``${X:1:3}``.  None when it is none of these, or
        when its variable or pattern is not known here (the caller then keeps it unresolved)."""
        def known(text: str) -> bool:
            # A value holding an expansion the reader left as written ($(cat hostfile), ${ROOT}):
            # what bash makes of it is not this text.
            return not any(c in text for c in "$`")

        count = re.fullmatch(r"#([A-Za-z_]\w*)(\[[@*]\])?", inner)
        if count:
            name = count.group(1)
            if name in self.unknown:
                return None
            if count.group(2) and name in self.arrays:
                elements = self.arrays[name]
                # An unquoted $(...) element splits into words no one counted here.
                return str(len(elements)) if all(known(e.text) for e in elements) else None
            value = self.vars.get(name)
            return str(len(value.text)) if value is not None and not count.group(2) and known(value.text) else None
        m = re.fullmatch(r"([A-Za-z_]\w*)(%%|%|##|#|\^\^|,,|\^|,|//|/|:(?=\d))(.*)", inner, re.S)
        if not m or m.group(1) in self.unknown or self.vars.get(m.group(1)) is None:
            return None
        text, op, arg = self.vars[m.group(1)].text, m.group(2), m.group(3)
        if any(c in arg for c in "$`\\\"'") or "[:" in arg or not known(text) or len(text) > 4096:
            # Built from other values, a POSIX class fnmatch lacks, or a long value (each cut is a
            # match): not evaluated here.
            return None
        if op in ("%", "%%", "#", "##"):
            arg = arg.replace("[^", "[!")  # bash's negated class is fnmatch's [!...]
        if op in ("%", "%%"):
            ends = range(len(text) + 1) if op == "%%" else range(len(text), -1, -1)  # longest / shortest
            cut = next((i for i in ends if fnmatch.fnmatchcase(text[i:], arg)), None)
            return text if cut is None else text[:cut]
        if op in ("#", "##"):
            ends = range(len(text), -1, -1) if op == "##" else range(len(text) + 1)
            cut = next((i for i in ends if fnmatch.fnmatchcase(text[:i], arg)), None)
            return text if cut is None else text[cut:]
        if op in ("^^", ",,", "^", ","):
            if arg:
                return None  # a pattern of the letters to change
            change = str.upper if op.startswith("^") else str.lower
            return change(text) if len(op) == 2 else change(text[:1]) + text[1:]
        if op in ("/", "//"):
            old, _, new = arg.partition("/")
            if not old or any(c in old for c in "*?[#%"):
                return None  # a glob or anchored pattern: not evaluated here
            return text.replace(old, new) if op == "//" else text.replace(old, new, 1)
        parts = arg.split(":")  # ${X:offset[:length]}
        if len(parts) > 2 or not all(p.strip().isdigit() for p in parts):
            return None
        start = int(parts[0])
        return text[start:start + int(parts[1])] if len(parts) == 2 else text[start:]

    def dollar(self) -> LStr:
        """After a ``$``: the expansion (or the literal text when it cannot be known)."""
        line = self.line
        c = self.peek()
        if c == "(" and self.peek(1) == "(":
            self.i += 2
            inner = self._matching("(", ")", "$((...))")
            if self.peek() == ")":
                self.take()
            value = _arith(inner, self.vars)
            return LStr(str(value) if value is not None else f"$(({inner}))", line=line)
        if c == "(":
            self.take()
            inner = self._matching("(", ")", "command substitution $(...)")
            return LStr(f"$({inner})", line=line)
        if c == "{":
            self.take()
            inner = self._matching("{", "}", "${...}")
            a = re.fullmatch(r"([A-Za-z_]\w*)\[([@*]|\d+)\]", inner)
            if a and a.group(1) in self.arrays and a.group(1) not in self.unknown:
                elements = self.arrays[a.group(1)]
                if a.group(2).isdigit():
                    index = int(a.group(2))
                    return elements[index] if index < len(elements) else LStr()
                if a.group(2) == "@":  # "${A[@]}" of no element is no word at all, not an empty one
                    return _joined(elements, _ELEMENT) if elements else LStr(_NO_WORD, line=line)
                return _joined(elements, " ")
            if a and a.group(1) in self.vars and a.group(1) not in self.unknown:
                # A plain variable read as an array is an array of one: ${S[@]} and ${S[0]} are S.
                first = a.group(2) in ("@", "*") or int(a.group(2)) == 0
                return self.vars[a.group(1)] if first else LStr()
            operated = self._operation(inner)
            if operated is not None:
                return LStr(operated, line=line)
            m = re.fullmatch(r"([A-Za-z_]\w*|\d+)(?:(:?[-=+?])(.*))?", inner, re.S)
            if not m:
                return LStr("${" + inner + "}", line=line)
            name, op, arg = m.group(1), m.group(2), m.group(3)
            if name in self.unknown:  # set in a branch: neither its value nor the default is known
                return LStr("${" + inner + "}", line=line)
            value = self.vars.get(name)
            empty = value is None or (op and op.startswith(":") and not value.text)
            if value is None and self.sourced and op in ("-", ":-", "=", ":="):
                # A file the script sourced may set it: the default is not known to apply.
                return LStr("${" + inner + "}", line=line)
            if op in ("-", ":-", "=", ":=") and empty:
                value = self._default_word(arg or "", line)
                if op.endswith("="):
                    self.vars[name] = _plain(value)
            elif op in ("+", ":+"):
                value = self._default_word(arg or "", line) if not empty else LStr()
            if value is None:
                return LStr("${" + inner + "}", line=line)
            return value
        m = _NAME.match(self.s, self.i)
        if m:
            self.i = m.end()
            name = m.group(0)
            value = self.vars.get(name)
            return value if value is not None else LStr("$" + name, line=line)
        if c and (c.isdigit() or c in "@*#?$!-"):
            self.take()
            return LStr("$" + c, line=line)
        return LStr("$", line=line)

    def double_quoted(self, open_line: int) -> LStr:
        # Pieces are collected and joined once: adding each character to a growing LStr copied it
        # every time (ARGS="$ARGS --flagN N" four thousand times took 11 s and 1.4 GB).
        texts: list[str] = []
        lines: list[int] = []

        def add(piece: LStr) -> None:
            texts.append(piece.text)
            lines.extend(piece.lines)

        while True:
            if self.i >= len(self.s):
                raise ShellError(open_line, 'unterminated double quote (")')
            c = self.peek()
            if c == '"':
                self.take()
                return LStr("".join(texts), lines)
            if c == "\\":
                nxt = self.peek(1)
                if nxt == "\n":
                    self.take()
                    self.take()
                    continue
                if nxt in '$`"\\':
                    self.take()
                    line = self.line
                    add(LStr(self.take(), line=line))
                    continue
            if c == "$":
                self.take()
                add(self.dollar())
                continue
            if c == "`":
                line = self.line
                self.take()
                inner = self._matching_backtick(line)
                add(LStr(f"`{inner}`", line=line))
                continue
            line = self.line
            texts.append(self.take())
            lines.append(line)

    def _matching_backtick(self, line: int) -> str:
        buf = []
        while self.i < len(self.s) and self.peek() != "`":
            buf.append(self.take())
        if self.i >= len(self.s):
            raise ShellError(line, "unterminated backquote (`)")
        self.take()
        return "".join(buf)

    # -- words and commands -----------------------------------------------------------
    def word(self, assignment_ok: bool) -> tuple[list[tuple[LStr, bool]], int, bool]:
        """Segments of one word: (text, split-able); its line; whether it is an assignment."""
        segs: list[tuple[LStr, bool]] = []
        start = self.line
        literal = []
        is_assign = False
        while self.i < len(self.s):
            c = self.peek()
            if c in " \t\n;&|()<>":
                break
            if c == "\\":
                if self.peek(1) == "\n":
                    self.take()
                    self.take()
                    if not segs and not literal:
                        start = self.line
                    continue
                self.take()
                if self.i < len(self.s):
                    line = self.line
                    segs.append((LStr(self.take(), line=line), False))
                continue
            if c == "'":
                line = self.line
                self.take()
                buf = []
                while self.i < len(self.s) and self.peek() != "'":
                    buf.append((self.peek(), self.line))
                    self.take()
                if self.i >= len(self.s):
                    raise ShellError(line, "unterminated single quote (')")
                self.take()
                for ln in {ln for b, ln in buf if b == "$"}:  # '$X' is text: bash does not expand it
                    self.single_quoted.setdefault(ln, []).append("".join(b for b, bl in buf if bl == ln))
                segs.append((LStr("".join(b for b, _ in buf), [ln for _, ln in buf]), False))
                continue
            if c == '"':
                line = self.line
                self.take()
                segs.append((self.double_quoted(line), False))
                continue
            if c == "$":
                self.take()
                value = self.dollar()
                # Unresolved text ($CKPT, $(date)) stays one piece, as written.
                segs.append((value, not is_assign and not value.text.startswith("$")))
                continue
            if c == "`":
                line = self.line
                self.take()
                segs.append((LStr(f"`{self._matching_backtick(line)}`", line=line), False))
                continue
            line = self.line
            segs.append((LStr(self.take(), line=line), False))
            if assignment_ok and not is_assign and c == "=":
                so_far = "".join(s.text for s, _ in segs)
                if _ASSIGN.match(so_far) and all(not split for _, split in segs):
                    is_assign = True
        return segs, start, is_assign

    def run(self) -> None:
        words: list[Word] = []
        cmd_line = self.line

        def end_command():
            nonlocal words
            if words:
                self.commands.append(Command(words, cmd_line))
                if words[0].text in ("source", ".") and len(words) > 1 and not _environment_script(words[1].text):
                    self.sourced.append((cmd_line, words[1].text))
                self.function_body = False  # a command came between "name()" and any {
                top = self.frames[-1] if self.frames else None
                if top is not None and top.guard_pending:
                    top.guard = [w.text for w in words]
                    top.guard_pending = False
                elif top is not None and top.closer == "fi" and not top.in_body:
                    top.guard = None  # a condition of several commands: not a plain guard
            words = []

        while self.i < len(self.s):
            c = self.peek()
            if c in " \t":
                self.take()
                continue
            if c == "\\" and self.peek(1) == "\n":
                self.take()
                self.take()
                continue
            if c == "#" :
                while self.i < len(self.s) and self.peek() != "\n":
                    self.take()
                continue
            if c == "\n":
                self.take()
                end_command()
                self._end_chains()
                if self.heredocs:
                    self._skip_heredocs()
                cmd_line = self.line
                continue
            if c in ";&|()":
                sep = self.take()
                while self.peek() and self.peek() in "&|;":
                    sep += self.take()
                # "name()" defines a function (not "arr=()", an empty array)
                defines = sep == "(" and self.peek() == ")" and len(words) == 1 and _NAME.fullmatch(words[0].text)
                end_command()
                self.function_body = self.function_body or bool(defines)
                self._separator(sep)
                cmd_line = self.line
                continue
            if c in "<>":
                # A redirection: drop it and its target (and the fd number written against it,
                # 2>log; `--num-attention-heads 32 >log` keeps its 32, an argument).
                if words and re.fullmatch(r"\d+", words[-1].text) and self.i and self.s[self.i - 1].isdigit():
                    words.pop()
                heredoc = c == "<" and self.peek(1) == "<" and self.peek(2) != "<"
                while self.peek() and self.peek() in "<>&-":
                    self.take()
                while self.peek() and self.peek() in " \t":
                    self.take()
                segs, _, _ = self.word(False)
                if heredoc:
                    delim = "".join(s.text for s, _ in segs)
                    self.heredocs.append((delim, True))
                continue
            first = not words
            declarer = bool(words) and words[0].text in _DECLARERS
            segs, line, is_assign = self.word(first or declarer or all(
                _ASSIGN.match(w.text) for w in words))
            if self.frames and self.frames[-1].closer == "":
                self.frames[-1].fresh = False  # the && chain has its command
            # "function name {": the name is read as a word before the brace opens the body.
            if not is_assign and (first or (self.function_body and len(words) == 1)) \
                    and self._keyword("".join(s.text for s, _ in segs)):
                words.clear()
                continue
            if is_assign:
                value = LStr()
                for s, _ in segs:
                    value = value + s
                m = _ASSIGN.match(value.text)
                rhs = LStr(value.text[m.end():], value.lines[m.end():])
                if not rhs.text and self.peek() == "(":  # NAME=( ... ): an array
                    elements = self._array_literal()
                    if m.group(2) and m.group(1) in self.arrays:  # NAME+=( ... )
                        elements = self.arrays[m.group(1)] + elements
                    for frame in self.frames:
                        frame.arrays_before.setdefault(m.group(1), self.arrays.get(m.group(1)))
                    self.arrays[m.group(1)] = elements
                    rhs = elements[0] if elements else LStr()  # $A is its first element
                    self._assign(m.group(1), rhs, False, line)
                    words.append(Word(value.text + "(...)", line, value.lines))
                    continue
                rhs = _plain(rhs)  # X="${A[@]}" joins them
                self.expanded += len(value.text)
                if self.expanded > EXPANDED_MAX:
                    raise ShellError(line, f"the script's assignments expand to more than {EXPANDED_MAX // 10**6} "
                                           f"million characters (a value appended to thousands of times): too "
                                           f"large to read; give the launch command its arguments directly")
                self._assign(m.group(1), rhs, bool(m.group(2)), line)
                value = _plain(value)
                words.append(Word(value.text, line, value.lines))
                continue
            for text, lines in _split(segs):
                words.append(Word(text, lines[0] if lines else line, lines))
        end_command()
        while self.frames:  # a construct left open at the end of the file
            self._close()

    # -- compound commands: which assignments hold past them -------------------------------
    def _assign(self, name: str, rhs: LStr, plus: bool, line: int) -> None:
        if plus:
            if name in self.unknown:
                return  # appending to a value only a branch knows: still not known
            if name in self.vars:
                rhs = self.vars[name] + rhs
        if self.frames:
            frame = self.frames[-1]
            frame.before.setdefault(name, (self.vars.get(name), self.unknown.get(name)))
            frame.branch.add(name)
            frame.assigned.setdefault(name, []).append((line, rhs.text))
            self._note_change(frame, name, None if name in self.unknown else self.vars.get(name), rhs)
        self.vars[name] = rhs
        self.unknown.pop(name, None)  # straight-line reassignment: the last value holds

    def _keyword(self, text: str) -> bool:
        """Follow a reserved word at the start of a command; False when it is not one."""
        if text in _OPENERS:
            self.frames.append(_Frame(_OPENERS[text], conditional=True, guard_pending=text == "if",
                                      start_line=self.line))
        elif text == "{":
            # A function body runs only when (and if) the function is called.
            self.frames.append(_Frame("}", conditional=self.function_body, start_line=self.line))
            self.function_body = False
        elif text in _BRANCH_WORDS:
            frame = self._unwind_to("fi")
            if frame is not None:
                self._end_branch(frame)
                frame.guard = frame.guard_pending = None  # two branches: not a default's guard
        elif text in ("fi", "esac", "done", "}"):
            if self._unwind_to(text) is not None:
                self._close()
        elif text == "function":
            self.function_body = True
        elif text not in _PLAIN_KEYWORDS:
            return False
        top = self.frames[-1] if self.frames else None
        if top is not None and top.closer == "fi" and not top.in_body:
            if text == "then":
                top.in_body = True
            elif text == "!":  # if ! [ -z ... ]: not the guard it looks like
                top.guard, top.guard_pending = None, False
        return True

    def _separator(self, sep: str) -> None:
        if sep in ("&&", "||"):
            top = self.frames[-1] if self.frames else None
            if top is not None and top.closer == "":
                top.fresh = True
                top.guard = None  # a && b && c: not a plain guard
            else:
                if top is not None and top.closer == "fi" and not top.in_body:
                    top.guard, top.guard_pending = None, False  # if a && b; then: not a plain guard
                last = self.commands[-1].words if self.commands else []
                self.frames.append(_Frame("", conditional=True, guard=[sep] + [w.text for w in last],
                                          start_line=last[0].line if last else self.line))
            return
        if sep in ("|", "|&", "("):
            return  # a pipeline or subshell continues the && chain
        self._end_chains()
        if sep.startswith(";;") or sep == ";&":
            if self.frames and self.frames[-1].closer == "esac":
                self._end_branch(self.frames[-1])  # the end of one case pattern's branch

    def _end_chains(self) -> None:
        """A command list ends (newline, ;, &): close the && / || chains that have their command."""
        while self.frames and self.frames[-1].closer == "" and not self.frames[-1].fresh:
            self._close()

    def _unwind_to(self, closer: str) -> "_Frame | None":
        """The innermost open construct ``closer`` ends, closing any left open inside it."""
        if not any(f.closer == closer for f in self.frames):
            return None
        while self.frames[-1].closer != closer:
            self._close()
        return self.frames[-1]

    def _end_branch(self, frame: "_Frame") -> None:
        """The next branch starts from the values before the construct, not this branch's."""
        for name, elements in frame.arrays_before.items():
            if elements is None:
                self.arrays.pop(name, None)
            else:
                self.arrays[name] = elements
        for name in frame.branch:
            value, unknown = frame.before[name]
            if value is None:
                self.vars.pop(name, None)
            else:
                self.vars[name] = value
            if unknown is None:
                self.unknown.pop(name, None)
            else:
                self.unknown[name] = unknown
        frame.branch = set()

    @staticmethod
    def _note_change(frame: "_Frame", name: str, old: "LStr | None", new: "LStr | None") -> None:
        """Record in ``frame`` whether ``name`` went from ``old`` to ``new`` by appending to it."""
        if old is not None and new is not None and old.text and len(new.text) > len(old.text) \
                and new.text.startswith(old.text):
            frame.appended.setdefault(name, []).append(LStr(new.text[len(old.text):], new.lines[len(old.text):]))
        else:
            frame.replaced.add(name)

    def _close(self) -> None:
        frame = self.frames.pop()
        runs, default = self._guarded(frame)
        if runs is not None:
            # `[ -z "$X" ]` guards: decided by a value the script knows (the body always or never
            # runs), or `if [ -z "$X" ]; then X=v; fi` on an X the script does not set, which
            # reads as X=${X:-v} does: v.
            if runs is False:
                self._end_branch(frame)
            frame.conditional = False
        elif default is not None and default in frame.assigned and default in self.vars and not self.frames:
            value = self.vars[default]
            self._end_branch(frame)
            frame.assigned.pop(default)
            frame.before.pop(default, None)
            self.vars[default] = value
        if frame.conditional:
            self._end_branch(frame)
            for name, sets in frame.assigned.items():
                value, unknown = frame.before[name]
                if name in frame.appended and name not in frame.replaced and value is not None and unknown is None:
                    # Every branch only appended to what the variable held (GPT_ARGS="$GPT_ARGS
                    # --use-flash-attn"): that stays known, and each appended part is marked as
                    # there only when its branch runs.
                    for part in frame.appended[name]:
                        value = value + part
                        self.branch_lines.update((ln, name) for ln in set(part.lines) if ln >= frame.start_line)
                    self.vars[name] = value
                else:
                    self.vars.pop(name, None)
                    self.unknown[name] = self.unknown.get(name, []) + sets
        if self.frames:  # the enclosing construct assigned them too
            parent = self.frames[-1]
            for name, before in frame.before.items():
                parent.before.setdefault(name, before)
                parent.branch.add(name)
                parent.assigned.setdefault(name, []).extend(frame.assigned[name])
                self._note_change(parent, name, None if before[1] is not None else before[0],
                                  None if name in self.unknown else self.vars.get(name))

    def _guarded(self, frame: "_Frame") -> tuple[bool | None, str | None]:
        """For a one-branch ``if`` or a two-command chain guarded by ``[ -z V ]`` / ``[ -n V ]``:
        (whether the body runs, when V is a value the script knows; else None) and (X, when V is
        ``$X`` of an X the script does not set and the body runs when it is empty; else None)."""
        words = frame.guard
        if not words:
            return None, None
        sep = words[0] if words[0] in ("&&", "||") else None
        if sep:
            words = words[1:]
        if len(words) == 4 and (words[0], words[3]) in (("[", "]"), ("[[", "]]")):
            op, value = words[1], words[2]
        elif len(words) == 3 and words[0] == "test":
            op, value = words[1], words[2]
        else:
            return None, None
        if op not in ("-z", "-n"):
            return None, None
        body_when_empty = (op == "-z") != (sep == "||")  # if [ -z V ], [ -z V ] &&, [ -n V ] ||
        if "$" not in value and "`" not in value:
            return (value == "") == body_when_empty, None
        m = re.fullmatch(r"\$\{?([A-Za-z_]\w*)\}?", value)
        # After a sourced file, X may already be set: the guarded default is then a branch.
        if m and body_when_empty and m.group(1) not in self.unknown and not self.sourced \
                and frame.before.get(m.group(1), (None, None)) == (None, None):
            return None, m.group(1)
        return None, None

    def _skip_heredocs(self) -> None:
        for delim, _ in self.heredocs:
            while self.i < len(self.s):
                start = self.i
                while self.i < len(self.s) and self.peek() != "\n":
                    self.take()
                text = self.s[start:self.i]
                if self.i < len(self.s):
                    self.take()
                if text.strip("\t") == delim:
                    break
        self.heredocs = []


# Sourced files that set the toolchain's or the system's environment, never a job's sizes or paths:
# what they set is not a reason to doubt a ${X:-default}. CANN's, nnal's and the driver's scripts
# by their place (a project's own ./set_env.sh may export NNODES), conda's activate, the login files.
SYSTEM_ENVIRONMENT = frozenset({"/etc/profile", "/etc/bashrc", "/etc/bash.bashrc", "~/.bashrc", "$HOME/.bashrc",
                                "${HOME}/.bashrc", "~/.bash_profile", "$HOME/.bash_profile", "~/.profile"})


def _environment_script(path: str) -> bool:
    name = os.path.basename(path)
    if path in SYSTEM_ENVIRONMENT or name in ("activate", "conda.sh"):
        return True
    return name in ("set_env.sh", "setenv.bash") and bool(re.search(r"Ascend|ascend|/nnal/|/cann", path))


_ELEMENT = "\x1f"  # between the elements of "${A[@]}": each becomes its own word
_NO_WORD = "\x1e"  # "${A[@]}" of an empty array: quoted, still no word


def _without_no_word(value: LStr) -> LStr:
    if _NO_WORD not in value.text:
        return value
    return LStr(value.text.replace(_NO_WORD, ""), [ln for c, ln in zip(value.text, value.lines) if c != _NO_WORD])


def _plain(value: LStr) -> LStr:
    """An expansion's text where it is not split into words (an assignment, a default)."""
    value = _without_no_word(value)
    return LStr(value.text.replace(_ELEMENT, " "), value.lines)


def _joined(elements: list[LStr], sep: str = " ") -> LStr:
    out = LStr()
    for i, element in enumerate(elements):
        out = out + (LStr(sep, line=element.line) if i else LStr()) + element
    return out


def _split(segs: list[tuple[LStr, bool]]):
    """Field splitting: unquoted expansions split on whitespace, quoted parts do not."""
    fields: list[tuple[str, list[int]]] = []
    cur_t: list[str] = []
    cur_l: list[int] = []
    have = False
    for s, splittable in segs:
        if _NO_WORD in s.text:
            s = _without_no_word(s)
            if not s.text:
                continue
        if not splittable and _ELEMENT not in s.text:
            cur_t.append(s.text)
            cur_l.extend(s.lines)
            have = True
            continue
        # Unquoted expansions split on blanks; a quoted "${A[@]}" only between its elements, each
        # a word even when empty.
        breaks = " \t\n" + _ELEMENT if splittable else _ELEMENT
        for ch, ln, kept in zip(s.text, s.lines, _kept_literal(s.text)):
            if ch in breaks and not kept:
                if have or not splittable:
                    fields.append(("".join(cur_t), cur_l))
                cur_t, cur_l, have = [], [], False
            else:
                cur_t.append(ch)
                cur_l.append(ln)
                have = True
        have = have or not splittable
    if have:
        fields.append(("".join(cur_t), cur_l))
    return fields


def _kept_literal(text: str):
    """For each character: whether it is inside a ``$(...)``, backquote or ``${...}`` kept as
    written (its value cannot be known).  Such text in a variable (``ARGS="--nnodes $(cat f)"``)
    is one word when the variable is split, as the command's output would be, not ``$(cat``."""
    depth, braces, tick, prev = 0, 0, False, ""
    for ch in text:
        if ch == "`":
            tick = not tick
            yield True
        elif ch == "(" and (prev == "$" or depth):
            depth += 1
            yield True
        elif ch == ")" and depth:
            depth -= 1
            yield True
        elif ch == "{" and prev == "$":
            braces += 1
            yield True
        elif ch == "}" and braces:
            braces -= 1
            yield True
        else:
            yield bool(depth or braces or tick)
        prev = ch


def read_script(text: str) -> Script:
    """Commands and variables of a bash script (CRLF line endings tolerated and noted)."""
    raw_lines = text.split("\n")
    crlf = tuple(i + 1 for i, ln in enumerate(raw_lines) if ln.endswith("\r"))
    reader = _Reader(text.replace("\r\n", "\n"))
    try:
        reader.run()
    except RecursionError:  # ${X:-${X:-...}} nested past Python's stack
        raise ShellError(reader.line, "expansions nested too deeply to read") from None
    return Script(reader.commands, reader.vars, crlf, dict(reader.unknown), dict(reader.branch_lines),
                  list(reader.sourced), dict(reader.single_quoted), tuple(text.replace("\r\n", "\n").split("\n")))


def broken_by(script, line: int) -> str:
    """Why the command ended before ``line``: what is on the lines above, as written (the first of
    the comment or empty lines right above it ends the command)."""
    first = line - 1
    while first > 1 and first - 2 < len(script.text_lines) and (
            not script.text_lines[first - 2].strip() or script.text_lines[first - 2].lstrip().startswith("#")):
        first -= 1  # up over the comment and empty lines between the command and its cut-off part
    # The command's own last line, above them: without its \ it ends the command too.
    last = script.text_lines[first - 2] if 1 < first <= len(script.text_lines) + 1 else ""
    unended = "" if last.rstrip().endswith("\\") or not last.strip() else f"; and line {first - 1} does not end in \\; add it"
    if first < line - 1:
        kinds = {"empty" if not script.text_lines[n - 1].strip() else "a comment" for n in range(first, line)}
        return (f"lines {first}-{line - 1} ({' and '.join(sorted(kinds))}) end the command before it; delete them "
                f"or move them out{unended}")
    above = script.text_lines[line - 2] if 1 < line <= len(script.text_lines) + 1 else ""
    if above.lstrip().startswith("#"):
        return f"the comment on line {line - 1} ends the command before it; delete that line or move it out{unended}"
    if not above.strip():
        return f"line {line - 1} is empty, which ends the command before it; delete that line{unended}"
    if above.rstrip() != above and above.rstrip().endswith("\\"):
        return f"line {line - 1} has a space after its \\, which then continues nothing; remove the space"
    return f"line {line - 1} does not end in \\; add it"
