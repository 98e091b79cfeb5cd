"""Every shell command that README.md, docs/*.md and the Colab notebook show, as argv lists.

Where commands are found:
  - fenced blocks tagged bash / sh / shell / console, and untagged blocks whose first word
    is a command (`python`, `make`, a repo script, an executable of the venv or a tool of
    `KNOWN_TOOLS`);
  - inline code spans of two or more words that start with such a command word;
  - the notebook's code cells: `!` lines (after IPython's `{name}` expansion with the
    cells' own Python settings), `%%bash` cells and `%tensorboard`; the same `!` / `%`
    lines inside a markdown block (the Colab recipe in docs/launch.md).

A script is cut into simple commands at newlines, `;`, `&&`, `||`, `|` and `&`; a quoted
string may span lines (gcloud's `--command="..."`, parsed again as a script of its own).
Comments, redirections, leading `VAR=value` assignments and the loop words of `for ...; do
...; done` are dropped. Synopsis notation counts as well: `[--flag X]` is an optional flag,
`(--a X | --b Y)` alternatives of the same command, `...` repetition, and an upper-case
word (`DIR`, `FILE.py`, `<this repository>`) a placeholder; such a command is a synopsis,
checked but never run. A piece that starts with a flag is an override fragment
(`--config.corpus.paths=...`).
"""

from __future__ import annotations

import dataclasses
import glob
import json
import re
import shlex

from spade_jax.config_schema import REPO_ROOT

DOC_FILES = ["README.md", *sorted(glob.glob("docs/*.md", root_dir=REPO_ROOT))]
NOTEBOOK = "notebooks/colab_tpu_smoke.ipynb"
SHELL_TAGS = {"bash", "sh", "shell", "console"}
# Tools that are not Python packages of this repository: (how to ask for help, note).
KNOWN_TOOLS = {
    "git": ("-h", "network: git clone needs the network; `git X -h` lists X's flags"),
    "pip": ("--help", "network: installs from a registry"),
    "hf": ("--help", "network: the Hugging Face hub CLI of the pinned huggingface_hub"),
    "gcloud": (None, "external: the Google Cloud SDK is not installed here; syntax only, "
                     "and its --command=\"...\" is checked as a script of its own"),
}
SHELL_BUILTINS = {"cd", "export", "wait", "done", "fi", "true", "source", "."}
SHELL_WORDS = SHELL_BUILTINS | {"mkdir", "tail", "head", "cat", "ls", "rm", "cp", "mv", "echo",
                                "sleep", "tar", "du", "df"}
PLACEHOLDER = re.compile(r"^(?:[A-Z][A-Z0-9_-]*(?:\.[a-z]+)?|\.\.\.)$|@@")
_SEPARATORS = {";", "&&", "||", "|", "&", ";;", "\n"}
_REDIRECT = re.compile(r"\s\d?>&\d|\s\d?>>?\s*[^\s;&|]+")
_ANGLE = re.compile(r"<[A-Za-z][^<>\n]*>")


@dataclasses.dataclass(frozen=True)
class Command:
  where: str               # "docs/launch.md:146" or "notebooks/...ipynb cell 4"
  argv: tuple[str, ...]    # as written, synopsis brackets ("[", "]") and "..." included
  synopsis: bool           # optional flags, alternatives or placeholders: never run
  inline: bool = False     # an inline code span in prose: a mention, never run

  @property
  def words(self) -> list[str]:
    """argv without synopsis brackets."""
    return [w for w in self.argv if w not in ("[", "]", "...")]

  def __str__(self) -> str:
    return f"{self.where}: {shlex.join(self.argv)}"


def is_command_word(word: str, venv_bin) -> bool:
  if word in ("python", "python3", "make") or word.startswith(".venv/bin/") or word in KNOWN_TOOLS:
    return True
  return (venv_bin / word).is_file() or (word.endswith(".py") and (REPO_ROOT / word).is_file())


def split_script(script: str, where: str, first_line: int | None = None) -> list[Command]:
  """The simple commands of a shell script (see the module docstring); `where` gets the
  line number (`first_line` + offset) when `first_line` is given."""
  commands: list[Command] = []
  for offset, chunk in _logical_lines(script.replace("\\\n", " ")):
    at = where if first_line is None else f"{where}:{first_line + offset}"
    for words, synopsis in _pieces(chunk, at):
      commands += _command_of(words, synopsis, at)
  return commands


