"""Compaction, pruning and retention treat what a provider ran on its own side like tool calls and results
(``docs/compaction.md``, "Provider-native parts"): counted, pruned oldest first by retention class (the pair
losing its raw blocks, so it travels as notes), kept with its call when ``Durable``."""

from __future__ import annotations

from loopctl.compact import ContextBudget, HeuristicTokenCounter, TruncatingCompactor, prune, prune_marker
from loopctl.message import (
    Message,
    Retention,
    Role,
    ServerToolCallPart,
    ServerToolResultPart,
    TextPart,
    check_conversation,
)
from loopctl.providers import anthropic, openai_responses
from tests.compact.build import user

BIG = "hit " * 1_000  # about 1,000 tokens


def search_turn(n: int, retention: Retention | None = None, provider: str = "anthropic") -> list[Message]:
    call_id = f"srvtoolu_{n}"
    call = ServerToolCallPart(
        id=call_id,
        name="web_search",
        input={"query": f"q{n}"},
        provider=provider,
        raw={"type": "server_tool_use", "id": call_id, "name": "web_search", "input": {"query": f"q{n}"}},
    )
    result = ServerToolResultPart(
        call_id=call_id,
        name="web_search",
        output=BIG,
        provider=provider,
        retention=retention,
        raw={"type": "web_search_tool_result", "tool_use_id": call_id, "content": [{"type": "web_search_result"}]},
    )
    return [user(f"question {n}"), Message.new(Role.ASSISTANT, [call, result, TextPart(text=f"answer {n}")])]


def _convo() -> list[Message]:
    return [
        *search_turn(1),
        *search_turn(2, Retention.REQUERY),
        *search_turn(3, Retention.DURABLE),
        *search_turn(4),
        user("latest"),
    ]


def _results(messages: list[Message]) -> dict[str, ServerToolResultPart]:
    return {p.call_id: p for m in messages for p in m.parts if isinstance(p, ServerToolResultPart)}


def test_server_results_count_like_tool_results() -> None:
    counter = HeuristicTokenCounter()
    [_, small] = search_turn(1)
    assert counter.message_tokens(small) > 900  # the result's text is counted
    empty = Message.new(Role.ASSISTANT, [small.parts[0]])
    assert counter.message_tokens(empty) < 50


def test_prune_takes_untagged_server_results_first_and_strips_the_raw_blocks() -> None:
    out = prune(_convo(), need=500, protected_tail=0)
    results = _results(out)
    marker = prune_marker("web_search", {"query": "q1"})
    assert results["srvtoolu_1"].output == marker and results["srvtoolu_1"].raw is None
    call = next(p for p in out[1].parts if isinstance(p, ServerToolCallPart))
    assert call.raw is None and call.input == {"query": "q1"}  # the call keeps what it was; its block goes
    assert results["srvtoolu_2"].raw is not None  # Requery: not while untagged ones remain
    assert check_conversation(out) == []


def test_requery_then_never_durable() -> None:
    out = prune(_convo(), need=10**9, protected_tail=0)
    results = _results(out)
    assert results["srvtoolu_2"].output.startswith("[output pruned")
    assert results["srvtoolu_3"].output == BIG and results["srvtoolu_3"].raw is not None
    assert results["srvtoolu_3"].retention is Retention.DURABLE


def test_a_pruned_pair_goes_to_its_own_provider_as_notes() -> None:
    out = prune(_convo(), need=500, protected_tail=0)
    body = anthropic.build_request(out, model="claude-sonnet-4-5", prompt_cache=False)
    first = body["messages"][1]["content"]
    assert first[0] == {"type": "text", "text": '[web_search ran at anthropic with input: {"query":"q1"}]'}
    assert first[1]["text"].startswith("[web_search result: [output pruned to save context: web_search(")
    second = body["messages"][3]["content"]
    assert [b["type"] for b in second] == ["server_tool_use", "web_search_tool_result", "text"]  # untouched


def test_a_pruned_responses_item_is_not_replayed_with_its_results() -> None:
    call = ServerToolCallPart(
        id="ws_1",
        name="web_search",
        input={"type": "search", "query": "q"},
        provider="openai",
        raw={"id": "ws_1", "type": "web_search_call", "status": "completed", "action": {"sources": [BIG]}},
    )
    result = ServerToolResultPart(call_id="ws_1", name="web_search", output=BIG, provider="openai")
    convo = [user("q"), Message.new(Role.ASSISTANT, [call, result, TextPart(text="a")]), user("next")]
    body = openai_responses.build_request(prune(convo, need=100, protected_tail=0), model="gpt-5")
    assert not any(i.get("type") == "web_search_call" for i in body["input"])
    assert body["input"][1]["content"].startswith("[web_search ran at openai")


def test_truncation_keeps_a_durable_server_result_with_its_call() -> None:
    convo = [*_convo(), *search_turn(5), user("end")]
    budget = ContextBudget(window=6_000, protected_tail=0)
    out = TruncatingCompactor().compact(convo, budget)
    kept = _results(out)
    assert "srvtoolu_3" in kept and kept["srvtoolu_3"].raw is not None
    calls = {p.id for m in out for p in m.parts if isinstance(p, ServerToolCallPart)}
    assert "srvtoolu_3" in calls
    assert "srvtoolu_1" not in kept
    assert check_conversation(out) == []
