// Streams a multi-turn chat conversation through the warden with the
// official OpenAI SDK, unmodified except for a session header (OpenAI-style
// agents may send X-Session-Id), and checks what a client relies on: every
// turn streams text, ends with a finish reason and usage, and from the
// second turn on the history is served from the prefix cache (which only
// happens when the warden keeps the conversation on one replica). Then it
// aborts a stream of 20000 tokens after three chunks, as a user pressing
// Ctrl-C does.
//
// usage: node warden_openai.mjs <warden-base-url> [turns] [session-header]
// Prints one JSON line with what it saw; exits 1 on the first failed check.
import OpenAI from "openai";
import { randomUUID } from "node:crypto";

const base = process.argv[2];
if (!base) {
  console.error("usage: node warden_openai.mjs <warden-base-url> [turns] [session-header]");
  process.exit(2);
}
const turns = Number(process.argv[3] || 4);
const header = process.argv[4] || "X-Session-Id";
const abortTokens = 20000; // far more than the stream can produce before the abort lands
const model = "qwen3-4b";

function check(cond, msg) {
  if (!cond) {
    console.error("FAIL: " + msg);
    process.exit(1);
  }
}

const filler = (tag, tokens) => {
  let s = "";
  for (let i = 0; s.length < tokens * 4; i++) s += `${tag}-${i} `;
  return s.slice(0, tokens * 4);
};

const client = new OpenAI({
  baseURL: base + "/v1",
  apiKey: "warden-test",
  maxRetries: 0,
  defaultHeaders: { [header]: randomUUID() },
});
const messages = [
  { role: "system", content: filler("system", 800) },
  { role: "user", content: filler("task", 600) },
];
const seen = [];

for (let turn = 0; turn < turns; turn++) {
  const stream = await client.chat.completions.create({
    model, messages, max_tokens: 16, stream: true, stream_options: { include_usage: true },
  });
  let text = "", finish = null, usage = null, chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.choices.length > 0) {
      text += chunk.choices[0].delta?.content ?? "";
      finish = chunk.choices[0].finish_reason ?? finish;
    }
    if (chunk.usage) usage = chunk.usage;
  }
  check(text.length > 0 && chunks > 1, `turn ${turn}: no streamed text`);
  check(finish === "length" || finish === "stop", `turn ${turn}: finish ${finish}`);
  check(usage && usage.completion_tokens > 0, `turn ${turn}: usage ${JSON.stringify(usage)}`);
  const cached = usage.prompt_tokens_details?.cached_tokens ?? 0;
  if (turn > 0) {
    // Everything but the newest user message was seen by this replica.
    check(cached > 1200, `turn ${turn}: cached_tokens ${cached}: the conversation left its replica`);
  }
  seen.push({ turn, chunks, prompt: usage.prompt_tokens, cached });
  messages.push({ role: "assistant", content: text });
  messages.push({ role: "user", content: filler(`turn${turn}`, 100) });
}

// A client abort in the middle of a long stream, as Ctrl-C does: the
// caller checks on the server side that the stream did not run to its end.
const controller = new AbortController();
const long = await client.chat.completions.create(
  { model, messages, max_tokens: abortTokens, stream: true },
  { signal: controller.signal },
);
let got = 0;
try {
  for await (const chunk of long) {
    if (++got === 3) {
      controller.abort();
      break;
    }
  }
} catch (e) {
  // The SDK ends the iteration quietly on abort, or throws an AbortError.
  check(e?.name === "AbortError" || e instanceof OpenAI.APIUserAbortError, `abort: ${e}`);
}
const aborted = controller.signal.aborted;
check(aborted, `abort: the stream ended after ${got} chunks before the abort`);

console.log(JSON.stringify({ session_turns: seen, aborted }));
