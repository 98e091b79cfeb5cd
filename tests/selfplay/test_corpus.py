"""Corpus: file formats, per-host sharding, seeded epoch shuffles, exact resume."""

import json

import pytest
from ml_collections import ConfigDict

from spade_jax.selfplay import corpus as corpus_lib
from spade_jax.selfplay import science_corpus


def _docs(n):
  return [(f"d{i}", f"document number {i}", "the test corpus") for i in range(n)]


def _cfg(paths=(), **kw):
  c = ConfigDict(dict(paths=paths, format="auto", text_field="text", max_chars=2000, seed=0))
  c.update(kw)
  return corpus_lib.CorpusConfig.from_config(c)


def test_reads_text_jsonl_and_parquet(tmp_path):
  import pyarrow as pa
  import pyarrow.parquet as pq
  (tmp_path / "a.txt").write_text("first para\nline two\n\n\nsecond para\n")
  (tmp_path / "b.jsonl").write_text(json.dumps({"text": "json doc"}) + "\n\n"
                                    + json.dumps({"text": "json two", "x": 1}) + "\n")
  pq.write_table(pa.table({"text": ["pq one", "pq two"]}), tmp_path / "c.parquet")
  docs = corpus_lib.read_documents([str(tmp_path / "*.txt"), str(tmp_path / "b.jsonl"),
                                    str(tmp_path / "c.parquet")])
  assert [d[:2] for d in docs] == [("a.txt:0", "first para\nline two"),
                                   ("a.txt:1", "second para"), ("b.jsonl:0", "json doc"),
                                   ("b.jsonl:1", "json two"), ("c.parquet:0", "pq one"),
                                   ("c.parquet:1", "pq two")]
  assert docs[0][2] == "the corpus file a.txt" and docs[-1][2] == "the corpus file c.parquet"


def test_bad_inputs_name_the_file_and_field(tmp_path):
  with pytest.raises(FileNotFoundError, match="nothing.*matches no file"):
    corpus_lib.read_documents([str(tmp_path / "nothing*.txt")])
  (tmp_path / "x.csv").write_text("a,b")
  with pytest.raises(ValueError, match="x.csv.*suffix"):
    corpus_lib.read_documents([str(tmp_path / "x.csv")])
  (tmp_path / "y.jsonl").write_text('{"body": "no text field"}\n')
  with pytest.raises(ValueError, match="y.jsonl' line 1.*'text'"):
    corpus_lib.read_documents([str(tmp_path / "y.jsonl")])


def test_epochs_are_seeded_permutations():
  c = corpus_lib.Corpus(_docs(10), seed=3)
  first, second = c.take(10), c.take(10)
  assert sorted(p.doc_id for p in first) == sorted(d for d, _, _ in _docs(10))
  assert sorted(p.doc_id for p in second) == sorted(p.doc_id for p in first)
  assert [p.doc_id for p in first] != [p.doc_id for p in second]  # reshuffled per epoch
  again = corpus_lib.Corpus(_docs(10), seed=3).take(10)
  other = corpus_lib.Corpus(_docs(10), seed=4).take(10)
  assert again == first and other != first


def test_host_shards_are_disjoint_and_cover():
  shards = [corpus_lib.Corpus(_docs(11), shard_index=i, shard_count=3) for i in range(3)]
  seen = [{p.doc_id for p in s.take(s.shard_size)} for s in shards]
  assert [len(s) for s in seen] == [4, 4, 3]
  assert set.union(*seen) == {d for d, _, _ in _docs(11)}
  with pytest.raises(ValueError, match="fewer than the 3 hosts"):
    corpus_lib.Corpus(_docs(2), shard_count=3)


def test_state_resumes_exactly_and_rejects_other_layouts():
  c = corpus_lib.Corpus(_docs(7), seed=1, shard_index=1, shard_count=2)
  c.take(5)
  state = json.loads(json.dumps(c.state_dict()))  # what a checkpoint stores
  expected = c.take(6)
  resumed = corpus_lib.Corpus(_docs(7), seed=1, shard_index=1, shard_count=2)
  resumed.load_state_dict(state)
  assert resumed.take(6) == expected
  with pytest.raises(ValueError, match="shard"):
    corpus_lib.Corpus(_docs(7), seed=1, shard_index=0, shard_count=2).load_state_dict(state)


def test_passages_are_cut_to_max_chars(tmp_path):
  (tmp_path / "a.txt").write_text("x" * 50)
  c = corpus_lib.make_corpus(_cfg((str(tmp_path / "a.txt"),), max_chars=8), shard=(0, 1))
  assert c.next() == corpus_lib.Passage("a.txt:0", "x" * 8, "the corpus file a.txt")


def test_empty_paths_use_the_science_corpus(monkeypatch):
  fake = [{"id": "mpmath.gamma#0", "source": "mpmath", "module": "mpmath", "text": "Gamma."},
          {"id": "scipy.special.erf#0", "source": "scipy.special", "module": "scipy.special",
           "text": "Error function."}]
  monkeypatch.setattr(science_corpus, "load_corpus", lambda: fake)
  for paths in ((), ("",)):
    c = corpus_lib.make_corpus(_cfg(paths), shard=(0, 1))
    got = {p.doc_id: p.origin for p in c.take(2)}
    assert got == {"mpmath.gamma#0": "the documentation of mpmath",
                   "scipy.special.erf#0": "the documentation of scipy.special"}
