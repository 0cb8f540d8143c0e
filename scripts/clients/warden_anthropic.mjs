// Streams a multi-turn agent conversation through `lmwarden serve` with the
// official Anthropic SDK, unmodified except for the session header that
// Claude Code sends on every request, and checks what a client relies on:
// every turn streams text and ends cleanly, and from the second turn on the
// history is served from the prefix cache (which only happens when the
// warden keeps the conversation on one replica). Then it aborts a stream
// half-way, as a user pressing Ctrl-C does.
//
// usage: node warden_anthropic.mjs <warden-base-url> [turns]
// Prints one JSON line with what it saw; exits 1 on the first failed check.
import Anthropic from "@anthropic-ai/sdk";
import { randomUUID } from "node:crypto";

const base = process.argv[2];
if (!base) {
  console.error("usage: node warden_anthropic.mjs <warden-base-url> [turns]");
  process.exit(2);
}
const turns = Number(process.argv[3] || 6);
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

const session = randomUUID();
const client = new Anthropic({
  baseURL: base,
  apiKey: "warden-test",
  maxRetries: 0,
  defaultHeaders: { "X-Claude-Code-Session-Id": session },
});
const system = [{ type: "text", text: filler("system", 800) }];
const messages = [{ role: "user", content: filler("task", 600) }];
const seen = [];

for (let turn = 0; turn < turns; turn++) {
  const stream = client.messages.stream({ model, max_tokens: 24, system, messages });
  let deltas = 0;
  stream.on("text", () => deltas++);
  const msg = await stream.finalMessage();
  const text = msg.content.map((b) => (b.type === "text" ? b.text : "")).join("");
  check(deltas > 0 && text.length > 0, `turn ${turn}: no streamed text`);
  check(msg.stop_reason === "max_tokens" || msg.stop_reason === "end_turn", `turn ${turn}: stop_reason ${msg.stop_reason}`);
  const cached = msg.usage.cache_read_input_tokens ?? 0;
  if (turn > 0) {
    // Everything but the newest user message was seen by this replica.
    check(cached > 800, `turn ${turn}: cache_read_input_tokens ${cached}: the conversation left its replica`);
  }
  seen.push({ turn, deltas, input: msg.usage.input_tokens, cached });
  messages.push({ role: "assistant", content: text });
  messages.push({ role: "user", content: filler(`turn${turn}`, 100) });
}

// A client abort in the middle of a long stream.
const long = client.messages.stream({ model, max_tokens: 2000, system, messages });
let got = 0;
let aborted = false;
long.on("text", () => {
  if (++got === 3) long.abort();
});
try {
  await long.finalMessage();
} catch (e) {
  aborted = true;
}
check(aborted, "abort: the stream finished instead of being aborted");

console.log(JSON.stringify({ session_turns: seen, aborted }));
