"""The science corpus cache: concurrent builders, damaged files (real processes, real files).

The harvest itself (`build_corpus`, tested in test_science_corpus.py) is swapped for a quick
one here: what is tested is how the cache file is written, checked and rebuilt.
"""

import hashlib
import json
import os
import re
import subprocess
import sys
import warnings

import pytest

from spade_jax.selfplay import science_corpus


def _docs(n: int) -> list[dict[str, str]]:
  return [{"id": f"d{i}", "source": "s", "module": "m", "text": f"passage {i} " * 40}
          for i in range(n)]


# Each child's build waits until both children are building (neither found a cache), then
# returns ~8 MB of documents; each write's fsync takes 0.3 s more, so the two writes of the
# same file surely overlap.
CHILD = """
import pathlib, os, sys, time
from spade_jax.selfplay import science_corpus
cache = pathlib.Path(os.environ["SPADE_JAX_CACHE"])
fsync = os.fsync
os.fsync = lambda fd: (time.sleep(0.3), fsync(fd))[1]

def build():
  (cache / f"ready-{sys.argv[1]}").touch()
  while len(list(cache.glob("ready-*"))) < 2:
    time.sleep(0.001)
  return [{"id": f"d{i}", "source": "s", "module": "m", "text": f"passage {i} " * 40}
          for i in range(20_000)]

science_corpus.build_corpus = build
docs = science_corpus.load_corpus()
print(len(docs), docs[-1]["id"])
"""


def test_two_processes_building_at_once_leave_one_whole_cache(tmp_path, monkeypatch):
  env = {"SPADE_JAX_CACHE": str(tmp_path), "PATH": "", "PYTHONPATH": ":".join(sys.path)}
  children = [subprocess.Popen([sys.executable, "-c", CHILD, str(i)], env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE) for i in range(2)]
  outputs = [child.communicate(timeout=120) for child in children]
  assert [child.returncode for child in children] == [0, 0], outputs
  assert [out for out, _ in outputs] == ["20000 d19999\n"] * 2
  path = science_corpus.cache_path(tmp_path)
  assert sorted(p.name for p in tmp_path.iterdir()) == sorted([path.name, "ready-0", "ready-1"])
  monkeypatch.setattr(science_corpus, "build_corpus", pytest.fail)  # must read, not build
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    assert science_corpus.load_corpus(tmp_path) == _docs(20_000)


def _damaged(path, detail: str):
  return pytest.warns(UserWarning, match=re.escape(f"the corpus cache {path} is damaged ({detail}"))


def test_a_damaged_cache_file_is_reported_by_name_and_rebuilt(tmp_path, monkeypatch):
  docs, builds = _docs(60), []
  monkeypatch.setattr(science_corpus, "build_corpus", lambda: builds.append(1) or docs)
  assert science_corpus.load_corpus(tmp_path) == docs
  path = science_corpus.cache_path(tmp_path)
  whole = path.read_bytes()
  start = whole.index(b"\n") + 1  # the documents follow the header line
  mid_line = len(whole) * 2 // 3
  at_line = whole.rindex(b"\n", 0, mid_line) + 1  # whole lines lost: the rest still parses
  for size in (mid_line, at_line):
    os.truncate(path, size)
    with _damaged(path, f"its {size - start} bytes of documents do not match"):
      assert science_corpus.load_corpus(tmp_path) == docs
    assert path.read_bytes() == whole  # rebuilt in place
  flipped = bytearray(whole)
  flipped[len(whole) // 2] ^= 0x01
  path.write_bytes(bytes(flipped))
  with _damaged(path, f"its {len(whole) - start} bytes of documents"):
    science_corpus.load_corpus(tmp_path)
  body = b"".join(json.dumps(d).encode() + b"\n" for d in docs[:-1])
  for content, detail in (
      (body, "its first line is not the corpus header"),  # headerless lines
      (b"", "unreadable: "),
      (json.dumps({"corpus": science_corpus._CACHE_TAG, "documents": 60,
                   "sha256": hashlib.sha256(body).hexdigest()}).encode() + b"\n" + body,
       "59 documents, its header says 60")):
    path.write_bytes(content)
    with _damaged(path, detail):
      assert science_corpus.load_corpus(tmp_path) == docs
  assert len(builds) == 1 + 6 and path.read_bytes() == whole
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    assert science_corpus.load_corpus(tmp_path) == docs and len(builds) == 7  # read, not built
