"""The prune pass: old tool results lose their output to a marker naming the call, by retention class."""

from __future__ import annotations

from loopctl.compact import PRUNE_MARKER, HeuristicTokenCounter, prune, prune_marker
from loopctl.message import Message, Retention, TextPart, ToolContent, ToolResultPart, check_conversation
from tests.compact.build import all_results, assistant, call, calls, image, result, results, tool_turn, user

R, D = Retention.REQUERY, Retention.DURABLE
BIG = "x" * 4_000  # about 1,000 tokens


def _convo() -> list[Message]:
    """Four old results (untagged, Requery, untagged, Requery, oldest first), a Durable one, then a tail."""
    return [
        user("Refactor the parser."),
        *tool_turn("u1", BIG, path="a.py"),
        *tool_turn("r1", BIG, retention=R, path="b.py"),
        *tool_turn("u2", BIG, path="c.py"),
        *tool_turn("r2", BIG, retention=R, path="d.py"),
        *tool_turn("d1", BIG, name="save_note", retention=D, text="decision"),
        assistant("Working on it."),
        *tool_turn("t1", "y" * 2_000, path="e.py"),  # inside the protected tail
    ]


def _pruned(messages: list[Message]) -> set[str]:
    return {r.call_id for r in all_results(messages) if str(r.output).startswith("[output pruned")}


def test_untagged_results_go_first_oldest_first() -> None:
    out = prune(_convo(), need=500)
    assert _pruned(out) == {"u1"}
    out = prune(_convo(), need=1_500)
    assert _pruned(out) == {"u1", "u2"}


def test_requery_results_go_only_while_still_short_of_the_room_needed() -> None:
    assert _pruned(prune(_convo(), need=1_900)) == {"u1", "u2"}
    assert _pruned(prune(_convo(), need=2_500)) == {"u1", "u2", "r1"}
    assert _pruned(prune(_convo(), need=3_500)) == {"u1", "u2", "r1", "r2"}


def test_durable_results_are_never_pruned() -> None:
    out = prune(_convo(), need=10**9)
    assert "d1" not in _pruned(out)
    durable = [r for r in all_results(out) if r.retention is D]
    assert durable == [r for r in all_results(_convo()) if r.retention is D]


def test_without_a_need_every_old_untagged_result_goes_and_no_requery_one() -> None:
    assert _pruned(prune(_convo())) == {"u1", "u2"}


def test_a_pruned_result_keeps_call_id_name_retention_and_is_error() -> None:
    convo = [
        user("go"),
        calls(call("c1", "grep", pattern="TODO")),
        results(result("c1", BIG, name="grep", retention=R, is_error=True)),
    ]
    convo += [assistant("x" * 9_000)]
    out = prune(convo, need=10**9)
    pruned = out[2].parts[0]
    assert isinstance(pruned, ToolResultPart)
    assert (pruned.call_id, pruned.name, pruned.retention, pruned.is_error) == ("c1", "grep", R, True)
    assert str(pruned.output) == PRUNE_MARKER.format(call='grep({"pattern":"TODO"})')
    assert check_conversation(out) == []


def test_the_marker_names_the_tool_call_and_its_input() -> None:
    assert prune_marker("read_file", {"path": "src/app.py"}) == (
        '[output pruned to save context: read_file({"path":"src/app.py"}). Run the call again if you need its result.]'
    )


def test_marker_input_is_cut_without_splitting_a_character() -> None:
    family = "👩\u200d👩\u200d👧"
    marker = prune_marker("note", {"text": "a" * 185 + family * 10})
    shown = marker.split("note(", 1)[1].split(")", 1)[0]
    assert shown.endswith("…")
    assert len(shown) <= 200
    body = shown[:-1]
    assert body.endswith((family, "a"))  # whole clusters only
    assert body.count("\u200d") % 2 == 0


def test_the_protected_tail_is_never_touched() -> None:
    convo = _convo()
    out = prune(convo, need=10**9, protected_tail=2_000)
    assert out[-3:] == convo[-3:]
    assert all(a is b for a, b in zip(out[-3:], convo[-3:], strict=True))
    everything = prune(convo, need=10**9, protected_tail=10**9)
    assert everything == convo


def test_results_the_model_has_not_seen_are_never_pruned() -> None:
    convo = [
        user("go"),
        *tool_turn("old", BIG),
        calls(call("n1"), call("n2")),
        results(result("n1", BIG)),
        results(result("n2", BIG)),
    ]
    out = prune(convo, need=10**9, protected_tail=0)
    assert _pruned(out) == {"old"}


def test_a_huge_single_tool_output_is_pruned_in_one_step() -> None:
    counter = HeuristicTokenCounter()
    convo = [
        user("Dump the database."),
        *tool_turn("dump", "row\n" * 250_000, name="sql", query="SELECT *"),
        assistant("It has 250,000 rows."),
    ]
    before = counter.count(convo)
    assert before > 250_000
    out = prune(convo, need=before - 1_000, counter=counter)
    assert counter.count(out) < 200
    assert 'sql({"query":"SELECT *"})' in str(out[2].parts[0].output)  # type: ignore[union-attr]


def test_an_output_no_bigger_than_its_marker_is_left_alone() -> None:
    convo = [user("go"), *tool_turn("c1", "ok"), assistant("z" * 9_000)]
    out = prune(convo, need=10**9, protected_tail=0)
    assert out == convo


def test_images_in_a_pruned_output_go_with_it() -> None:
    shot = ToolContent.from_multipart([TextPart(text="screen"), image()])
    convo = [
        user("look"),
        calls(call("s1", "screenshot")),
        results(result("s1", shot, name="screenshot")),
        assistant("z" * 9_000),
    ]
    out = prune(convo, need=10**9)
    assert out[2].parts[0].output.is_string()  # type: ignore[union-attr]


def test_pruning_twice_changes_nothing_more() -> None:
    once = prune(_convo(), need=10**9)
    assert prune(once, need=10**9) == once


def test_unchanged_messages_are_the_same_objects() -> None:
    convo = _convo()
    out = prune(convo, need=500)
    assert out[2] is not convo[2]
    assert all(out[i] is convo[i] for i in range(len(convo)) if i != 2)
    assert prune(convo, need=0) == convo


def test_pruning_never_removes_a_part_or_a_message() -> None:
    convo = _convo()
    out = prune(convo, need=10**9)
    assert [len(m.parts) for m in out] == [len(m.parts) for m in convo]
    assert [m.role for m in out] == [m.role for m in convo]
