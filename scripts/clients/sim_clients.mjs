// Streams from an OpenAI/Anthropic-compatible server with the official SDKs,
// unmodified, and checks what a client relies on: the event sequence, the
// text, and the usage (cache reads on a repeated prefix).
//
// usage: node sim_clients.mjs <base-url>     (e.g. http://127.0.0.1:8100)
// Prints one JSON line with what it saw; exits 1 on the first failed check.
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";

const base = process.argv[2];
if (!base) {
  console.error("usage: node sim_clients.mjs <base-url>");
  process.exit(2);
}
const model = process.argv[3] || "qwen3-4b";

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

const out = {};
const anthropic = new Anthropic({ baseURL: base, apiKey: "sim", maxRetries: 0 });
const system = [{ type: "text", text: filler("system", 600) }];
const first = [{ role: "user", content: filler("task", 400) }];

// 1. Anthropic streaming through the SDK's MessageStream helper
const stream = anthropic.messages.stream({ model, max_tokens: 32, system, messages: first });
let deltas = 0;
stream.on("text", () => deltas++);
const msg1 = await stream.finalMessage();
const text1 = msg1.content.map((b) => (b.type === "text" ? b.text : "")).join("");
check(deltas === 32, `anthropic: ${deltas} text deltas, want 32`);
check(text1.length === 32 * 4, `anthropic: text of ${text1.length} bytes, want 128`);
check(msg1.stop_reason === "max_tokens", `anthropic: stop_reason ${msg1.stop_reason}`);
check(msg1.usage.output_tokens === 32, `anthropic: output_tokens ${msg1.usage.output_tokens}`);
out.anthropic_stream = { deltas, usage: msg1.usage };

// 2. the next turn resends history: its prefix is served from cache
const second = [...first, { role: "assistant", content: text1 }, { role: "user", content: "continue" }];
const events = [];
const raw = await anthropic.messages.create({ model, max_tokens: 8, system, messages: second, stream: true });
for await (const ev of raw) events.push(ev.type);
check(events[0] === "message_start" && events.at(-1) === "message_stop", `anthropic: events ${events}`);
const msg2 = await anthropic.messages.create({ model, max_tokens: 8, system, messages: second });
check(msg2.usage.cache_read_input_tokens > 1000, `anthropic: cache_read_input_tokens ${msg2.usage.cache_read_input_tokens}`);
out.anthropic_second_turn = { events: [...new Set(events)], usage: msg2.usage };

// 3. OpenAI chat streaming with include_usage
const openai = new OpenAI({ baseURL: base + "/v1", apiKey: "sim", maxRetries: 0 });
const chat = [{ role: "system", content: filler("system", 600) }, { role: "user", content: filler("chat", 400) }];
const cs = await openai.chat.completions.create({
  model, messages: chat, max_tokens: 16, stream: true, stream_options: { include_usage: true },
});
let chatText = "", usage = null, finish = null;
for await (const chunk of cs) {
  if (chunk.choices.length > 0) {
    chatText += chunk.choices[0].delta?.content ?? "";
    finish = chunk.choices[0].finish_reason ?? finish;
  }
  if (chunk.usage) usage = chunk.usage;
}
check(chatText.length === 64, `openai chat: ${chatText.length} bytes`);
check(finish === "length", `openai chat: finish ${finish}`);
check(usage && usage.completion_tokens === 16, `openai chat: usage ${JSON.stringify(usage)}`);
// the system prompt is shared with the Anthropic requests above
check(usage.prompt_tokens_details.cached_tokens >= 592, `openai chat: cached ${usage.prompt_tokens_details.cached_tokens}`);
out.openai_chat_stream = { usage };

// 4. the SDK's stream helper and a non-streaming chat call
const helper = openai.chat.completions.stream({ model, messages: chat, max_tokens: 4 });
const final = await helper.finalChatCompletion();
check(final.choices[0].message.content.length === 16, "openai chat helper: text");
const whole = await openai.chat.completions.create({ model, messages: chat, max_tokens: 4 });
check(whole.usage.prompt_tokens_details.cached_tokens > 0, "openai chat: cached on repeat");

// 5. legacy completions, streaming
const comp = await openai.completions.create({ model, prompt: "once upon a time", max_tokens: 5, stream: true });
let compText = "";
for await (const chunk of comp) compText += chunk.choices[0]?.text ?? "";
check(compText.length === 20, `openai completions: ${compText.length} bytes`);

// 6. models list and errors in the SDKs' own types
const models = await openai.models.list();
check(models.data[0].id === model, `models: ${JSON.stringify(models.data)}`);
try {
  await anthropic.messages.create({ model, max_tokens: 4, messages: [{ role: "user", content: filler("x", 40000) }] });
  check(false, "anthropic: too-long prompt accepted");
} catch (e) {
  check(e instanceof Anthropic.BadRequestError, `anthropic: error type ${e?.constructor?.name}`);
  check(e.error?.error?.type === "invalid_request_error", `anthropic: error body ${JSON.stringify(e.error)}`);
}
try {
  await openai.chat.completions.create({ model, messages: [{ role: "user", content: filler("x", 40000) }] });
  check(false, "openai: too-long prompt accepted");
} catch (e) {
  check(e instanceof OpenAI.BadRequestError, `openai: error type ${e?.constructor?.name}`);
}
out.ok = true;
console.log(JSON.stringify(out));
