"""Properties of every pass over generated long conversations (hypothesis).

After any pass: ``check_conversation`` finds no problem; no message is empty that was not empty before;
every ``Durable`` result survives verbatim; and the result fits the target, or the pass raised
``CompactionOverflow`` because the parts it must keep alone exceed the target, which the test re-derives
here independently (a naive, quadratic reading of the same rules) and checks.
"""

from __future__ import annotations

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from loopctl.compact import (
    PRUNE_MARKER,
    REQUERY_OMITTED,
    SUMMARY_HEADER,
    TRUNCATION_NOTICE,
    ContextBudget,
    HeuristicTokenCounter,
    SummarizingCompactor,
    TruncatingCompactor,
    prune,
)
from loopctl.errors import CompactionOverflow
from loopctl.message import (
    Message,
    MessagePart,
    Retention,
    Role,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
    check_conversation,
)
from tests.compact.strategies import budgets_for, long_conversations
from tests.strategies import conversations

SETTINGS = settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
any_conversation = st.one_of(long_conversations(), long_conversations(max_turns=60), conversations(max_turns=12))


# --- the rules, re-read naively --------------------------------------------------------------------------


def _bad_cuts(messages: list[Message]) -> set[int]:
    """Cut positions that would separate an assistant message from a later message holding its results."""
    bad: set[int] = set()
    last_a = -1
    for j, m in enumerate(messages):
        if m.role is Role.ASSISTANT:
            last_a = j
        elif last_a >= 0 and any(isinstance(p, ToolResultPart) for p in m.parts):
            bad.update(range(last_a + 1, j + 1))
    return bad


def _answering(messages: list[Message], i: int) -> list[int]:
    """Indices of the messages whose results answer assistant message ``i``."""
    out = []
    for j in range(i + 1, len(messages)):
        if messages[j].role is Role.ASSISTANT:
            break
        out.append(j)
    return out


def _durable_pairs(messages: list[Message], start: int, end: int, keep_thinking: bool) -> list[Message]:
    kept: list[Message] = []
    for i in range(start, end):
        m = messages[i]
        if m.role is Role.ASSISTANT:
            ids = {
                p.call_id
                for j in _answering(messages, i)
                for p in messages[j].parts
                if isinstance(p, ToolResultPart) and p.retention is Retention.DURABLE
            }
            # The thinking run that opens a group (itself and the parts up to the next thinking part) goes
            # with the group's first kept call, once.
            parts: list[MessagePart] = []
            thinking: list[MessagePart] = []
            previous: MessagePart | None = None
            for p in m.parts:
                if isinstance(p, ThinkingPart):
                    if not isinstance(previous, ThinkingPart):
                        thinking = []
                    thinking.append(p)
                elif isinstance(p, ToolCallPart) and p.id in ids:
                    parts += (thinking if keep_thinking else []) + [p]
                    thinking = []
                previous = p
            if parts:
                kept.append(Message.new(Role.ASSISTANT, parts))
        elif m.role is Role.USER:
            durable = [p for p in m.parts if isinstance(p, ToolResultPart) and p.retention is Retention.DURABLE]
            if durable:
                kept.append(Message.new(Role.USER, durable))
    return kept


def _must_keep(
    messages: list[Message], budget: ContextBudget, head: int, *, keep_thinking: bool, reserve: int = 0
) -> int:
    """Tokens of what a compaction must keep: the head, the protected tail (the messages that fit whole in
    the last ``protected_tail`` tokens, at least the last one), both widened so no call is parted from its
    results, the Durable results with their calls in between, and the compactor's own reserve."""
    counter = budget.counter
    assert isinstance(counter, HeuristicTokenCounter)
    tok = counter.message_tokens
    bad = _bad_cuts(messages)
    while head in bad:
        head += 1
    tail = len(messages) - 1
    acc = tok(messages[tail])
    while tail > 0 and acc + tok(messages[tail - 1]) <= budget.protected_tail:
        tail -= 1
        acc += tok(messages[tail])
    while tail in bad:
        tail -= 1
    tail = max(tail, head)
    kept = messages[:head] + _durable_pairs(messages, head, tail, keep_thinking) + messages[tail:]
    return counter.fixed_tokens() + sum(tok(m) for m in kept) + reserve


def _first_kept(messages: list[Message]) -> int:
    return next((i + 1 for i, m in enumerate(messages) if m.role is not Role.SYSTEM), len(messages))


# --- common checks ------------------------------------------------------------------------------------


def _durable(messages: list[Message]) -> list[ToolResultPart]:
    return [p for m in messages for p in m.parts if isinstance(p, ToolResultPart) and p.retention is Retention.DURABLE]


def _check_common(before: list[Message], after: list[Message]) -> None:
    assert check_conversation(after) == []
    assert after or not before
    originals = {id(m) for m in before}
    assert all(id(m) in originals for m in after if not m.parts), "a pass created an empty message"
    durable_after = _durable(after)
    assert len(durable_after) == len(_durable(before))
    assert all(a is b for a, b in zip(durable_after, _durable(before), strict=True)), "a Durable result changed"


