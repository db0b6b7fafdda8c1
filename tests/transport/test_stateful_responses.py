"""Stateful Responses (``docs/transport.md``, "Stateful Responses") against the fake server, offline: chaining
with ``previous_response_id`` (only the new input sent; the whole input again when the server no longer has
the response), the Conversations API, and the WebSocket mode (one connection, reconnect after a drop,
keep-alive, the same typed errors as HTTP)."""

from __future__ import annotations

from typing import Any

import pytest

from loopctl.engine import BareLoop, RunConfig, SessionConfig
from loopctl.errors import AuthenticationError, RateLimited
from loopctl.message import Message, MessagePart, Role
from loopctl.testing import CutStream, Delay, ErrorReply, FakeProviderServer
from loopctl.tool import tool
from loopctl.transport import OpenAIResponsesClient, OpenAIResponsesWebSocketClient, openai_ws

RUN = RunConfig(loop_detection=None, retry_initial_delay=0.01, retry_max_delay=0.01)


@pytest.fixture(autouse=True)
def no_keys_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


def call(n: int) -> Message:
    return Message.new(Role.ASSISTANT, [MessagePart.tool_call(f"call_{n}", "lookup", {"key": f"k{n}"})])


def bodies(server: FakeProviderServer) -> list[dict[str, Any]]:
    return [r.body for r in server.requests if r.api == "openai-responses"]


def kinds(body: dict[str, Any]) -> list[str]:
    return [item.get("type") or item.get("role", "?") for item in body["input"]]


class TestPreviousResponseId:
    def test_each_call_sends_only_its_new_input(self) -> None:
        with FakeProviderServer([call(1), call(2), "done"]) as server:
            client = OpenAIResponsesClient("gpt-5", api_key="k", base_url=server.openai_base_url, stateful=True)
            run = BareLoop(client, [lookup], SessionConfig(system_prompt="s")).run_sync("go", RUN)
        assert run.output == "done"
        sent = bodies(server)
        assert "previous_response_id" not in sent[0] and kinds(sent[0]) == ["developer", "user"]
        assert sent[1]["previous_response_id"] == "resp_fake000001"
        assert sent[2]["previous_response_id"] == "resp_fake000002"
        assert [kinds(b) for b in sent[1:]] == [["function_call_output"], ["function_call_output"]]
        assert sent[2]["input"][0]["output"] == "value of k2"
        # The tools and settings go every time (a chain does not carry them), the system message only first.
        assert sent[2]["tools"] == sent[0]["tools"]

    def test_the_whole_input_goes_again_when_the_server_lost_the_response(self) -> None:
        with FakeProviderServer([call(1), call(2), "done"]) as server:
            client = OpenAIResponsesClient("gpt-5", api_key="k", base_url=server.openai_base_url, stateful=True)
            loop = BareLoop(client, [lookup])

            original = server._provider_state

            def expire_once(request, token):  # type: ignore[no-untyped-def]
                if isinstance(request.body, dict) and request.body.get("previous_response_id") == "resp_fake000001":
                    server.stored_responses.clear()  # expired: the server no longer has it
                return original(request, token)

            server._provider_state = expire_once  # type: ignore[method-assign]
            run = loop.run_sync("go", RUN)
        assert run.output == "done"
        sent = bodies(server)
        # Call 2 names resp_fake000001, is refused (previous_response_not_found), and goes again whole.
        assert sent[1]["previous_response_id"] == "resp_fake000001" and kinds(sent[1]) == ["function_call_output"]
        assert "previous_response_id" not in sent[2]
        assert kinds(sent[2]) == ["user", "function_call", "function_call_output"]
        # The chain starts again from the reply to the whole input.
        assert sent[3]["previous_response_id"] == "resp_fake000003" and kinds(sent[3]) == ["function_call_output"]

    def test_a_404_for_the_previous_response_also_falls_back(self) -> None:
        gone = ErrorReply(status=404, message="Previous response with id 'resp_fake000001' not found.")
        with FakeProviderServer([call(1), gone, "done"]) as server:
            client = OpenAIResponsesClient("gpt-5", api_key="k", base_url=server.openai_base_url, stateful=True)
            assert BareLoop(client, [lookup]).run_sync("go", RUN).output == "done"
        sent = bodies(server)
        assert "previous_response_id" in sent[1] and "previous_response_id" not in sent[2]

    async def test_an_edited_history_is_sent_whole(self) -> None:
        with FakeProviderServer(["one", "two"]) as server:
            client = OpenAIResponsesClient("gpt-5", api_key="k", base_url=server.openai_base_url, stateful=True)
            loop = BareLoop(client, [])
            await loop.run("first", RUN)
            edited = BareLoop.from_machine(loop.into_machine(), client, [])  # equal messages, new objects
            await edited.run("second", RUN)
            await client.aclose()
        sent = bodies(server)
        assert "previous_response_id" not in sent[1] and kinds(sent[1]) == ["user", "message", "user"]

    def test_store_false_cannot_chain_over_http(self) -> None:
        with pytest.raises(ValueError, match="store=False keeps nothing"):
            OpenAIResponsesClient("gpt-5", api_key="k", stateful=True, codec_options={"store": False})


