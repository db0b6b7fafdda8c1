// The reply being streamed, built from UI message stream chunks (the AI SDK's protocol, as loopctl sends it:
// loopctl/ui/ai_sdk.py). `reset-step` drops what the current step showed: the model call is being sent again.
export function newLive() {
  // `external`: results of calls shown in the stored messages (a continued run runs the calls it paused on).
  return { status: "streaming", parts: [], stepStart: 0, error: null, metadata: null, external: {} };
}

function tool(state, id) {
  return state.parts.find((p) => p.type === "tool" && p.toolCallId === id);
}

export function applyChunk(state, c) {
  const byId = (type) => state.parts.find((p) => p.type === type && p.id === c.id);
  switch (c.type) {
    case "start-step":
      state.stepStart = state.parts.length;
      break;
    case "reset-step":
      state.parts.splice(state.stepStart);
      break;
    case "text-start":
    case "reasoning-start":
      state.parts.push({ type: c.type.split("-")[0], id: c.id, text: "" });
      break;
    case "text-delta":
    case "reasoning-delta": {
      const part = byId(c.type.split("-")[0]);
      if (part) part.text += c.delta;
      break;
    }
    case "tool-input-start":
      state.parts.push({ type: "tool", toolCallId: c.toolCallId, toolName: c.toolName, input: {}, state: "running" });
      break;
    case "tool-input-available": {
      const part = tool(state, c.toolCallId);
      if (part) part.input = c.input;
      else state.parts.push({ type: "tool", toolCallId: c.toolCallId, toolName: c.toolName, input: c.input, state: "running" });
      break;
    }
    case "tool-approval-request": {
      const part = tool(state, c.toolCallId);
      if (part) part.state = "awaiting";
      break;
    }
    case "tool-output-available":
    case "tool-output-error": {
      const isError = c.type === "tool-output-error";
      const result = { output: isError ? c.errorText : typeof c.output === "string" ? c.output : JSON.stringify(c.output), isError, images: [] };
      const part = tool(state, c.toolCallId);
      if (!part) {
        state.external[c.toolCallId] = result;
        break;
      }
      part.result = result;
      part.state = isError ? "error" : "done";
      break;
    }
    case "tool-output-denied": {
      const part = tool(state, c.toolCallId);
      if (part) part.result = { output: "denied", isError: true, images: [] };
      else state.external[c.toolCallId] = { output: "denied", isError: true, images: [] };
      break;
    }
    case "file": {
      const last = [...state.parts].reverse().find((p) => p.type === "tool" && p.result);
      if (last) last.result.images.push(c.url);
      else state.parts.push({ type: "file", url: c.url });
      break;
    }
    case "data-loopctl-tool": {
      const part = tool(state, c.data.toolCallId);
      if (part) part.duration = c.data.duration;
      else if (state.external[c.data.toolCallId]) state.external[c.data.toolCallId].duration = c.data.duration;
      break;
    }
    case "data-loopctl-diff": {
      const part = tool(state, c.data.toolCallId);
      if (part) part.diff = c.data;
      break;
    }
    case "error":
      state.error = c.errorText;
      break;
    case "finish":
      state.metadata = c.messageMetadata ?? null;
      state.status = "done";
      break;
    default:
      break;
  }
}
