"""Answer extraction over the tricky cases: nesting, several answers, thinking, no answer."""

import time

import pytest

from spade_jax.eval import extract


@pytest.mark.parametrize("text, want", [
    (r"so \boxed{\frac{1}{2}}.", r"\frac{1}{2}"),  # nested braces kept whole
    (r"first \boxed{3}, then corrected: \boxed{4}", "4"),  # the last box wins
    (r"\boxed{\{1, 2\}}", r"\{1, 2\}"),  # escaped braces do not close the box
    (r"\boxed{5", None),  # unbalanced: no answer (not "5")
    (r"\boxed{2} and \boxed{7", "2"),  # the last COMPLETE box
    ("<think>maybe \\boxed{9}</think>The answer is \\boxed{10}", "10"),
    ("<think>\\boxed{9}</think>no box after thinking", None),  # reasoning answers don't count
    ("<think>\\boxed{9} ... still thinking", None),  # unterminated thinking: no final text
    ("Reasoning...\nFinal Answer: 42", "42"),
    ("**Answer:** 17\n", "17"),
    ("Answer: 3\nwait\nAnswer: 5", "5"),
    ("Answer: 3\nwait, answer: 5", "3"),  # only lines that start with the answer count
    ("I cannot solve this.", None),
    ("", None),
])
def test_math_answer(text, want):
  assert extract.math_answer(text) == want


@pytest.mark.parametrize("raw, want", [
    (r"\frac{1}{2}", "1/2"), (r"\dfrac{4}{2}", "2"), ("0.5", "1/2"), ("2.0", "2"), ("02", "2"),
    ("1,000", "1000"), ("x = 7", "7"), (r"\text{7}.", "7"), (r"45^\circ", "45"),
    (r"50\%", "50"), ("$-3$", "-3"), (r"\left(1, 2\right)", "(1,2)"), (r"\sqrt{2}", r"\sqrt{2}"),
    ("1/0", "1/0"), (None, None), (r"-\frac{3}{6}", "-(3)/(6)"),
])
def test_normalize_math(raw, want):
  assert extract.normalize_math(raw) == want


def test_integer_answer_rejects_non_integers():
  assert extract.integer_answer("033") == 33
  assert extract.integer_answer(r"\frac{10}{5}") == 2
  assert extract.integer_answer("1/3") is None
  assert extract.integer_answer("seven") is None
  assert extract.integer_answer(None) is None


@pytest.mark.parametrize("text, want", [
    (r"Therefore \boxed{C}", "C"), (r"\boxed{\text{B}}", "B"), ("Answer: (D)", "D"),
    ("Answer: B. 42 meters", "B"), ("answer: A\nno wait\nAnswer: C", "C"), ("B", "B"),
    ("(A)", "A"), ("Answer: E", None),  # not an option letter
    ("Answer: Because", None),  # a word starting with an option letter is not a choice
    ("I think it is B or C", None), ("<think>Answer: A</think>", None),
])
def test_choice_letter(text, want):
  assert extract.choice_letter(text) == want


def test_code_block_prefers_last_python_block():
  text = "```python\ndef f(): return 1\n```\ntext\n```bash\nls\n```\n```py\ndef f(): return 2\n```"
  assert extract.code_block(text) == "def f(): return 2\n"
  assert extract.code_block("```\nprint(1)\n```") == "print(1)\n"
  assert extract.code_block("def f(): pass") is None
  assert extract.code_block("```python\n\n```") is None
  assert extract.code_block("<think>```python\nx=1\n```</think>done") is None


def test_tagged():
  assert extract.tagged("<answer>a</answer> then <answer> b c </answer>") == "b c"
  assert extract.tagged("<think><answer>x</answer></think>") is None
  assert extract.tagged("<answer>open") is None


LONG = 110_000  # characters of a long reply


def _timed(fn, text):
  start = time.perf_counter()
  result = fn(text)
  return time.perf_counter() - start, result


@pytest.mark.parametrize(("fn", "unit"), [
    (extract.math_answer, "\\boxed{"),  # every box unclosed: each was scanned to the end
    (extract.tagged, "<answer>"),  # every tag unclosed: the non-greedy regex rescanned
    (extract.math_answer, "\n"),  # blank lines: the answer-line regex rescanned them all
])
def test_a_long_reply_without_an_answer_parses_in_linear_time(fn, unit):
  seconds, answer = _timed(fn, unit * (LONG // len(unit)))
  assert answer is None and seconds < 0.5, f"{LONG} characters of {unit!r}: {seconds:.2f} s"


def test_a_long_reply_of_answers_parses_its_last_one():
  """The benign twin: as many closed boxes, tags and answer lines, the last one returned."""
  boxes = "".join(f"\\boxed{{{i}}} " for i in range(LONG // 12))
  tags = "".join(f"<answer>{i}</answer>" for i in range(LONG // 20))
  lines = "".join(f"\n\nAnswer: {i}" for i in range(LONG // 14))
  for fn, text, last in ((extract.math_answer, boxes, LONG // 12 - 1),
                         (extract.tagged, tags, LONG // 20 - 1),
                         (extract.math_answer, lines, LONG // 14 - 1)):
    seconds, answer = _timed(fn, text)
    assert answer == str(last) and seconds < 0.5, (fn.__name__, answer, seconds)
