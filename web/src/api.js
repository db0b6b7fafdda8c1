// The server's API, with the page's token on every request (docs/web.md, "Security").
const meta = document.querySelector('meta[name="loopctl-token"]');
const pageToken = meta ? meta.getAttribute("content") : "";

// A remote server's access token comes in the URL's fragment (never sent to the server, never logged), once.
const fromHash = new URLSearchParams(location.hash.slice(1)).get("token");
if (fromHash) {
  sessionStorage.setItem("loopctl-access", fromHash);
  history.replaceState(null, "", location.pathname + location.search);
}
const access = sessionStorage.getItem("loopctl-access");

export function headers(extra = {}) {
  const h = { "X-Loopctl-Token": pageToken, ...extra };
  if (access) h.Authorization = `Bearer ${access}`;
  return h;
}

async function check(response) {
  if (!response.ok) {
    let text = await response.text();
    try {
      text = JSON.parse(text).error ?? text;
    } catch {}
    throw new Error(`${response.status}: ${text}`);
  }
  return response;
}

export async function getJSON(path) {
  return (await check(await fetch(path, { headers: headers() }))).json();
}

export async function postJSON(path, body) {
  const r = await fetch(path, {
    method: "POST",
    headers: headers({ "Content-Type": "application/json" }),
    body: JSON.stringify(body),
  });
  return check(r);
}

// A UI message stream (the AI SDK's protocol): each parsed chunk to `onChunk`, until [DONE].
export async function readStream(response, onChunk) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      for (const line of event.split("\n")) {
        if (!line.startsWith("data: ")) continue;
        const data = line.slice(6);
        if (data === "[DONE]") return;
        onChunk(JSON.parse(data));
      }
    }
  }
}

export async function download(path, filename) {
  const r = await check(await fetch(path, { headers: headers() }));
  const url = URL.createObjectURL(await r.blob());
  const a = document.createElement("a");
  a.href = url;
  a.download = filename;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}