class TestConversations:
    async def test_a_conversation_is_made_and_each_call_sends_only_its_new_input(self) -> None:
        with FakeProviderServer([call(1), "done", "again"]) as server:
            client = OpenAIResponsesClient("gpt-5", api_key="k", base_url=server.openai_base_url, conversation="auto")
            loop = BareLoop(client, [lookup])
            await loop.run("go", RUN)
            await loop.run("more?", RUN)
            await client.aclose()
        made = [r for r in server.requests if r.path.endswith("/conversations")]
        assert len(made) == 1
        sent = bodies(server)
        assert {b["conversation"] for b in sent} == {"conv_fake000001"}
        assert [kinds(b) for b in sent] == [["user"], ["function_call_output"], ["user"]]
        assert "previous_response_id" not in sent[1]
        assert len(server.conversations["conv_fake000001"]) == 3  # every input item went to it


class TestWebSocket:
    def test_a_run_goes_over_one_connection_with_only_new_input(self) -> None:
        with FakeProviderServer([call(1), call(2), "done"]) as server:
            client = OpenAIResponsesWebSocketClient(
                "gpt-5", api_key="k", base_url=server.openai_base_url, codec_options={"store": False}
            )
            run = BareLoop(client, [lookup], SessionConfig(system_prompt="s")).run_sync("go", RUN)
        assert run.output == "done"
        assert server.websocket_connections == 1 and client.connections_opened == 1
        sent = server.requests
        assert all(r.websocket and r.method == "WS" for r in sent)
        assert "stream" not in sent[0].raw.decode() and '"type":"response.create"' in sent[0].raw.decode()
        assert kinds(sent[0].body) == ["developer", "user"]
        # store=False: the connection holds the responses in memory, so the chain works.
        assert [r.body.get("previous_response_id") for r in sent[1:]] == ["resp_fake000001", "resp_fake000002"]
        assert [kinds(r.body) for r in sent[1:]] == [["function_call_output"], ["function_call_output"]]
        assert run.usage.input_tokens > 0

    @pytest.mark.parametrize("store", [False, None], ids=["store-false", "stored"])
    def test_a_connection_dropped_mid_turn_is_reopened_and_the_turn_resumed(self, store: bool | None) -> None:
        """Turn 2's stream is cut after three events: the client raises StreamTruncated, the engine retries,
        the client opens a new connection. With store=False the new connection does not hold the previous
        response: the turn goes whole; stored, it goes with previous_response_id."""
        options = {"store": store} if store is not None else {}
        with FakeProviderServer([call(1), CutStream(call(2), after_events=3), call(2), "done"]) as server:
            client = OpenAIResponsesWebSocketClient(
                "gpt-5", api_key="k", base_url=server.openai_base_url, codec_options=options
            )
            events: list[Any] = []
            run = BareLoop(client, [lookup], observers=[events.append]).run_sync("go", RUN)
        assert run.output == "done"
        assert server.websocket_connections == 2 and client.connections_opened == 2
        assert [type(e).__name__ for e in events].count("ModelCallRetry") == 1
        sent = [r.body for r in server.requests]
        assert sent[1]["previous_response_id"] == "resp_fake000001"  # the attempt that was cut
        if store is False:
            assert "previous_response_id" not in sent[2]
            assert kinds(sent[2]) == ["user", "function_call", "function_call_output"]
        else:
            assert sent[2]["previous_response_id"] == "resp_fake000001" and kinds(sent[2]) == ["function_call_output"]
        assert sent[3]["previous_response_id"] == "resp_fake000003"

    async def test_an_unknown_previous_response_falls_back_to_the_whole_input(self) -> None:
        with FakeProviderServer(["one", "two"]) as server:
            client = OpenAIResponsesWebSocketClient("gpt-5", api_key="k", base_url=server.openai_base_url)
            loop = BareLoop(client, [])
            await loop.run("first", RUN)
            server.stored_responses.clear()  # expired at the API
            await client._discard(client._open[0])  # and the connection that held it in memory is gone
            await loop.run("second", RUN)
            await client.aclose()
        assert loop.history[-1].text_content() == "two"
        sent = [r.body for r in server.requests]
        assert sent[1]["previous_response_id"] == "resp_fake000001"  # refused: previous_response_not_found
        assert "previous_response_id" not in sent[2] and kinds(sent[2]) == ["user", "message", "user"]

    async def test_error_events_are_the_typed_errors_of_http(self) -> None:
        from loopctl.providers import ModelRequest

        with FakeProviderServer([ErrorReply.rate_limited(retry_after=3), ErrorReply(status=401)]) as server:
            client = OpenAIResponsesWebSocketClient("gpt-5", api_key="k", base_url=server.openai_base_url)
            request = ModelRequest(messages=[Message.user("hi")])
            with pytest.raises(RateLimited) as limited:
                await client.generate(request)
            with pytest.raises(AuthenticationError):
                await client.generate(request)
            await client.aclose()
        assert limited.value.status == 429

    async def test_keep_alive_pings_hold_a_slow_turn_and_an_old_connection_is_replaced(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        with FakeProviderServer([Delay(0.5, "slow"), "quick"]) as server:
            client = OpenAIResponsesWebSocketClient(
                "gpt-5", api_key="k", base_url=server.openai_base_url, ping_interval=0.05, ping_timeout=0.2
            )
            loop = BareLoop(client, [])
            assert (await loop.run("first", RUN)).output == "slow"  # pings answered while the reply is delayed
            monkeypatch.setattr(openai_ws, "CONNECTION_LIFETIME", 0.0)
            assert (await loop.run("second", RUN)).output == "quick"
            await client.aclose()
        assert server.websocket_connections == 2
        # The new connection does not hold the first response in memory, but the API stored it.
        assert server.requests[1].body["previous_response_id"] == "resp_fake000001"
