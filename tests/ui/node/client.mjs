// The protocols' own clients against a loopctl app, driven by tests/ui/test_protocols.py.
//
//   node client.mjs agui  URL THREAD_ID PLAN_JSON   @ag-ui/client's HttpAgent (it verifies the events' order)
//   node client.mjs aisdk URL CHAT_ID   PLAN_JSON   the `ai` package's Chat (useChat's state machine) over
//                                                  DefaultChatTransport, parsing with its own schema
//
// PLAN_JSON is a list of steps: {"prompt": "..."} sends a user message; {"resume": [...]} (AG-UI) answers the
// interrupts; {"toolResults": [{"toolCallId", "content"}]} (AG-UI) answers front-end tool calls; "tools" (AG-UI)
// declares the front end's tools for the run; "state" (AG-UI) sets the agent's shared state before the step; {"approve": true|false, "reason": "..."} (AI SDK) answers every pending tool approval.
// Prints one JSON object: per step, the event or chunk types seen, the messages after it, and any error.
import { HttpAgent } from "@ag-ui/client";
import { AbstractChat, DefaultChatTransport, lastAssistantMessageIsCompleteWithApprovalResponses } from "ai";

const [mode, url, threadId, planText] = process.argv.slice(2);
const plan = JSON.parse(planText);

async function agui() {
  const agent = new HttpAgent({ url, threadId });
  const steps = [];
  let n = 0;
  for (const step of plan) {
    n += 1;
    const events = [];
    let error = null;
    let finished = null;
    if (step.state !== undefined) {
      agent.setState(step.state);
    }
    if (step.prompt !== undefined) {
      agent.addMessage({ id: `user-${n}`, role: "user", content: step.prompt });
    }
    for (const r of step.toolResults ?? []) {
      // The application ran a front-end tool call the run left pending: its result, as a tool message.
      agent.addMessage({ id: `tool-${n}-${r.toolCallId}`, role: "tool", toolCallId: r.toolCallId, content: r.content });
    }
    const params = { runId: `run-${n}` };
    if (step.resume !== undefined) {
      params.resume = step.resume;
    }
    if (step.tools !== undefined) {
      params.tools = step.tools;
    }
    try {
      await agent.runAgent(params, {
        onEvent({ event }) {
          events.push(event);
        },
        onRunFinishedEvent(params) {
          finished = {
            outcome: params.outcome,
            result: params.result ?? null,
            interrupts: params.interrupts ?? [],
            pendingToolCallIds: params.pendingToolCallIds ?? [],
          };
        },
        onRunErrorEvent({ event }) {
          error = { message: event.message, code: event.code ?? null };
        },
      });
    } catch (e) {
      error = error ?? { message: String(e?.message ?? e), thrown: true };
    }
    steps.push({ events, finished, error, messages: structuredClone(agent.messages), state: structuredClone(agent.state) });
  }
  return { steps };
}

class State {
  constructor() {
    this.messages = [];
    this.status = "ready";
    this.error = undefined;
  }
  pushMessage(m) {
    this.messages = this.messages.concat(m);
  }
  popMessage() {
    this.messages = this.messages.slice(0, -1);
  }
  replaceMessage(i, m) {
    this.messages = [...this.messages.slice(0, i), this.snapshot(m), ...this.messages.slice(i + 1)];
  }
  snapshot(thing) {
    return structuredClone(thing);
  }
}

class Chat extends AbstractChat {
  constructor(init) {
    super({ ...init, state: new State() });
  }
}

async function aisdk() {
  const chunks = [];
  const data = [];
  const errors = [];
  let finished = 0;
  const transport = new DefaultChatTransport({
    api: url,
    // Every chunk the transport parsed with the `ai` package's own schema, before Chat applies it.
    fetch: async (input, init) => fetch(input, init),
  });
  const original = transport.processResponseStream.bind(transport);
  transport.processResponseStream = (stream) =>
    original(stream).pipeThrough(
      new TransformStream({
        transform(chunk, controller) {
          chunks.push(chunk);
          controller.enqueue(chunk);
        },
      }),
    );
  const chat = new Chat({
    id: threadId,
    transport,
    onData: (part) => data.push(part),
    onError: (e) => errors.push(String(e?.message ?? e)),
    onFinish: () => {
      finished += 1;
    },
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
  });
  const steps = [];
  for (const step of plan) {
    const seen = chunks.length;
    if (step.prompt !== undefined) {
      await chat.sendMessage({ text: step.prompt });
    } else if (step.approve !== undefined) {
      const last = chat.messages[chat.messages.length - 1];
      const pending = last.parts.filter((p) => p.state === "approval-requested");
      for (const p of pending) {
        await chat.addToolApprovalResponse({ id: p.approval.id, approved: step.approve, reason: step.reason });
      }
    }
    // An approval response sends the next request by itself (sendAutomaticallyWhen): wait for it to end.
    for (let i = 0; i < 200 && chat.status !== "ready" && chat.status !== "error"; i++) {
      await new Promise((r) => setTimeout(r, 25));
    }
    steps.push({
      chunks: chunks.slice(seen),
      status: chat.status,
      error: chat.error ? String(chat.error.message ?? chat.error) : null,
      messages: structuredClone(chat.messages),
    });
  }
  return { steps, data, errors, finished };
}

const out = mode === "agui" ? await agui() : await aisdk();
process.stdout.write(JSON.stringify(out));