# --- the passes --------------------------------------------------------------------------------------


@SETTINGS
@given(st.data())
def test_truncation_fits_the_target_or_overflows_for_a_real_reason(data: st.DataObject) -> None:
    convo = data.draw(any_conversation)
    budget = data.draw(budgets_for(convo))
    before = budget.measure(convo)
    try:
        out = TruncatingCompactor().compact(convo, budget)
    except CompactionOverflow as err:
        overflow = err
    else:
        overflow = None
    if overflow is not None:
        must = _must_keep(convo, budget, _first_kept(convo), keep_thinking=True)
        assert must > budget.target_tokens, "overflow raised although the kept parts fit"
        assert (overflow.tokens_before, overflow.tokens_after, overflow.target) == (before, must, budget.target_tokens)
        event("truncation: overflow")
        return
    _check_common(convo, out)
    if before <= budget.target_tokens:
        assert out == convo
        event("truncation: already fits")
        return
    event("truncation: compacted" if out != convo else "truncation: nothing could go")
    assert budget.measure(out) <= budget.target_tokens
    head = _first_kept(convo)
    assert out[:head] == convo[:head]
    assert out[-1] is convo[-1]
    originals = {id(m) for m in convo}
    parts_of = {id(p) for m in convo for p in m.parts}
    for m in out:
        if id(m) not in originals and m != Message.user(TRUNCATION_NOTICE):
            assert all(id(p) in parts_of for p in m.parts), "a kept copy holds a part that was not in the input"


@SETTINGS
@given(st.data())
def test_prune_keeps_every_pairing_and_every_durable_result(data: st.DataObject) -> None:
    convo = data.draw(any_conversation)
    budget = data.draw(budgets_for(convo))
    counter = budget.counter
    before = budget.measure(convo)
    out = prune(convo, need=budget.room_needed(before), counter=counter, protected_tail=budget.protected_tail)
    _check_common(convo, out)
    assert [m.role for m in out] == [m.role for m in convo]
    assert [len(m.parts) for m in out] == [len(m.parts) for m in convo]
    assert budget.measure(out) <= before
    event("prune: pruned" if out != convo else "prune: unchanged")
    event("prune: reached the target" if budget.measure(out) <= budget.target_tokens else "prune: short of target")
    prefix = PRUNE_MARKER.split("{", 1)[0]
    for m_before, m_after in zip(convo, out, strict=True):
        for p_before, p_after in zip(m_before.parts, m_after.parts, strict=True):
            if p_after is p_before:
                continue
            assert isinstance(p_before, ToolResultPart)
            assert isinstance(p_after, ToolResultPart)
            assert p_before.retention is not Retention.DURABLE
            assert (p_after.call_id, p_after.name, p_after.retention, p_after.is_error) == (
                p_before.call_id,
                p_before.name,
                p_before.retention,
                p_before.is_error,
            )
            assert str(p_after.output).startswith(prefix)
    assert out[-1] is convo[-1]


@SETTINGS
@given(st.data(), st.text(min_size=1, max_size=3_000).filter(lambda s: s.strip() != "" and "\ud800" not in s))
def test_summary_fits_the_target_or_overflows_for_a_real_reason(data: st.DataObject, summary: str) -> None:
    try:
        summary.encode("utf-8")
    except UnicodeEncodeError:
        return
    convo = data.draw(any_conversation)
    budget = data.draw(budgets_for(convo))
    compactor = SummarizingCompactor(max_summary_tokens=data.draw(st.sampled_from([1, 8, 64, 500, 4_000])))
    head = 0
    while head < len(convo) and convo[head].role is Role.SYSTEM:
        head += 1
    try:
        plan = compactor.start(convo, budget)
    except CompactionOverflow:
        must = _must_keep(convo, budget, head, keep_thinking=False, reserve=compactor.min_room(budget.counter))
        assert must > budget.target_tokens, "overflow raised although the kept parts fit"
        event("summary: overflow")
        return
    if plan is None:
        event("summary: nothing to summarize")
        return
    event("summary: summarized")
    assert plan.finish(None) == convo
    out = plan.finish(summary)
    _check_common(convo, out)
    assert budget.measure(out) <= budget.target_tokens
    assert out[:head] == convo[:head]
    assert out[head].text_content().startswith(SUMMARY_HEADER)
    assert out[-1] is convo[-1]
    text = plan.request.messages[0].text_content()
    requery = sum(
        1
        for m in plan.summarized
        for p in m.parts
        if isinstance(p, ToolResultPart) and p.retention is Retention.REQUERY
    )
    assert text.count(REQUERY_OMITTED.split("{", 1)[0]) == requery
    originals = {id(m) for m in convo}
    copies = [m for m in out[head + 1 :] if id(m) not in originals]
    assert not any(isinstance(p, ThinkingPart) for m in copies for p in m.parts), "thinking did not age out"
