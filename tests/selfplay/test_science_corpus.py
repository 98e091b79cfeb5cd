"""The built-in science corpus: cleaning rules on known docstrings, and the real build."""

import collections
import json
import subprocess
import sys
import time

import pytest

from spade_jax.selfplay import corpus as corpus_lib
from spade_jax.selfplay import science_corpus

NUMPYDOC = '''totient(n, /, out=None)

Compute the totient of n.

Euler's totient counts the positive integers up to n that are relatively prime to n. It is
multiplicative, and for a prime power it equals p**k - p**(k - 1).

Parameters
----------
n : int
    The argument.

Returns
-------
int
    The count.

Notes
-----
The value is computed from the prime factorisation of n, so the cost is that of factoring n
with trial division and Pollard's rho method.

+-----+-----+
| n   | phi |
+-----+-----+

=====  =====
n      phi
=====  =====
7      6
=====  =====

It is computed like this::

    phi = n
    for p in primes(n):
        phi -= phi // p

and the loop ends after the last prime factor of n has been divided out.

Examples
--------
The totient of a prime is one less than the prime:

>>> totient(7)
6
>>> [totient(k)
...  for k in (1, 2)]
[1, 1]

.. versionadded:: 1.2
   The old name was phi.

See Also
--------
divisor_count : counts divisors of n and says so at length in its own docstring here.
'''


def test_sections_keep_prose_and_drop_tables_and_transcripts():
  sections = dict(science_corpus.split_sections(NUMPYDOC))
  assert list(sections) == ["", "Parameters", "Returns", "Notes", "Examples", "See Also"]
  notes = sections["Notes"]
  assert "+-----+" not in notes and "trial division" in notes
  assert "=====" not in notes and "7      6" not in notes  # the simple table is gone
  assert "phi -= phi" not in notes and "It is computed like this:" in notes  # literal block
  assert "and the loop ends" in notes
  assert "totient(n, /, out=None)" not in sections[""]  # the call signature line
  examples = sections["Examples"]
  assert examples == "The totient of a prime is one less than the prime:"  # no >>>, no output
  passages = science_corpus.docstring_passages(NUMPYDOC)
  assert len(passages) == 2  # the description and the Notes; the rest is too short or a table
  assert passages[0].startswith("Compute the totient") and "Pollard" in passages[1]
  assert "the last prime factor" in passages[1]
  assert not any(word in p for p in passages for word in (": int", "divisor_count", ">>>"))


def test_long_sections_are_cut_at_paragraphs_then_sentences():
  para = " ".join(f"Sentence number {i} says something about primes." for i in range(40))
  text = "\n\n".join(["Short opening paragraph about groups.", para])
  passages = science_corpus.cut_passages(text, max_chars=300)
  assert all(len(p) <= 300 for p in passages)
  assert passages[0].startswith("Short opening paragraph about groups.\n\nSentence number 0")
  assert " ".join(p.replace("\n\n", " ") for p in passages) == text.replace("\n\n", " ")


def test_mpmath_bold_titles_are_sections():
  doc = ("Computes the gamma function of x for real and complex arguments everywhere the "
         "function is defined, using the Lanczos and Spouge approximations where they fit.\n\n"
         "**Examples**\n\nThe gamma function at integers is a factorial:\n\n>>> gamma(5)\n24.0"
         "\n\n**References**\n\n1. A reference book about special functions and their values.")
  titles = [t for t, _ in science_corpus.split_sections(doc)]
  assert titles == ["", "Examples", "References"]
  assert len(science_corpus.docstring_passages(doc)) == 1


def test_objects_are_documented_at_their_home_module():
  import scipy.special
  import sympy.physics.units as units
  names = {name for name, _ in science_corpus._documented(units, "sympy.physics")}
  assert "sympy.physics.units.Quantity" in names  # defined under sympy.physics
  assert "sympy.physics.units.sqrt" not in names  # imported from sympy.functions
  special = {name for name, _ in science_corpus._documented(scipy.special, "scipy.special")}
  assert "scipy.special.gamma" in special  # a ufunc belongs to the module exporting it


@pytest.fixture(scope="module")
def built(tmp_path_factory):
  cache = tmp_path_factory.mktemp("cache")
  start = time.perf_counter()
  docs = science_corpus.load_corpus(cache)
  return cache, docs, time.perf_counter() - start


def test_real_build_has_15k_clean_unique_tagged_passages(built):
  cache, docs, seconds = built
  assert len(docs) >= 15_000, len(docs)
  assert seconds < 120, seconds
  shares = collections.Counter(d["source"] for d in docs)
  assert set(shares) == {name for name, _ in science_corpus.SOURCES}
  assert all(n >= 5 for n in shares.values()), shares  # scipy.constants is mostly tables
  assert max(shares.values()) < 0.3 * len(docs), shares
  texts = [d["text"] for d in docs]
  assert len({science_corpus._fingerprint(t) for t in texts}) == len(docs)  # deduplicated
  assert len({d["id"] for d in docs}) == len(docs)
  assert not any(">>> " in t for t in texts)
  assert all(d["module"].startswith(d["source"].split(".")[0]) for d in docs)
  body = [t.split("\n\n", 1)[1] for t in texts]
  assert all(science_corpus.MIN_PASSAGE_CHARS <= len(b) <= science_corpus.MAX_PASSAGE_CHARS
             for b in body)
  (path,) = cache.glob("science-*.jsonl")
  header, *lines = path.read_text().splitlines()
  assert json.loads(header)["documents"] == len(docs)
  assert [json.loads(line) for line in lines] == docs


def test_cached_stats_command_is_fast_and_jax_free(built):
  cache, docs, _ = built
  code = ("import sys, runpy; sys.argv = ['corpus', 'stats'];"
          "runpy.run_module('spade_jax.selfplay.corpus', run_name='__main__');"
          "print('jax' in sys.modules, 'scipy' in sys.modules)")
  start = time.perf_counter()
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       env={"SPADE_JAX_CACHE": str(cache), "PATH": "", "PYTHONPATH": ":".join(
                           sys.path)})
  assert time.perf_counter() - start < 5.0
  lines = out.stdout.strip().splitlines()
  assert lines[0] == f"documents: {len(docs)}" and lines[-1] == "False False"
  assert lines[1].startswith("length (characters): p5 ")
  assert any(line.split()[0] == "sympy.ntheory" for line in lines[3:-1])


def test_stats_of_documents():
  docs = [("a", "x" * 10, "A"), ("b", "x" * 30, "A"), ("c", "x" * 20, "B"), ("d", "x" * 40, "A")]
  stats = corpus_lib.corpus_stats(docs)
  assert stats["documents"] == 4 and stats["share"] == {"A": 0.75, "B": 0.25}
  assert stats["length_percentiles"][50] == 25.0 and stats["length_percentiles"][5] == 11.5