def _pieces(chunk: str, where: str) -> list[tuple[list[str], bool]]:
  """The chunk's tokens cut at separators; each piece with whether it used ( | ) notation."""
  lex = shlex.shlex(_ANGLE.sub("@@", _REDIRECT.sub(" ", chunk)), posix=True,
                    punctuation_chars=";&|()<>")
  lex.whitespace = " \t\r"
  lex.wordchars += "$:,@%+{}^"
  try:
    tokens = list(lex)
  except ValueError as e:
    raise ValueError(f"{where}: not a shell command ({e}): {chunk[:200]!r}") from None
  pieces: list[tuple[list[str], bool]] = [([], False)]
  paren = bracket = 0
  for tok in tokens:
    if tok in ("(", ")") or (tok == "|" and (paren or bracket)):  # synopsis grouping
      paren += {"(": 1, ")": -1}.get(tok, 0)
      pieces[-1] = (pieces[-1][0], True)
    elif tok in _SEPARATORS:
      pieces.append(([], False))
    else:
      bracket += tok.count("[") - tok.count("]")
      pieces[-1][0].append(tok)
  return [p for p in pieces if p[0]]


def _command_of(words: list[str], synopsis: bool, where: str) -> list[Command]:
  while words and (words[0] in ("do", "then", "else", "time", "nohup", "!")
                   or re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0])):
    words = words[1:]  # loop words, time / nohup and VAR=value prefixes
  if not words or words[0] in ("for", "while", "if", "in"):
    return []
  return [Command(where, tuple(words), synopsis or _is_synopsis(words))]


def _is_synopsis(words: list[str]) -> bool:
  return any(w in ("[", "]") or PLACEHOLDER.search(w.split("=", 1)[-1])
             for w in words[1:])


def _blocks(text: str) -> tuple[list[tuple[int, str, str]], list[tuple[int, str]]]:
  """([(first body line number, tag, body)] of the fenced blocks, [(number, line)] outside)."""
  blocks, outside, lines, i = [], [], text.split("\n"), 0
  while i < len(lines):
    line = lines[i].strip()
    if line.startswith("```"):
      j = i + 1
      while j < len(lines) and not lines[j].strip().startswith("```"):
        j += 1
      blocks.append((i + 2, line[3:].strip(), "\n".join(lines[i + 1:j])))
      i = j + 1
    else:
      outside.append((i + 1, lines[i]))
      i += 1
  return blocks, outside


def notebook_lines(body: str) -> str:
  """IPython syntax as shell: `!cmd` -> cmd, `%tensorboard ...` -> tensorboard ...; other
  `%` magics and Python lines are left out. A body with none of them is returned as it is."""
  lines = body.split("\n")
  if not any(line.startswith(("!", "%")) for line in lines):
    return body
  out = []
  for line in lines:
    if line.startswith(("!", "%tensorboard")):
      out.append(line[1:])
    elif out and out[-1].endswith("\\"):
      out.append(line)
  return "\n".join(out)


def doc_commands(venv_bin) -> tuple[list[Command], list[tuple[str, str]]]:
  """(commands, prose) of the markdown files; prose is (where, text) outside blocks."""
  commands, prose = [], []
  for name in DOC_FILES:
    blocks, outside = _blocks((REPO_ROOT / name).read_text())
    for lineno, line in outside:
      prose.append((f"{name}:{lineno}", line))
      for span in re.findall(r"`([^`]+)`", line):
        words = span.split()
        if len(words) > 1 and is_command_word(words[0], venv_bin):
          commands += [dataclasses.replace(c, inline=True)
                       for c in split_script(span, f"{name}:{lineno}")]
    for start, tag, body in blocks:
      body = notebook_lines(body)
      first = body.strip().split(None, 1)[:1]
      if tag in SHELL_TAGS or (tag == "" and first and is_command_word(first[0], venv_bin)):
        commands += split_script(body, name, start)
  return commands, prose


def _logical_lines(body: str):
  """(line offset, text) of each line, a quoted string or `\\` continuation kept whole."""
  lines, i = body.split("\n"), 0
  while i < len(lines):
    j = i + 1
    chunk = lines[i]
    while j < len(lines) and (chunk.endswith("\\") or _open_quote(chunk)):
      chunk += "\n" + lines[j]
      j += 1
    yield i, chunk
    i = j


def _open_quote(text: str) -> bool:
  try:
    shlex.split(text, comments=True)
  except ValueError:
    return True
  return False


def notebook_commands() -> list[Command]:
  """The `!` / `%%bash` / `%tensorboard` commands of the notebook, `{name}` expanded."""
  cells = json.loads((REPO_ROOT / NOTEBOOK).read_text())["cells"]
  namespace: dict = {}
  commands = []
  for index, cell in enumerate(cells):
    if cell["cell_type"] != "code":
      continue
    source = "".join(cell["source"])
    python = [line for line in source.split("\n") if not line.startswith(("!", "%"))]
    exec("\n".join(python), namespace)  # noqa: S102 - the notebook's own settings cells
    script = source.split("\n", 1)[1] if source.startswith("%%bash") else notebook_lines(source)
    if script == source and not source.startswith("%%bash"):
      continue  # a Python cell
    commands += split_script(script.format_map(namespace), f"{NOTEBOOK} cell {index}")
  return commands
